package mkosi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"strings"

	"github.com/podvm-gpu/packer-plugin-podvm/imagestep"
	"github.com/podvm-gpu/packer-plugin-podvm/linetail"
	"github.com/podvm-gpu/packer-plugin-podvm/shellquote"
)

// chrootTarget is the image under mkosi, reached with mkosi-chroot: every
// command and every file goes through it, never a host path below the
// root, so a link the image holds is resolved inside the image, where it
// cannot reach the build host's files. Packages go through the sandbox's
// apt, mkosi's, which acts on the image with the build's sources.
type chrootTarget struct {
	stdout, stderr io.Writer
	// secrets are environment variables no command may see: mkosi-chroot
	// passes this process's environment on to the image.
	secrets []string
}

// run runs name with args, its output shown (stdout nil) or kept in out;
// a command that fails is an imagestep.CommandError with the end of its
// output.
func (t chrootTarget) run(ctx context.Context, stdin io.Reader, out io.Writer, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = withoutSecrets(os.Environ(), t.secrets)
	last := &linetail.Writer{Keep: 20}
	if out == nil {
		out = io.MultiWriter(t.stdout, last)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, out, io.MultiWriter(t.stderr, last)
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() > 0 {
		return &imagestep.CommandError{Command: shellquote.JoinWords(append([]string{name}, args...)...), ExitStatus: ee.ExitCode(), Output: last.Lines()}
	}
	return err
}

func (t chrootTarget) Run(ctx context.Context, command string) error {
	return t.run(ctx, nil, nil, "mkosi-chroot", "sh", "-c", command)
}

func (t chrootTarget) Output(ctx context.Context, command string) (string, error) {
	var out bytes.Buffer
	err := t.run(ctx, nil, &out, "mkosi-chroot", "sh", "-c", command)
	return out.String(), err
}

func (t chrootTarget) RunInput(ctx context.Context, command string, stdin io.Reader) error {
	return t.run(ctx, stdin, nil, "mkosi-chroot", "sh", "-c", command)
}

// Put writes the file inside the image.
func (t chrootTarget) Put(ctx context.Context, p string, content []byte, mode fs.FileMode, owner string) error {
	user, group, ok := strings.Cut(owner, ":")
	if !ok {
		group = user
	}
	if user == "" {
		user, group = "root", "root"
	}
	return t.run(ctx, bytes.NewReader(content), nil, "mkosi-chroot", "sh", "-c",
		`set -e; f=$(mktemp); cat >"$f"; install -D -m "$2" -o "$3" -g "$4" "$f" "$1"; rm -f "$f"`,
		"podvm-put", p, fmt.Sprintf("0%o", mode.Perm()), user, group)
}

func (t chrootTarget) Install(ctx context.Context, pkgs []string, noRecommends bool) error {
	args := []string{"-q", "install"}
	if noRecommends {
		args = append(args, "--no-install-recommends")
	}
	return t.run(ctx, nil, nil, "apt-get", append(args, pkgs...)...)
}

func (t chrootTarget) Update(ctx context.Context) error {
	return t.run(ctx, nil, nil, "apt-get", "-q", "update")
}

// AptOutput runs the command in the sandbox, beside mkosi's apt.
func (t chrootTarget) AptOutput(ctx context.Context, command string) (string, error) {
	var out bytes.Buffer
	err := t.run(ctx, nil, &out, "sh", "-c", command)
	return out.String(), err
}

func (t chrootTarget) Upload(ctx context.Context, p string, f *os.File) error {
	return t.run(ctx, f, nil, "mkosi-chroot", "sh", "-c", `umask 077 && cat >"$1"`, "podvm-upload", p)
}

func (t chrootTarget) Download(ctx context.Context, p string, open func() (io.WriteCloser, error)) error {
	w, err := open()
	if err != nil {
		return err
	}
	err = t.run(ctx, nil, w, "mkosi-chroot", "cat", "--", p)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	return err
}
