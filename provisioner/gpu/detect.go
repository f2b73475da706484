package gpu

import (
	"context"
	"fmt"
	"strings"

	"github.com/podvm-gpu/packer-plugin-podvm/gpustack"
	"github.com/podvm-gpu/packer-plugin-podvm/imagekernel"
)

// Detection commands. They read the image, never the machine running the
// build: in a chroot, uname -r is the host's kernel.
const (
	cmdOSRelease = "cat /etc/os-release 2>/dev/null || cat /usr/lib/os-release"
	cmdArch      = "dpkg --print-architecture"
)

// detect reads the image's distro, architecture and kernels.
func detect(ctx context.Context, r *runner) (gpustack.Target, error) {
	osr, err := r.query(ctx, cmdOSRelease)
	if err != nil {
		return gpustack.Target{}, fmt.Errorf("reading os-release: %w", err)
	}
	t, err := gpustack.ParseOSRelease(osr)
	if err != nil {
		return t, err
	}
	arch, err := r.query(ctx, cmdArch)
	if err != nil {
		return t, fmt.Errorf("reading the dpkg architecture: %w", err)
	}
	t.Arch = strings.TrimSpace(arch)
	// One listing of the image, judged by the rule the disk writer and
	// the mkosi scripts follow.
	out, err := r.query(ctx, imagekernel.ListCommand)
	if err != nil {
		return t, fmt.Errorf("listing the image's kernels: %w", err)
	}
	// Kernel names reach shell commands and file names: the rule refuses
	// anything but a kernel release, never quoted and hoped for.
	if t.Kernels, err = imagekernel.FromListing(out); err != nil {
		return t, err
	}
	if len(t.Kernels) == 0 {
		return t, fmt.Errorf("%w; install a kernel package before this provisioner runs", imagekernel.ErrNone)
	}
	return t, nil
}
