package imagestep

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podvm-gpu/packer-plugin-podvm/gpustack"
)

// hostTarget runs every command with this host's sh, as if the host were
// the image; what the executor would install or write, it refuses.
type hostTarget struct{ log bytes.Buffer }

func (t *hostTarget) Run(ctx context.Context, command string) error {
	_, err := t.Output(ctx, command)
	return err
}

func (t *hostTarget) Output(ctx context.Context, command string) (string, error) {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, "sh", "-c", command)
	cmd.Stdout, cmd.Stderr = &out, &t.log
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return out.String(), &CommandError{Command: command, ExitStatus: ee.ExitCode(), Output: strings.Split(strings.TrimSpace(t.log.String()), "\n")}
	}
	return out.String(), err
}

func (t *hostTarget) AptOutput(ctx context.Context, command string) (string, error) {
	return t.Output(ctx, command)
}

func (t *hostTarget) RunInput(context.Context, string, io.Reader) error {
	return errors.New("hostTarget: no input")
}

func (t *hostTarget) Put(context.Context, string, []byte, fs.FileMode, string) error {
	return errors.New("hostTarget: Put called")
}

func (t *hostTarget) Install(context.Context, []string, bool) error {
	return errors.New("hostTarget: Install called")
}

func (t *hostTarget) Update(context.Context) error { return errors.New("hostTarget: Update called") }

func (t *hostTarget) Upload(context.Context, string, *os.File) error {
	return errors.New("hostTarget: Upload called")
}

func (t *hostTarget) Download(context.Context, string, func() (io.WriteCloser, error)) error {
	return errors.New("hostTarget: Download called")
}

// TestDeclaredChecked: what a back end declares (mkosi's Packages= and
// trees) is checked in the image, never done again: a package that is not
// installed, or a file that is not there, fails the step, naming it.
func TestDeclaredChecked(t *testing.T) {
	if _, err := exec.LookPath("dpkg-query"); err != nil {
		t.Fatalf("dpkg-query: %v", err)
	}
	file := filepath.Join(t.TempDir(), "in place")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "it's missing")
	for _, tc := range []struct {
		name string
		a    gpustack.Action
		fail string // "" for success
	}{
		{"installed package", gpustack.Install{Packages: []string{"dpkg=1.0"}}, ""},
		{"missing package", gpustack.Install{Packages: []string{"dpkg", "podvm-no-such-package"}}, "package podvm-no-such-package is not installed in the image"},
		{"file in place", gpustack.WriteFile{Path: file, Content: "x"}, ""},
		{"file missing", gpustack.WriteFile{Path: missing, Content: "x"}, missing + ": missing from the image"},
		{"pin missing", gpustack.AptPin{Name: "podvm-no-such-pin"}, "/etc/apt/preferences.d/podvm-no-such-pin: missing"},
		{"update: nothing to check", gpustack.AptUpdate{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := &hostTarget{}
			var said []string
			e := &Executor{Target: target, Say: func(s string) { said = append(said, s) }, Declared: func(gpustack.Action) bool { return true }}
			err := e.Run(context.Background(), []gpustack.Step{{ID: "x", Title: "X", Actions: []gpustack.Action{tc.a}}}, 1, 1)
			var cerr *CommandError
			switch {
			case tc.fail == "" && err != nil:
				t.Fatalf("%v\n%s", err, target.log.String())
			case tc.fail != "" && err == nil:
				t.Fatalf("passed, want a failure with %q", tc.fail)
			case tc.fail != "" && (!errors.As(err, &cerr) || !strings.Contains(err.Error(), tc.fail) || !strings.Contains(err.Error(), "step [1/1] x (X)")):
				t.Fatalf("error %v, want a CommandError of step x with %q", err, tc.fail)
			}
			if tc.fail == "" && (len(said) < 2 || !strings.HasPrefix(said[len(said)-1], "[1/1] x: done in")) {
				t.Errorf("progress %q", said)
			}
		})
	}
}
