package gpu

import (
	"context"
	"fmt"
	"strings"

	"github.com/podvm-gpu/packer-plugin-podvm/gpustack"
)

// Detection commands. They read the image, never the machine running the
// build: in a chroot, uname -r is the host's kernel.
const (
	cmdOSRelease = "cat /etc/os-release 2>/dev/null || cat /usr/lib/os-release"
	cmdArch      = "dpkg --print-architecture"
	// A kernel counts when its modules directory has a kernel image beside
	// it in /boot or an installed linux-image package: a leftover modules
	// directory of a removed kernel must not be targeted.
	cmdKernels = `for d in /usr/lib/modules/*/; do [ -d "$d" ] || continue; v=${d%/}; v=${v##*/}; ` +
		`if [ -e "/boot/vmlinuz-$v" ] || [ "$(dpkg-query -W -f='${db:Status-Status}' "linux-image-$v" 2>/dev/null)" = installed ]; then echo "$v"; fi; done`
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
	ks, err := r.query(ctx, cmdKernels)
	if err != nil {
		return t, fmt.Errorf("listing the image's kernels: %w", err)
	}
	t.Kernels = strings.Fields(ks)
	for _, k := range t.Kernels {
		// Kernel names reach shell commands and file names: anything but a
		// kernel release is refused, never quoted and hoped for.
		if !gpustack.ValidKernel(k) {
			return t, fmt.Errorf("the image has a kernel directory /usr/lib/modules/%q that is not a kernel release (such as 6.12.57+deb13-amd64); remove it", k)
		}
	}
	gpustack.SortKernels(t.Kernels)
	if len(t.Kernels) == 0 {
		return t, fmt.Errorf("no kernel in the image: no /usr/lib/modules/<version> with a matching /boot/vmlinuz-<version> or installed linux-image-<version>; install a kernel package before this provisioner runs")
	}
	return t, nil
}
