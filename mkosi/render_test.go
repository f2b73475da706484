package mkosi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ProtonMail/go-crypto/openpgp"

	"github.com/podvm-gpu/packer-plugin-podvm/gpustack"
	"github.com/podvm-gpu/packer-plugin-podvm/repokey"
	"github.com/podvm-gpu/packer-plugin-podvm/settings"
)

var update = flag.Bool("update", false, "rewrite golden files")

// goldenBin is a binary path outside /usr, so the trees show the
// ExtraSearchPaths= the repository step needs.
const goldenBin = "/opt/podvm/bin/packer-plugin-podvm"

// treeCase is one generated tree of the golden and mkosi tests.
type treeCase struct {
	distro, release string
	gpu             string
	// source is nvidia_driver_source; "" leaves the default (auto).
	source string
}

func (c treeCase) name() string {
	n := fmt.Sprintf("%s-%s-gpu-%s", c.distro, c.release, c.gpu)
	if c.source != "" {
		n += "-" + c.source
	}
	return n
}

// settings are the case's settings beyond the build cache and mirrors.
func (c treeCase) settings() map[string]string {
	s := map[string]string{"enable_nvidia_gpu": c.gpu}
	if c.source != "" {
		s["nvidia_driver_source"] = c.source
	}
	if c.gpu == "yes" {
		// Local key files: the tests never reach NVIDIA. Any key will do
		// for the CUDA repository, as nothing is fetched from it.
		s["nvidia_container_toolkit_repo_keyring"] = filepath.Join("testdata", "toolkit-key.asc")
		if c.source == "cuda-repo" {
			s["nvidia_cuda_repo_keyring"] = filepath.Join("testdata", "toolkit-key.asc")
		}
	}
	return s
}

const goldenCacheDir = "/var/cache/podvm-golden"

var treeCases = []treeCase{
	{distro: "debian", release: "13", gpu: "yes"}, {distro: "debian", release: "13", gpu: "no"},
	{distro: "ubuntu", release: "24.04", gpu: "yes"}, {distro: "ubuntu", release: "24.04", gpu: "no"},
	{distro: "ubuntu", release: "26.04", gpu: "yes"}, {distro: "ubuntu", release: "26.04", gpu: "no"},
}

// plan resolves settings from explicit values only, so the environment of
// whoever runs the tests cannot change the trees.
func plan(t *testing.T, distro, release string, given map[string]string) *gpustack.Plan {
	t.Helper()
	// The generator resolves the cache directory; the trees name it.
	explicit := map[string]settings.Raw{}
	if _, ok := given["build_cache_dir"]; !ok {
		explicit["build_cache_dir"] = settings.Scalar(goldenCacheDir)
	}
	var security string
	for k, v := range given {
		if k == securityMirrorKey {
			security = v
			continue
		}
		explicit[k] = settings.Scalar(v)
	}
	res, err := settings.Resolve(settings.Input{Explicit: explicit, ExplicitFrom: settings.FromFlag,
		LookupEnv: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	tg, err := gpustack.LookupRelease(distro, release, "amd64")
	if err != nil {
		t.Fatal(err)
	}
	tg.KernelsAtBuildTime = true
	tg.Mirror, tg.SecurityMirror = exampleMirror(distro), security
	p, err := gpustack.NewPlan(res.Options, tg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// render renders the case's tree; cacheDir "" is the goldens' fixed one.
func (c treeCase) render(t *testing.T, bin, cacheDir string) []File {
	t.Helper()
	settings := c.settings()
	settings["source_date_epoch"] = "1700000000"
	if cacheDir != "" {
		settings["build_cache_dir"] = cacheDir
	}
	settings[securityMirrorKey] = exampleMirror(c.distro) + "-security"
	files, err := Render(context.Background(), Config{Plan: plan(t, c.distro, c.release, settings), Bin: bin, HTTPClient: noNetwork})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// securityMirrorKey in plan's settings is the target's security mirror,
// not a setting.
const securityMirrorKey = "(security mirror)"

// exampleMirror is a made-up archive mirror: the trees and tests name no
// real archive host and do not read the host's apt configuration.
func exampleMirror(distro string) string { return "http://mirror.example/" + distro }

// roundTrip is an http.RoundTripper from a function.
type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// noNetwork is a client that fails every request: the tests never reach
// the network.
var noNetwork = &http.Client{Transport: roundTrip(func(r *http.Request) (*http.Response, error) {
	return nil, fmt.Errorf("test fetched %s", r.URL)
})}

// serving is a client that answers every request with body.
func serving(body []byte) *http.Client {
	return &http.Client{Transport: roundTrip(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: http.StatusOK, Status: "200 OK", Body: io.NopCloser(bytes.NewReader(body)),
			ContentLength: int64(len(body)), Request: r, Header: http.Header{}}, nil
	})}
}

// dump renders a tree as one reviewable text: each file with its mode,
// binary files by size and digest.
func dump(files []File) string {
	var b strings.Builder
	for _, f := range files {
		fmt.Fprintf(&b, "=== %s (%04o)\n", f.Path, f.Mode)
		if utf8.Valid(f.Data) && !strings.ContainsRune(string(f.Data), 0) {
			b.Write(f.Data)
			if len(f.Data) > 0 && f.Data[len(f.Data)-1] != '\n' {
				b.WriteString("\n<no newline at end>\n")
			}
		} else {
			fmt.Fprintf(&b, "<binary, %d bytes, sha256 %x>\n", len(f.Data), sha256.Sum256(f.Data))
		}
	}
	return b.String()
}

func TestGoldenTrees(t *testing.T) {
	for _, c := range treeCases {
		t.Run(c.name(), func(t *testing.T) {
			got := dump(c.render(t, goldenBin, ""))
			path := filepath.Join("testdata", "tree", c.name()+".txt")
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./mkosi -update)", err)
			}
			if got != string(want) {
				t.Errorf("%s differs from the rendered tree; run go test ./mkosi -update and review the diff", path)
			}
		})
	}
}

// TestStepTitles: every step of the plan reaches run-steps, with its
// title, and the scripts call run-steps for it.
func TestStepTitles(t *testing.T) {
	c := treeCases[0]
	p := plan(t, c.distro, c.release, map[string]string{"enable_nvidia_gpu": "yes",
		"nvidia_container_toolkit_repo_keyring": filepath.Join("testdata", "toolkit-key.asc")})
	files, err := Render(context.Background(), Config{Plan: p, Bin: goldenBin, HTTPClient: noNetwork})
	if err != nil {
		t.Fatal(err)
	}
	var scripts strings.Builder
	for _, f := range files {
		if strings.HasSuffix(f.Path, ".sh") && strings.Contains(f.Path, ".d/") {
			if f.Mode != 0o755 {
				t.Errorf("%s: mode %04o, want 0755", f.Path, f.Mode)
			}
			scripts.Write(f.Data)
		}
	}
	for _, phase := range []string{phaseInstall, phaseCheck} {
		if !strings.Contains(scripts.String(), "mkosi run-steps --plan \"$SRCDIR\"/'mkosi.profiles/nvidia-gpu/podvm-plan.json' --phase "+phase+" ") {
			t.Errorf("no script runs the %s phase", phase)
		}
	}
	pf := readPlanFile(t, files)
	if len(pf.Steps) != len(p.Steps) {
		t.Fatalf("plan file has %d steps, the plan %d", len(pf.Steps), len(p.Steps))
	}
	for i, s := range p.Steps {
		if pf.Steps[i].ID != s.ID || pf.Steps[i].Title != s.Title {
			t.Errorf("step %d: %s %q, want %s %q", i+1, pf.Steps[i].ID, pf.Steps[i].Title, s.ID, s.Title)
		}
	}
}

func TestRenderErrors(t *testing.T) {
	p := plan(t, "debian", "13", map[string]string{"enable_nvidia_gpu": "yes"})
	// The default toolkit key is fetched and must match NVIDIA's pinned
	// fingerprint; a test key does not.
	key, err := os.ReadFile(filepath.Join("testdata", "toolkit-key.asc"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Render(context.Background(), Config{Plan: p, Bin: goldenBin, HTTPClient: serving(key)}); err == nil ||
		!strings.Contains(err.Error(), "no key with fingerprint") {
		t.Errorf("wrong key: got %v, want a fingerprint error", err)
	}
	if _, err := Render(context.Background(), Config{Plan: p, Bin: goldenBin, HTTPClient: noNetwork}); err == nil ||
		!strings.Contains(err.Error(), "offline builds") {
		t.Errorf("unreachable key: got %v, want a hint about a local key file", err)
	}
	p = plan(t, "debian", "13", map[string]string{"enable_nvidia_gpu": "yes", "nvidia_container_toolkit": "no"})
	if _, err := Render(context.Background(), Config{Plan: p, Bin: "relative/bin", HTTPClient: noNetwork}); err == nil {
		t.Error("relative binary path: want an error")
	}
	noArchive := *p
	noArchive.Archive = nil
	if _, err := Render(context.Background(), Config{Plan: &noArchive, Bin: goldenBin, HTTPClient: noNetwork}); err == nil ||
		!strings.Contains(err.Error(), "give the target a mirror") {
		t.Errorf("no mirror: got %v, want a \"give the target a mirror\" error", err)
	}
	p.Target.KernelsAtBuildTime = false
	if _, err := Render(context.Background(), Config{Plan: p, Bin: goldenBin, HTTPClient: noNetwork}); err == nil {
		t.Error("plan with known kernels: want an error")
	}
}

// TestSandboxSources checks that the sandbox sources use the mirrors given
// and leave the security suite out without a security mirror, in the
// top-level list and in the profile's (which adds components).
func TestSandboxSources(t *testing.T) {
	for _, sec := range []string{"", "http://security.example/debian-security"} {
		p := plan(t, "debian", "13", map[string]string{"enable_nvidia_gpu": "yes", securityMirrorKey: sec,
			"nvidia_container_toolkit_repo_keyring": filepath.Join("testdata", "toolkit-key.asc")})
		files, err := Render(context.Background(), Config{Plan: p, Bin: goldenBin, HTTPClient: noNetwork})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, f := range files {
			if !strings.HasSuffix(f.Path, "mkosi.sandbox/etc/apt/sources.list.d/mkosi.sources") {
				continue
			}
			n++
			s := string(f.Data)
			if !strings.Contains(s, "URIs: http://mirror.example/debian\nSuites: trixie trixie-updates\n") {
				t.Errorf("%s: archive missing:\n%s", f.Path, s)
			}
			if got := strings.Contains(s, "trixie-security"); got != (sec != "") || (sec != "" && !strings.Contains(s, "URIs: "+sec+"\n")) {
				t.Errorf("%s with security mirror %q:\n%s", f.Path, sec, s)
			}
		}
		if n != 2 {
			t.Errorf("%d sandbox sources files, want the top-level one and the profile's", n)
		}
	}
}

func TestINIValue(t *testing.T) {
	for in, want := range map[string]string{"a%b": "a%%b", "plain": "plain"} {
		if got, err := iniValue(in); err != nil || got != want {
			t.Errorf("iniValue(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"a#b", "a\nb", " lead", "trail "} {
		if _, err := iniValue(bad); err == nil {
			t.Errorf("iniValue(%q): want an error", bad)
		}
	}
	for _, bad := range []string{"a b", "a,b", ""} {
		if _, err := iniItem(bad); err == nil {
			t.Errorf("iniItem(%q): want an error", bad)
		}
	}
}

func TestWriteRefusesNonEmpty(t *testing.T) {
	dir := t.TempDir()
	files := []File{{Path: "mkosi.conf", Mode: 0o644, Data: []byte("x\n")}, {Path: "a/b/run.sh", Mode: 0o755, Data: []byte("#!/bin/sh\n")}}
	if err := Write(dir, files, false); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "a/b/run.sh")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("run.sh: %v %v", fi, err)
	}
	if err := Write(dir, files[:1], false); err == nil {
		t.Fatal("non-empty dir without force: want an error")
	}
	if err := os.WriteFile(filepath.Join(dir, "mkosi.local.conf"), []byte("mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Write(dir, files[:1], true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "a")); !os.IsNotExist(err) {
		t.Errorf("stale a/ of the previous generation left behind: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "mkosi.local.conf")); err != nil {
		t.Errorf("the user's mkosi.local.conf was removed: %v", err)
	}
}

// TestVerifyRepoClosure: the tree hands the plan's self-test to run-steps
// as the plan has it, closure included, and run-steps runs it through the
// executor (not one of the actions mkosi states itself): the one
// implementation the provisioner runs too.
func TestVerifyRepoClosure(t *testing.T) {
	for closure, want := range map[string]bool{"full": true, "none": false} {
		p := plan(t, "debian", "13", map[string]string{"enable_nvidia_gpu": "yes", "local_repo_closure": closure,
			"nvidia_container_toolkit_repo_keyring": filepath.Join("testdata", "toolkit-key.asc")})
		files, err := Render(context.Background(), Config{Plan: p, Bin: goldenBin, HTTPClient: noNetwork})
		if err != nil {
			t.Fatal(err)
		}
		pf := readPlanFile(t, files)
		var found []gpustack.VerifyRepo
		for _, s := range pf.Steps {
			for _, a := range s.Actions {
				if v, ok := a.(gpustack.VerifyRepo); ok {
					found = append(found, v)
					if declared(v) {
						t.Error("VerifyRepo is declared to mkosi, not run by the executor")
					}
					if !s.Checks() {
						t.Errorf("step %s holds VerifyRepo but does not only check", s.ID)
					}
				}
			}
		}
		if len(found) != 1 || found[0].Closure != want || !slices.Equal(found[0].Packages, []string{"linux-headers-{kernel}"}) {
			t.Errorf("local_repo_closure=%s: plan file's VerifyRepo %+v, want one with Closure %v for linux-headers-{kernel}", closure, found, want)
		}
	}
}

// readPlanFile reads the tree's podvm-plan.json as run-steps does.
func readPlanFile(t *testing.T, files []File) planFile {
	t.Helper()
	for _, f := range files {
		if path.Base(f.Path) == planFileName {
			var pf planFile
			if err := json.Unmarshal(f.Data, &pf); err != nil {
				t.Fatal(err)
			}
			return pf
		}
	}
	t.Fatal("the tree has no " + planFileName)
	return planFile{}
}

// TestFetchedKey checks the fetched repository key path (repokey): only the
// entities with a pinned fingerprint reach the tree, and a key URL that is
// not https is refused.
func TestFetchedKey(t *testing.T) {
	armored, err := os.ReadFile(filepath.Join("testdata", "toolkit-key.asc"))
	if err != nil {
		t.Fatal(err)
	}
	pinned, err := repokey.Parse(armored)
	if err != nil || len(pinned) != 1 {
		t.Fatalf("test key: %v (%d entities)", err, len(pinned))
	}
	other, err := openpgp.NewEntity("other", "", "other@podvm.invalid", nil)
	if err != nil {
		t.Fatal(err)
	}
	served, err := repokey.Binary(openpgp.EntityList{other, pinned[0]})
	if err != nil {
		t.Fatal(err)
	}
	// withKeyURL is the toolkit plan with its fetched key pinned to the
	// test key and named by keyURL.
	withKeyURL := func(keyURL string) (*gpustack.Plan, string) {
		p := plan(t, "debian", "13", map[string]string{"enable_nvidia_gpu": "yes"})
		keyringPath := ""
		for _, s := range p.Steps {
			for j, a := range s.Actions {
				if src, ok := a.(gpustack.AptSource); ok && src.Key.URL != "" {
					src.Key.URL, src.Key.Fingerprints = keyURL, []string{repokey.Fingerprint(pinned[0])}
					s.Actions[j], keyringPath = src, src.Keyring
				}
			}
		}
		if keyringPath == "" {
			t.Fatal("the plan fetches no key")
		}
		return p, keyringPath
	}

	p, keyringPath := withKeyURL("https://keys.example/gpgkey")
	files, err := Render(context.Background(), Config{Plan: p, Bin: goldenBin, HTTPClient: serving(served)})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		if !strings.HasSuffix(f.Path, keyringPath) {
			continue
		}
		n++
		got, err := openpgp.ReadKeyRing(bytes.NewReader(f.Data))
		if err != nil || len(got) != 1 || repokey.Fingerprint(got[0]) != repokey.Fingerprint(pinned[0]) || got[0].PrivateKey != nil {
			t.Errorf("%s: %v, %d entities; want the pinned public key only", f.Path, err, len(got))
		}
	}
	if n != 2 {
		t.Errorf("%d keyring files, want the sandbox's and the image's", n)
	}

	p, _ = withKeyURL("http://keys.example/gpgkey")
	if _, err := Render(context.Background(), Config{Plan: p, Bin: goldenBin, HTTPClient: serving(served)}); err == nil ||
		!strings.Contains(err.Error(), "https") {
		t.Errorf("http key URL: got %v, want it refused", err)
	}
}

// A blocked destination is found before anything changes: the tree of the
// previous generation stays whole, and no staging directory is left.
func TestWriteForceIsAllOrNothing(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "tree")
	old := []File{{Path: "mkosi.conf", Mode: 0o644, Data: []byte("old\n")}, {Path: "mkosi.extra/etc/x.conf", Mode: 0o644, Data: []byte("old x\n")}}
	if err := Write(dir, old, false); err != nil {
		t.Fatal(err)
	}
	// The user's directory stands where the new generation writes a file.
	if err := os.MkdirAll(filepath.Join(dir, "mkosi.postinst.d/50-podvm.sh/mine"), 0o755); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(parent, ".tree.podvm-tmp-999999999-1")
	if err := os.MkdirAll(stale, 0o755); err != nil {
		t.Fatal(err)
	}
	next := []File{{Path: "mkosi.conf", Mode: 0o644, Data: []byte("new\n")}, {Path: "mkosi.postinst.d/50-podvm.sh", Mode: 0o755, Data: []byte("#!/bin/sh\n")}}
	err := Write(dir, next, true)
	if err == nil || !strings.Contains(err.Error(), "is a directory") || !strings.Contains(err.Error(), "nothing was changed") {
		t.Fatalf("blocked write: %v", err)
	}
	for p, want := range map[string]string{"mkosi.conf": "old\n", "mkosi.extra/etc/x.conf": "old x\n"} {
		if b, err := os.ReadFile(filepath.Join(dir, p)); err != nil || string(b) != want {
			t.Errorf("%s after a refused write: %q, %v", p, b, err)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(parent, ".tree.podvm-tmp-*")); len(left) > 0 {
		t.Errorf("staging left behind: %v", left)
	}
	// With the way clear, the new generation replaces the old one.
	if err := os.RemoveAll(filepath.Join(dir, "mkosi.postinst.d")); err != nil {
		t.Fatal(err)
	}
	if err := Write(dir, next, true); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "mkosi.conf")); string(b) != "new\n" {
		t.Errorf("mkosi.conf %q", b)
	}
	if _, err := os.Stat(filepath.Join(dir, "mkosi.extra")); !os.IsNotExist(err) {
		t.Errorf("the previous generation's mkosi.extra is still there: %v", err)
	}
}

// TestAgentTreeSkeleton: a pod VM binaries tree becomes a skeleton tree of
// the top-level mkosi.conf, with or without the GPU profile; a path mkosi
// would misread is refused.
func TestAgentTreeSkeleton(t *testing.T) {
	for _, gpu := range []string{"yes", "no"} {
		settings := map[string]string{"enable_nvidia_gpu": gpu, "source_date_epoch": "1700000000",
			"nvidia_container_toolkit_repo_keyring": filepath.Join("testdata", "toolkit-key.asc"),
			securityMirrorKey:                       exampleMirror("debian") + "-security"}
		p := plan(t, "debian", "13", settings)
		files, err := Render(context.Background(), Config{Plan: p, Bin: goldenBin, HTTPClient: noNetwork, AgentTree: "/srv/podvm-binaries"})
		if err != nil {
			t.Fatal(err)
		}
		var top string
		n := 0
		for _, f := range files {
			if f.Path == "mkosi.conf" {
				top = string(f.Data)
			}
			n += strings.Count(string(f.Data), "SkeletonTrees=/srv/podvm-binaries")
		}
		if !strings.Contains(top, "[Content]") || !strings.Contains(top, "\nSkeletonTrees=/srv/podvm-binaries\n") || n != 1 {
			t.Errorf("gpu %s: the tree is not the top-level mkosi.conf's skeleton tree (once, %d times):\n%s", gpu, n, top)
		}
		_, err = Render(context.Background(), Config{Plan: p, Bin: goldenBin, HTTPClient: noNetwork, AgentTree: "/srv/a:b"})
		if err == nil || !strings.Contains(err.Error(), "SkeletonTrees") {
			t.Errorf("gpu %s: a tree path with ':' rendered (%v)", gpu, err)
		}
	}
}
