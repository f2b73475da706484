package gpustack

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/podvm-gpu/packer-plugin-podvm/chroot/chroottest"
	"github.com/podvm-gpu/packer-plugin-podvm/internal/shellcheck"
)

// The stand-ins for the tools the CDI script runs: each records its
// arguments in $CDI_TEST_LOG. modprobe fails for $CDI_TEST_NO_MODULE;
// nvidia-ctk cdi generate writes $CDI_TEST_SPEC where --output says, as the
// real one writes what it found.
const (
	fakeModprobe = `#!/bin/sh
echo "modprobe $*" >>"$CDI_TEST_LOG"
if [ "$1" = "${CDI_TEST_NO_MODULE:-}" ]; then
	echo "modprobe: FATAL: Module $1 not found in directory /lib/modules/test" >&2
	exit 1
fi
`
	fakeNvidiaCtk = `#!/bin/sh
echo "nvidia-ctk $*" >>"$CDI_TEST_LOG"
if [ "$1 $2" = "cdi generate" ]; then
	cp "$CDI_TEST_SPEC" "${3#--output=}"
fi
`
)

type cdiRun struct {
	spec           string   // where the script was told to write the spec
	calls          []string // the commands the script ran, in order
	stdout, stderr string
	err            error
}

// runCDIScript runs the embedded script, the bytes the image gets, with sh
// and the stand-in tools; sample is the spec nvidia-ctk "generates".
// args are the script's arguments after the spec's path; noModule is a
// module that fails to load ("" for none).
func runCDIScript(t *testing.T, sample string, noModule string, args ...string) cdiRun {
	t.Helper()
	chroottest.RequireTools(t, "sh", "grep", "sort", "tr", "cp", "mv")
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	writeTestFile(t, filepath.Join(bin, "modprobe"), fakeModprobe, 0o755)
	writeTestFile(t, filepath.Join(bin, "nvidia-ctk"), fakeNvidiaCtk, 0o755)
	script := filepath.Join(dir, "nvidia-cdi-generate")
	writeTestFile(t, script, cdiScript, 0o755)
	samplePath := filepath.Join(dir, "sample.yaml")
	writeTestFile(t, samplePath, sample, 0o644)

	r := cdiRun{spec: filepath.Join(dir, "run", "cdi", "nvidia.yaml")}
	log := filepath.Join(dir, "calls.log")
	cmd := exec.Command("sh", append([]string{script, r.spec}, args...)...)
	for _, kv := range os.Environ() {
		// Outside the journal the script prints no priority prefix.
		if !strings.HasPrefix(kv, "JOURNAL_STREAM=") && !strings.HasPrefix(kv, "PATH=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"CDI_TEST_LOG="+log, "CDI_TEST_SPEC="+samplePath, "CDI_TEST_NO_MODULE="+noModule)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	r.err = cmd.Run()
	r.stdout, r.stderr = stdout.String(), stderr.String()
	if b, err := os.ReadFile(log); err == nil {
		r.calls = strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	}
	return r
}

func writeTestFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

func readSample(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "cdi", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestCDIScriptCheck runs the script on specs shaped like nvidia-ctk's: it
// keeps one that names a GPU, /dev/nvidiactl and /dev/nvidia-uvm, and
// fails on, and moves aside, one that lacks any of them.
func TestCDIScriptCheck(t *testing.T) {
	good := readSample(t, "good.yaml")
	tests := []struct {
		name, sample string
		missing      string // what the failure names; "" when the spec passes
	}{
		{name: "good", sample: good},
		{name: "quoted paths", sample: strings.NewReplacer(
			"path: /dev/nvidia0", `path: "/dev/nvidia0"`,
			"path: /dev/nvidia-uvm\n", "path: '/dev/nvidia-uvm'\n",
			"path: /dev/nvidiactl", `path: "/dev/nvidiactl"`).Replace(good)},
		{name: "no uvm", sample: readSample(t, "no-uvm.yaml"), missing: "/dev/nvidia-uvm"},
		// nvidia-uvm-tools is not the node CUDA opens.
		{name: "uvm-tools only", sample: strings.Replace(good, "  - path: /dev/nvidia-uvm\n", "", 1), missing: "/dev/nvidia-uvm"},
		{name: "no nvidiactl", sample: readSample(t, "no-nvidiactl.yaml"), missing: "/dev/nvidiactl"},
		{name: "no GPU device node", sample: readSample(t, "no-gpu.yaml"), missing: "a GPU device node (/dev/nvidiaN)"},
		{name: "empty", sample: "", missing: "a GPU device node (/dev/nvidiaN), /dev/nvidiactl, /dev/nvidia-uvm"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runCDIScript(t, tt.sample, "", "nvidia", "nvidia-uvm", "nvidia-modeset")
			if tt.missing == "" {
				if r.err != nil {
					t.Fatalf("script failed on a good spec: %v\n%s", r.err, r.stderr)
				}
				if b, err := os.ReadFile(r.spec); err != nil || string(b) != tt.sample {
					t.Errorf("spec not left in place (%v)", err)
				}
				if want := "names /dev/nvidia0 /dev/nvidiactl and /dev/nvidia-uvm"; !strings.Contains(r.stdout, want) {
					t.Errorf("stdout %q, want it to contain %q", r.stdout, want)
				}
				return
			}
			var exit *exec.ExitError
			if !errors.As(r.err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("script ended with %v, want exit status 1; stderr:\n%s", r.err, r.stderr)
			}
			want := "nvidia-cdi-generate: the CDI spec lacks " + tt.missing + "; CUDA would not work in containers. Moved it to " + r.spec + ".rejected; modules loaded: nvidia nvidia-uvm nvidia-modeset\n"
			if r.stderr != want {
				t.Errorf("stderr:\n%q\nwant:\n%q", r.stderr, want)
			}
			if _, err := os.Lstat(r.spec); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a refused spec is still where kata-agent reads it (%v)", err)
			}
			if b, err := os.ReadFile(r.spec + ".rejected"); err != nil || string(b) != tt.sample {
				t.Errorf("refused spec not kept as %s.rejected (%v)", r.spec, err)
			}
		})
	}
}

// cdiUnitOf is the CDI unit the plan writes for tg with env's settings.
func cdiUnitOf(t *testing.T, tg Target, env map[string]string) (*Plan, string) {
	t.Helper()
	p, err := NewPlan(resolve(t, env), tg)
	if err != nil {
		t.Fatal(err)
	}
	files, _ := actionsOf[WriteFile](p)
	for _, f := range files {
		if f.Path == "/etc/systemd/system/"+cdiUnit {
			return p, f.Content
		}
	}
	t.Fatalf("the plan writes no %s", cdiUnit)
	return nil, ""
}

// execStart is the unit's ExecStart command line, split into words (the
// unit quotes nothing).
func execStart(t *testing.T, unit string) []string {
	t.Helper()
	var cmds [][]string
	for _, line := range strings.Split(unit, "\n") {
		if v, ok := strings.CutPrefix(line, "ExecStart="); ok {
			cmds = append(cmds, strings.Fields(v))
		}
	}
	if len(cmds) != 1 {
		t.Fatalf("unit has %d ExecStart lines, want 1:\n%s", len(cmds), unit)
	}
	return cmds[0]
}

// TestCDIUnitRunsInOrder runs the command line of the unit each distro
// family gets, with the module names from its driver facts: the modules
// load core, UVM, modeset, then the control nodes are made, then the spec
// is generated, as kata's NVRC does it.
func TestCDIUnitRunsInOrder(t *testing.T) {
	tests := []struct {
		name    string
		tg      Target
		source  string
		modules []string
	}{
		{"debian archive", goldenTargets[1], "distro", []string{"nvidia-current", "nvidia-current-uvm", "nvidia-current-modeset"}},
		{"debian cuda-repo", goldenTargets[1], "cuda-repo", []string{"nvidia", "nvidia-uvm", "nvidia-modeset"}},
		{"ubuntu precompiled", goldenTargets[3], "precompiled", []string{"nvidia", "nvidia-uvm", "nvidia-modeset"}},
		{"ubuntu distro", goldenTargets[3], "distro", []string{"nvidia", "nvidia-uvm", "nvidia-modeset"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, unit := cdiUnitOf(t, tt.tg, map[string]string{"NVIDIA_DRIVER_SOURCE": tt.source})
			if !slices.Equal(p.Driver.Modules, tt.modules) {
				t.Fatalf("driver modules %v, want %v", p.Driver.Modules, tt.modules)
			}
			argv := execStart(t, unit)
			if len(argv) < 2 || argv[0] != cdiScriptPath || argv[1] != cdiSpecPath || !slices.Equal(argv[2:], tt.modules) {
				t.Fatalf("ExecStart %q, want %s %s %s", argv, cdiScriptPath, cdiSpecPath, strings.Join(tt.modules, " "))
			}
			// The unit's own command line, but the spec in a scratch
			// directory rather than the host's /run/cdi.
			r := runCDIScript(t, readSample(t, "good.yaml"), "", argv[2:]...)
			if r.err != nil {
				t.Fatalf("%v\n%s", r.err, r.stderr)
			}
			var want []string
			for _, m := range tt.modules {
				want = append(want, "modprobe "+m)
			}
			want = append(want, "nvidia-ctk system create-device-nodes --control-devices", "nvidia-ctk cdi generate --output="+r.spec)
			if !slices.Equal(r.calls, want) {
				t.Errorf("commands run:\n%s\nwant:\n%s", strings.Join(r.calls, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

// TestCDIScriptModuleFails: a module that does not load stops the script
// before it generates anything, naming the module.
func TestCDIScriptModuleFails(t *testing.T) {
	r := runCDIScript(t, readSample(t, "good.yaml"), "nvidia-uvm", "nvidia", "nvidia-uvm", "nvidia-modeset")
	if r.err == nil {
		t.Fatal("script succeeded without the UVM module")
	}
	if want := []string{"modprobe nvidia", "modprobe nvidia-uvm"}; !slices.Equal(r.calls, want) {
		t.Errorf("commands run %q, want %q", r.calls, want)
	}
	if !strings.Contains(r.stderr, "nvidia-cdi-generate: cannot load kernel module nvidia-uvm\n") {
		t.Errorf("stderr %q does not name the module", r.stderr)
	}
	if _, err := os.Lstat(r.spec); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a spec was written (%v)", err)
	}
}

// TestCDIUnitGolden pins what runs at boot, per driver facts: the gate
// that keeps the unit to VMs with an NVIDIA GPU, the unit's command line,
// and the installed script's mode.
func TestCDIUnitGolden(t *testing.T) {
	var b strings.Builder
	for _, c := range []struct {
		tg     Target
		source string
	}{
		{goldenTargets[1], "distro"},
		{goldenTargets[1], "cuda-repo"},
		{goldenTargets[3], "precompiled"},
		{goldenTargets[3], "cuda-repo"},
	} {
		p, _ := cdiUnitOf(t, c.tg, map[string]string{"NVIDIA_DRIVER_SOURCE": c.source})
		fmt.Fprintf(&b, "# %s-%s, nvidia_driver_source=%s\n", c.tg.Distro, c.tg.Version, c.source)
		files, _ := actionsOf[WriteFile](p)
		for _, f := range files {
			switch f.Path {
			case cdiScriptPath:
				if f.Content != cdiScript {
					t.Errorf("%s is not the embedded script", f.Path)
				}
				fmt.Fprintf(&b, "%s: %s %04o\n", f.Path, f.Owner, f.Mode)
			case "/etc/systemd/system/" + cdiUnit, "/etc/systemd/system/" + cdiUnit + ".d/podvm-gpu-gate.conf":
				for _, line := range strings.Split(f.Content, "\n") {
					if strings.HasPrefix(line, "Exec") {
						fmt.Fprintf(&b, "%s: %s\n", f.Path, line)
					}
				}
			}
		}
	}
	golden(t, filepath.Join("testdata", "cdi", "unit-commands.txt"), b.String())
}

// TestScriptsShellcheck holds every script in scripts/, which go into the
// image or to the back ends as they are, to sh -n and shellcheck.
func TestScriptsShellcheck(t *testing.T) {
	shellcheck.Require(t)
	scripts, _ := filepath.Glob(filepath.Join("scripts", "*.sh"))
	if len(scripts) == 0 {
		t.Fatal("no scripts found")
	}
	for _, path := range scripts {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		shellcheck.Check(t, path, string(data))
	}
}
