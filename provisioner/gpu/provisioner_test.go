package gpu

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/packet"

	"github.com/podvm-gpu/packer-plugin-podvm/bake"
	"github.com/podvm-gpu/packer-plugin-podvm/gpustack"
	"github.com/podvm-gpu/packer-plugin-podvm/shellquote"
)

var update = flag.Bool("update", false, "rewrite golden files")

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// testKey writes an armored public key to a file and returns its path and
// fingerprint.
func testKey(t *testing.T) (string, string) {
	t.Helper()
	created := time.Unix(1700000000, 0)
	e, err := openpgp.NewEntity("podvm test", "", "", &packet.Config{
		Algorithm: packet.PubKeyAlgoEdDSA, Curve: packet.Curve25519,
		Time: func() time.Time { return created },
	})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "key.asc")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := armor.Encode(f, openpgp.PublicKeyType, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Serialize(w); err != nil {
		t.Fatal(err)
	}
	w.Close()
	f.Close()
	return path, fmt.Sprintf("%X", e.PrimaryKey.Fingerprint)
}

// newTestProvisioner prepares a provisioner with settings, isolated from
// the host environment, with a fixed clock and no backoff.
func newTestProvisioner(t *testing.T, settings map[string]interface{}) *Provisioner {
	t.Helper()
	p := &Provisioner{
		lookupEnv: func(string) (string, bool) { return "", false },
		backoff:   func(int) time.Duration { return 0 },
		runID:     "test",
		indexer:   fakeIndexer,
	}
	clock := time.Unix(1700000000, 0)
	p.now = func() time.Time { clock = clock.Add(1500 * time.Millisecond); return clock }
	raw := map[string]interface{}{
		"source_date_epoch": "1700000000",
		"output_dir":        t.TempDir(),
	}
	for k, v := range settings {
		raw[k] = v
	}
	if err := p.Prepare(raw); err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	return p
}

type goldenCase struct {
	name     string
	img      func() *fakeImage
	settings map[string]interface{}
}

func goldenCases(t *testing.T) []goldenCase {
	key, _ := testKey(t)
	gpu := map[string]interface{}{"nvidia_container_toolkit_repo_keyring": key}
	repoOnly := map[string]interface{}{"enable_nvidia_gpu": "no", "local_repo": "yes"}
	return []goldenCase{
		{"debian-13-gpu-yes", debian13, gpu},
		{"debian-13-gpu-no-repo-yes", debian13, repoOnly},
		{"ubuntu-24.04-gpu-yes", ubuntu2404, gpu},
		{"ubuntu-24.04-gpu-no-repo-yes", ubuntu2404, repoOnly},
		{"debian-13-repo-closure-none-verify", debian13, map[string]interface{}{
			"enable_nvidia_gpu": "no", "local_repo": "yes", "local_repo_closure": "none", "verify": "yes"}},
	}
}

// provision runs the provisioner against a fake image and returns the
// communicator with its log.
func provision(t *testing.T, p *Provisioner, comm *fakeComm) error {
	t.Helper()
	return p.Provision(context.Background(), &recordingUi{comm: comm}, comm, map[string]interface{}{})
}

func cleanLog(log []string, outDir string) string {
	s := strings.Join(log, "\n") + "\n"
	return strings.ReplaceAll(s, outDir, "$OUTPUT_DIR")
}

func TestGolden(t *testing.T) {
	for _, tc := range goldenCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			p := newTestProvisioner(t, tc.settings)
			comm := newFakeComm(tc.img())
			if err := provision(t, p, comm); err != nil {
				t.Fatalf("Provision: %v", err)
			}
			got := cleanLog(comm.log, p.options.OutputDir)
			path := filepath.Join("testdata", tc.name+".txt")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./provisioner/gpu -update)", err)
			}
			if got != string(want) {
				t.Errorf("command log differs from %s (run go test ./provisioner/gpu -update and review the diff):\n%s", path, firstDiff(string(want), got))
			}
			// The host artifacts exist.
			for _, f := range []string{"local-packages.sources", "keyring.asc", "manifest.json", "gpu-operator-repo-configmap.yaml", "gpu-operator-values.yaml"} {
				if _, err := os.Stat(filepath.Join(p.options.OutputDir, f)); err != nil {
					t.Errorf("host artifact: %v", err)
				}
			}
		})
	}
}

func firstDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return fmt.Sprintf("line %d:\nwant: %s\ngot:  %s", i+1, wl, gl)
		}
	}
	return ""
}

func TestNothingToDo(t *testing.T) {
	for _, settings := range []map[string]interface{}{
		{"enable_nvidia_gpu": "no"},
		{"enable_nvidia_gpu": "no", "local_repo": "no"},
	} {
		p := newTestProvisioner(t, settings)
		comm := newFakeComm(debian13())
		if err := provision(t, p, comm); err != nil {
			t.Fatal(err)
		}
		if len(comm.cmds) != 0 {
			t.Errorf("%v: ran commands %q, want none", settings, comm.cmds)
		}
		if !slices.ContainsFunc(comm.log, func(s string) bool { return strings.Contains(s, "nothing to do") }) {
			t.Errorf("%v: log does not say there is nothing to do: %q", settings, comm.log)
		}
	}
}

// stepOfCommand maps each command of a successful run to the plan step
// that ran it (0 for detection, before any step).
func stepOfCommand(log []string) []int {
	var steps []int
	cur := 0
	for _, l := range log {
		var k, n int
		if _, err := fmt.Sscanf(l, "ui: [%d/%d]", &k, &n); err == nil {
			cur = k
		}
		if strings.HasPrefix(l, "run: ") {
			steps = append(steps, cur)
		}
	}
	return steps
}

func TestFailureAtEveryCommand(t *testing.T) {
	var output []string
	for i := 1; i <= 25; i++ {
		output = append(output, fmt.Sprintf("output line %d", i))
	}
	for _, tc := range goldenCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			ok := newFakeComm(tc.img())
			p := newTestProvisioner(t, tc.settings)
			if err := provision(t, p, ok); err != nil {
				t.Fatal(err)
			}
			target, err := detect(context.Background(), &runner{comm: newFakeComm(tc.img()), tmpl: DefaultExecuteCommand})
			if err != nil {
				t.Fatal(err)
			}
			plan, err := gpustack.NewPlan(p.options, target)
			if err != nil {
				t.Fatal(err)
			}
			steps := stepOfCommand(ok.log)
			for n := 1; n <= len(ok.cmds); n++ {
				comm := newFakeComm(tc.img())
				comm.failAt, comm.failStatus, comm.failOutput = n, 42, strings.Join(output, "\n")+"\n"
				p := newTestProvisioner(t, tc.settings)
				err := provision(t, p, comm)
				if err == nil {
					t.Fatalf("command %d (%s): Provision succeeded", n, ok.cmds[n-1])
				}
				var cerr *CommandError
				if !errors.As(err, &cerr) {
					t.Fatalf("command %d: error %v is not a CommandError", n, err)
				}
				if cerr.Command != ok.cmds[n-1] || cerr.ExitStatus != 42 {
					t.Errorf("command %d: CommandError{%q, %d}, want {%q, 42}", n, cerr.Command, cerr.ExitStatus, ok.cmds[n-1])
				}
				if len(cerr.Output) != tailLines || cerr.Output[0] != "output line 6" || cerr.Output[tailLines-1] != "output line 25" {
					t.Errorf("command %d: output tail %q, want the last %d lines", n, cerr.Output, tailLines)
				}
				msg := err.Error()
				for _, want := range []string{ok.cmds[n-1], "status 42", "output line 25"} {
					if !strings.Contains(msg, want) {
						t.Errorf("command %d: error message lacks %q:\n%s", n, want, msg)
					}
				}
				if strings.Contains(msg, "output line 5\n") {
					t.Errorf("command %d: error carries more than the last %d lines", n, tailLines)
				}
				if steps[n-1] == 0 {
					if !strings.Contains(msg, "detecting the image") {
						t.Errorf("command %d: detection failure does not say so: %s", n, msg)
					}
					continue
				}
				var serr *StepError
				if !errors.As(err, &serr) {
					t.Fatalf("command %d: error %v is not a StepError", n, err)
				}
				want := plan.Steps[steps[n-1]-1]
				if serr.Index != steps[n-1] || serr.ID != want.ID || serr.Title != want.Title {
					t.Errorf("command %d: step %d %s, want %d %s", n, serr.Index, serr.ID, steps[n-1], want.ID)
				}
				if !strings.Contains(msg, want.ID) || !strings.Contains(msg, want.Title) {
					t.Errorf("command %d: message does not name step %s (%s): %s", n, want.ID, want.Title, msg)
				}
				// Nothing runs after the failed command, except removing the
				// half-downloaded repository beside the real one.
				after := comm.cmds[n:]
				if len(after) == 1 && strings.HasPrefix(after[0], "rm -rf ") && strings.HasSuffix(after[0], ".podvm-new") {
					after = nil
				}
				if len(after) != 0 {
					t.Errorf("command %d: %d commands ran after it: %q", n, len(after), after)
				}
			}
		})
	}
}

func TestNoKernel(t *testing.T) {
	img := debian13()
	img.kernels = nil
	p := newTestProvisioner(t, nil)
	err := provision(t, p, newFakeComm(img))
	if err == nil || !strings.Contains(err.Error(), "no kernel in the image") {
		t.Fatalf("error %v, want one saying there is no kernel", err)
	}
}

func TestCancellation(t *testing.T) {
	key, _ := testKey(t)
	p := newTestProvisioner(t, map[string]interface{}{"nvidia_container_toolkit_repo_keyring": key})
	comm := newFakeComm(debian13())
	// Hang the driver install: a long command on a communicator that
	// ignores the context.
	comm.respond = func(n int, inner string) (string, int, bool) {
		if strings.Contains(inner, "--no-install-recommends nvidia") && comm.hangAt == 0 {
			comm.mu.Lock()
			comm.hangAt = n
			comm.mu.Unlock()
		}
		return "", 0, false
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Provision(ctx, &recordingUi{comm: comm}, comm, nil) }()
	deadline := time.After(5 * time.Second)
	for {
		comm.mu.Lock()
		hung := comm.hangAt != 0 && len(comm.cmds) >= comm.hangAt
		comm.mu.Unlock()
		if hung {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("Provision returned before the hanging command: %v", err)
		case <-deadline:
			t.Fatal("the hanging command never ran")
		case <-time.After(10 * time.Millisecond):
		}
	}
	start := time.Now()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("error %v, want context.Canceled", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("stopped %s after cancellation, want under a second", d)
		}
	case <-time.After(time.Second):
		t.Fatal("Provision did not stop within a second of cancellation")
	}
}

func TestTransientAptFailureIsRetried(t *testing.T) {
	p := newTestProvisioner(t, map[string]interface{}{"enable_nvidia_gpu": "no", "local_repo": "yes"})
	comm := newFakeComm(debian13())
	failed := 0
	comm.respond = func(n int, inner string) (string, int, bool) {
		if strings.HasSuffix(inner, "force-confold update") && failed < 2 {
			failed++
			// apt-get update exits 0 on an unreachable mirror.
			return "W: Failed to fetch http://mirror.example/debian/dists/trixie/InRelease  Temporary failure resolving 'mirror.example'\n", 0, true
		}
		return "", 0, false
	}
	if err := provision(t, p, comm); err != nil {
		t.Fatal(err)
	}
	if n := countContaining(comm.cmds, "force-confold update"); n != 3 {
		t.Errorf("apt-get update ran %d times, want 3", n)
	}
}

func TestTransientAptFailureGivesUp(t *testing.T) {
	p := newTestProvisioner(t, map[string]interface{}{"enable_nvidia_gpu": "no", "local_repo": "yes", "transfer_retries": 1})
	comm := newFakeComm(debian13())
	comm.respond = func(n int, inner string) (string, int, bool) {
		if strings.HasSuffix(inner, "force-confold update") {
			return "E: Failed to fetch http://mirror.example/debian/dists/trixie/InRelease  Could not connect to mirror.example\n", 100, true
		}
		return "", 0, false
	}
	err := provision(t, p, comm)
	var serr *StepError
	if !errors.As(err, &serr) || serr.ID != "apt-update" {
		t.Fatalf("error %v, want a failure of step apt-update", err)
	}
	if n := countContaining(comm.cmds, "force-confold update"); n != 2 {
		t.Errorf("apt-get update ran %d times, want 2 (transfer_retries=1)", n)
	}
}

func TestPermanentAptFailureIsNotRetried(t *testing.T) {
	p := newTestProvisioner(t, map[string]interface{}{"enable_nvidia_gpu": "no", "local_repo": "yes"})
	comm := newFakeComm(debian13())
	comm.respond = func(n int, inner string) (string, int, bool) {
		if strings.Contains(inner, "--download-only") {
			return "E: Unable to locate package linux-headers-6.12.57+deb13-amd64\n", 100, true
		}
		return "", 0, false
	}
	if err := provision(t, p, comm); err == nil {
		t.Fatal("Provision succeeded")
	}
	if n := countContaining(comm.cmds, "--download-only"); n != 1 {
		t.Errorf("download ran %d times, want 1", n)
	}
}

func TestUploadRetries(t *testing.T) {
	p := newTestProvisioner(t, map[string]interface{}{"enable_nvidia_gpu": "no", "local_repo": "yes"})
	comm := newFakeComm(debian13())
	comm.uploadFailures = 2
	if err := provision(t, p, comm); err != nil {
		t.Fatal(err)
	}
	if n := countContaining(comm.log, "upload failed"); n != 2 {
		t.Errorf("%d failed uploads logged, want 2", n)
	}

	p = newTestProvisioner(t, map[string]interface{}{"enable_nvidia_gpu": "no", "local_repo": "yes", "transfer_retries": 0})
	comm = newFakeComm(debian13())
	comm.uploadFailures = 1
	err := provision(t, p, comm)
	var serr *StepError
	if !errors.As(err, &serr) || serr.ID != "local-repo" || !strings.Contains(err.Error(), "connection reset by peer") {
		t.Fatalf("error %v, want the upload failure in step local-repo", err)
	}
}

func countContaining(ss []string, sub string) int {
	n := 0
	for _, s := range ss {
		if strings.Contains(s, sub) {
			n++
		}
	}
	return n
}

func TestExecuteCommandAndEnv(t *testing.T) {
	p := newTestProvisioner(t, map[string]interface{}{
		"enable_nvidia_gpu": "no", "local_repo": "yes",
		"execute_command": "sudo -n sh -c {{.Command}}",
		"env":             map[string]string{"http_proxy": "http://proxy:3128", "NOTE": "it's"},
	})
	comm := newFakeComm(debian13())
	if err := provision(t, p, comm); err != nil {
		t.Fatal(err)
	}
	// The first command, after what the ui says (warnings, detection).
	var first string
	for _, l := range comm.log {
		if c, ok := strings.CutPrefix(l, "run: "); ok {
			first = c
			break
		}
	}
	want := `sudo -n sh -c 'export NOTE='\''it'\''\'\'''\''s'\'' http_proxy=http://proxy:3128; cat /etc/os-release 2>/dev/null || cat /usr/lib/os-release'`
	if first != want {
		t.Errorf("first command\n got %s\nwant %s", first, want)
	}
}

// TestAutoDriverSourcePrecompiled: where the probe finds the precompiled
// modules, the provisioner installs them, skips DKMS and its signing,
// checks the modules against the kernel's key, and the manifest says so.
func TestAutoDriverSourcePrecompiled(t *testing.T) {
	key, _ := testKey(t)
	p := newTestProvisioner(t, map[string]interface{}{"nvidia_container_toolkit_repo_keyring": key})
	img := ubuntu2404()
	img.probe = "podvm-gpu: the archive has linux-modules-nvidia-570-server-open-6.8.0-1028-azure 6.8.0-1028.33+1\nprecompiled\n"
	delete(img.files, "/usr/share/podvm-gpu/module-signing.der")
	img.files["/usr/share/podvm-gpu/module-signatures.tsv"] = []byte("6.8.0-1028-azure\t/usr/lib/modules/6.8.0-1028-azure/kernel/nvidia-570srv/nvidia.ko\tBuild time autogenerated kernel key\t4A:1B\tsha512\n")
	comm := newFakeComm(img)
	comm.respond = func(_ int, inner string) (string, int, bool) {
		if inner == "cat "+shellquote.Word(gpustack.ModuleSignatures) {
			return string(img.files[gpustack.ModuleSignatures]), 0, true
		}
		return "", 0, false
	}
	if err := provision(t, p, comm); err != nil {
		t.Fatalf("Provision: %v", err)
	}
	log := strings.Join(comm.cmds, "\n")
	for _, want := range []string{
		"--no-install-recommends linux-modules-nvidia-570-server-open-6.8.0-1028-azure nvidia-headless-no-dkms-570-server-open nvidia-utils-570-server",
		"podvm-kernel-signatures",
		// DKMS's pause ends on this branch too.
		" podvm-dkms 'finish'",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("no command with %q", want)
		}
	}
	for _, unwanted := range []string{" podvm-dkms 'build'", " podvm-dkms 'restore'", " podvm-sign-modules ", "nvidia-headless-570-server-open", "linux-headers-6.8.0-1028-azure' 'nvidia"} {
		if strings.Contains(log, unwanted) {
			t.Errorf("command with %q on the precompiled branch", unwanted)
		}
	}
	if all := strings.Join(comm.log, "\n"); !strings.Contains(all, "driver-source\n    | precompiled\n") || !strings.Contains(all, shellquote.Word(gpustack.DriverSourceFile)) {
		t.Errorf("no upload of %s with precompiled", gpustack.DriverSourceFile)
	}
	data, err := os.ReadFile(filepath.Join(p.options.OutputDir, bake.ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	var m bake.Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	ms := m.GPU.ModuleSigning
	if m.GPU.Source != "auto" || m.GPU.SourceTaken != "precompiled" || ms == nil || ms.Mode != "distribution" ||
		ms.Signer != "Build time autogenerated kernel key" || ms.CertSHA256 != "" || len(ms.Modules) != 1 || ms.Modules[0].SigKey != "4A:1B" {
		t.Errorf("manifest gpu %+v, module signing %+v", m.GPU, ms)
	}
}
