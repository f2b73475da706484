package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podvm-gpu/packer-plugin-podvm/settings"
)

// captureStderr runs fn with os.Stderr going to a file and returns what
// was written.
func captureStderr(t *testing.T, fn func()) string { return capture(t, &os.Stderr, fn) }

// captureStdout is captureStderr for os.Stdout.
func captureStdout(t *testing.T, fn func()) string { return capture(t, &os.Stdout, fn) }

// capture runs fn with *stream going to a file and returns what was written.
func capture(t *testing.T, stream **os.File, fn func()) string {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "capture")
	if err != nil {
		t.Fatal(err)
	}
	saved := *stream
	*stream = f
	defer func() { *stream = saved }()
	fn()
	if _, err := f.Seek(0, 0); err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(f)
	f.Close()
	return string(b)
}

// Every subcommand says what was wrong with its flags or arguments; none
// exits 2 in silence.
func TestFlagErrorsAreReported(t *testing.T) {
	tests := []struct {
		run  func([]string) int
		args []string
		want []string
	}{
		{runPlan, []string{"--frobnicate"}, []string{"plan: unknown flag: --frobnicate", "Usage: packer-plugin-podvm plan", "plan --help"}},
		{runPlan, []string{"--release"}, []string{"plan: flag needs an argument: --release"}},
		{runPlan, []string{"extra-arg"}, []string{`plan: unexpected argument "extra-arg"`}},
		{runMkosi, []string{"--frobnicate"}, []string{"mkosi: unknown flag: --frobnicate"}},
		{runMkosi, []string{"--output", "x", "extra"}, []string{`mkosi: unexpected argument "extra"`}},
		{runOptions, []string{"--frob"}, []string{"options: unknown flag: --frob"}},
		{runOptions, []string{"x"}, []string{`options: unexpected argument "x"`}},
	}
	for _, tt := range tests {
		var code int
		out := captureStderr(t, func() { code = tt.run(tt.args) })
		if code != 2 {
			t.Errorf("%v: exit %d, want 2", tt.args, code)
		}
		for _, w := range tt.want {
			if !strings.Contains(out, w) {
				t.Errorf("%v: stderr lacks %q:\n%s", tt.args, w, out)
			}
		}
	}
}

// The generator checks what is local (--output, --podvm-bin, the signing
// key, SOURCE_DATE_EPOCH) before anything reaches the network; the
// toolkit key URL here cannot be fetched, so reaching it would show.
func TestMkosiChecksLocalThingsFirst(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "afile")
	full := filepath.Join(dir, "full")
	garbage := filepath.Join(dir, "key.asc")
	for _, f := range []string{file, filepath.Join(full, "x")} {
		os.MkdirAll(filepath.Dir(f), 0o755)
		os.WriteFile(f, nil, 0o644)
	}
	os.WriteFile(garbage, []byte("not a key\n"), 0o600)
	t.Setenv("NVIDIA_CONTAINER_TOOLKIT_REPO_URL", "https://unreachable.invalid/deb")
	tests := []struct {
		env  map[string]string
		args []string
		want string
	}{
		{nil, []string{"--output", file}, "exists and is not a directory"},
		{nil, []string{"--output", full}, "is not empty; use --force"},
		{nil, []string{"--output", filepath.Join(dir, "new"), "--podvm-bin", "bin/podvm"}, "--podvm-bin \"bin/podvm\" is relative"},
		{map[string]string{"SOURCE_DATE_EPOCH": "99999999999"}, []string{"--output", filepath.Join(dir, "new")}, "source_date_epoch (SOURCE_DATE_EPOCH): 99999999999"},
		{map[string]string{"LOCAL_REPO_SIGNING_KEY": garbage}, []string{"--output", filepath.Join(dir, "new")}, "local_repo_signing_key: key " + garbage},
	}
	for _, tt := range tests {
		for k, v := range tt.env {
			t.Setenv(k, v)
		}
		var code int
		out := captureStderr(t, func() { code = runMkosi(tt.args) })
		for k := range tt.env {
			os.Unsetenv(k)
		}
		if code != 2 || !strings.Contains(out, tt.want) || strings.Contains(out, "unreachable.invalid") {
			t.Errorf("mkosi %v: exit %d, stderr:\n%s\nwant exit 2 and %q, before any key fetch", tt.args, code, out, tt.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "new")); err == nil {
		t.Error("a refused run wrote its output directory")
	}
}

func TestPlanRefusesFarFutureEpoch(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "99999999999")
	var code int
	out := captureStderr(t, func() { code = runPlan(nil) })
	if code != 2 || !strings.Contains(out, "apt would refuse the repository as not valid yet") {
		t.Errorf("plan: exit %d, %s", code, out)
	}
}

// TestPlanChecksKernels checks that --kernel passes the kernel rule before
// the plan prints it as a command.
func TestPlanChecksKernels(t *testing.T) {
	for _, tc := range []struct {
		kernel string
		want   string // "" for accepted
	}{
		{"6.12.57+deb13-amd64", ""},
		{"6.1;id>/tmp/pwn", `plan: --kernel: invalid value "6.1;id>/tmp/pwn"`},
		{"$(reboot)", `plan: --kernel: invalid value "$(reboot)"`},
		{"6.1\rx", `plan: --kernel: invalid value "6.1\rx"`},
	} {
		var code int
		stdout := captureStdout(t, func() {
			out := captureStderr(t, func() { code = runPlan([]string{"--kernel", tc.kernel}) })
			switch {
			case tc.want == "" && code != 0:
				t.Errorf("--kernel %q: exit %d, %s", tc.kernel, code, out)
			case tc.want != "" && (code != 2 || !strings.Contains(out, tc.want) || !strings.Contains(out, "allowed:")):
				t.Errorf("--kernel %q: exit %d, %s; want exit 2 and %q", tc.kernel, code, out, tc.want)
			}
		})
		if tc.want != "" && stdout != "" {
			t.Errorf("--kernel %q: a refused plan printed %s", tc.kernel, settings.Clip(stdout))
		}
	}
}

// TestPlanPrintsWarnings checks that the CLI shows Resolve's warnings.
func TestPlanPrintsWarnings(t *testing.T) {
	t.Setenv("NVIDIA_CUDA_REPO_URL", "https://mirror.example/cuda")
	var code int
	var out string
	captureStdout(t, func() { out = captureStderr(t, func() { code = runPlan([]string{"--nvidia-driver-source=distro"}) }) })
	if code != 0 || !strings.Contains(out, "plan: warning: NVIDIA_CUDA_REPO_URL is ignored") {
		t.Errorf("plan: exit %d, stderr %q; want the warning", code, out)
	}
}
