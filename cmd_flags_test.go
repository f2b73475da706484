package main

import (
	"io"
	"os"
	"strings"
	"testing"
)

// captureStderr runs fn with os.Stderr going to a file and returns what
// was written.
func captureStderr(t *testing.T, fn func()) string {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stderr
	os.Stderr = f
	defer func() { os.Stderr = saved }()
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
		{runPlan, []string{"--frobnicate"}, []string{"plan: unknown flag: --frobnicate", "plan --help"}},
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
