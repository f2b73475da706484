package mkosi

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"strings"
)

// chrootTarget is the image under mkosi, reached with mkosi-chroot.
type chrootTarget struct {
	stdout, stderr io.Writer
	// secrets are environment variables no command may see: mkosi-chroot
	// passes this process's environment on to the image.
	secrets []string
}

func (t chrootTarget) command(ctx context.Context, command string) *exec.Cmd {
	return t.cmd(ctx, "mkosi-chroot", "sh", "-c", command)
}

func (t chrootTarget) cmd(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = withoutSecrets(os.Environ(), t.secrets)
	return cmd
}

func (t chrootTarget) RunInput(ctx context.Context, command string, stdin io.Reader) error {
	cmd := t.command(ctx, command)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, t.stdout, t.stderr
	return cmd.Run()
}

// Put writes the file inside the image, so a link there is resolved in
// the image and never reaches the build host's files.
func (t chrootTarget) Put(ctx context.Context, p string, content []byte, mode fs.FileMode, owner string) error {
	user, group, ok := strings.Cut(owner, ":")
	if !ok {
		group = user
	}
	if user == "" {
		user, group = "root", "root"
	}
	cmd := t.cmd(ctx, "mkosi-chroot", "sh", "-c", `set -e; f=$(mktemp); cat >"$f"; install -D -m "$2" -o "$3" -g "$4" "$f" "$1"; rm -f "$f"`,
		"podvm-put", p, fmt.Sprintf("0%o", mode.Perm()), user, group)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(content), t.stdout, t.stderr
	return cmd.Run()
}

// Install runs the sandbox's apt-get, mkosi's, which acts on the image
// with the build's sources.
func (t chrootTarget) Install(ctx context.Context, pkgs []string, noRecommends bool) error {
	args := []string{"-q", "install"}
	if noRecommends {
		args = append(args, "--no-install-recommends")
	}
	cmd := t.cmd(ctx, "apt-get", append(args, pkgs...)...)
	cmd.Stdout, cmd.Stderr = t.stdout, t.stderr
	return cmd.Run()
}

func (t chrootTarget) Update(ctx context.Context) error {
	cmd := t.cmd(ctx, "apt-get", "-q", "update")
	cmd.Stdout, cmd.Stderr = t.stdout, t.stderr
	return cmd.Run()
}

// AptOutput runs the command in the sandbox, where apt acts on the image.
func (t chrootTarget) AptOutput(ctx context.Context, command string) (string, error) {
	var out bytes.Buffer
	cmd := t.cmd(ctx, "sh", "-c", command)
	cmd.Stdout, cmd.Stderr = &out, t.stderr
	err := cmd.Run()
	return out.String(), err
}

func (t chrootTarget) Run(ctx context.Context, command string) error {
	cmd := t.command(ctx, command)
	cmd.Stdout, cmd.Stderr = t.stdout, t.stderr
	return cmd.Run()
}

func (t chrootTarget) Output(ctx context.Context, command string) (string, error) {
	var out bytes.Buffer
	cmd := t.command(ctx, command)
	cmd.Stdout, cmd.Stderr = &out, t.stderr
	err := cmd.Run()
	return out.String(), err
}

// Upload and Download go through mkosi-chroot too, never a host path
// below the root: a link the image holds is resolved inside the image,
// where it cannot reach the build host's files.
func (t chrootTarget) Upload(ctx context.Context, p string, f *os.File) error {
	cmd := t.cmd(ctx, "mkosi-chroot", "sh", "-c", `umask 077 && cat >"$1"`, "podvm-upload", p)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = f, t.stdout, t.stderr
	return cmd.Run()
}

func (t chrootTarget) Download(ctx context.Context, p string, open func() (io.WriteCloser, error)) error {
	w, err := open()
	if err != nil {
		return err
	}
	cmd := t.cmd(ctx, "mkosi-chroot", "cat", "--", p)
	cmd.Stdout, cmd.Stderr = w, t.stderr
	err = cmd.Run()
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	return err
}
