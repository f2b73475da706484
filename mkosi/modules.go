package mkosi

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	"github.com/spf13/pflag"

	"github.com/podvm-gpu/packer-plugin-podvm/cmdflags"
	"github.com/podvm-gpu/packer-plugin-podvm/gpustack"
	"github.com/podvm-gpu/packer-plugin-podvm/modcache"
)

// runModules is the post-installation script's module step: the DKMS
// builds in the image, through the module cache when --cache is given.
func runModules(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("mkosi modules", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	// --root names the image for the log; every file goes through
	// mkosi-chroot.
	root := fs.String("root", "", "the image's root ($BUILDROOT)")
	kernels := fs.String("kernels", "", "the targeted kernels, space separated")
	cache := fs.String("cache", "", "the module cache directory (none: build every module)")
	maxSize := fs.Int64("cache-max-size", 0, "bound of the module cache in bytes (0: none)")
	if code, ok := cmdflags.Parse(fs, args, false, stderr); !ok {
		return code
	}
	ks := strings.Fields(*kernels)
	if *root == "" || len(ks) == 0 {
		fmt.Fprintln(stderr, "mkosi modules: --root and --kernels are required")
		return 2
	}
	for _, k := range ks {
		if !gpustack.ValidKernel(k) {
			fmt.Fprintf(stderr, "mkosi modules: --kernels: %q is not a kernel release\n", k)
			return 2
		}
	}
	var c *modcache.Cache
	if *cache != "" {
		c = modcache.New(*cache, *maxSize)
	}
	say := func(s string) { fmt.Fprintln(stdout, "  "+s) }
	fmt.Fprintf(stdout, "  DKMS modules of %s for kernels %s\n", *root, strings.Join(ks, " "))
	if err := modcache.Build(ctx, chrootTarget{stdout: stdout, stderr: stderr}, c, ks, say); err != nil {
		fmt.Fprintln(stderr, "mkosi modules:", err)
		return 1
	}
	return 0
}

// chrootTarget is the image under mkosi, reached with mkosi-chroot.
type chrootTarget struct {
	stdout, stderr io.Writer
}

func (t chrootTarget) command(ctx context.Context, command string) *exec.Cmd {
	return exec.CommandContext(ctx, "mkosi-chroot", "sh", "-c", command)
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
	cmd := exec.CommandContext(ctx, "mkosi-chroot", "sh", "-c", `umask 077 && cat >"$1"`, "podvm-upload", p)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = f, t.stdout, t.stderr
	return cmd.Run()
}

func (t chrootTarget) Download(ctx context.Context, p string, open func() (io.WriteCloser, error)) error {
	w, err := open()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "mkosi-chroot", "cat", "--", p)
	cmd.Stdout, cmd.Stderr = w, t.stderr
	err = cmd.Run()
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	return err
}
