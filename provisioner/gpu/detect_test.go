package gpu

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/podvm-gpu/packer-plugin-podvm/chroot"
	"github.com/podvm-gpu/packer-plugin-podvm/chroot/chroottest"
	"github.com/podvm-gpu/packer-plugin-podvm/imagekernel/kerneltest"
)

// detect finds the image's kernels by imagekernel's rule on the fixture
// trees every reader of them is tested on, through a real chroot
// communicator and the default execute_command.
func TestDetectKernelTrees(t *testing.T) {
	chroottest.RequireRoot(t)
	for _, tree := range kerneltest.Trees {
		t.Run(tree.Name, func(t *testing.T) {
			root := chroottest.BusyboxRoot(t)
			kerneltest.Build(t, root, tree)
			for p, content := range map[string]string{
				"etc/os-release": "ID=debian\nVERSION_ID=\"13\"\nVERSION_CODENAME=trixie\n",
				"bin/dpkg":       "#!/bin/sh\n[ \"$1\" = --print-architecture ] && echo amd64\n",
			} {
				if err := os.WriteFile(filepath.Join(root, p), []byte(content), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			comm, err := chroot.New(root, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer comm.Close()
			r := &runner{comm: comm, ui: &testUi{t: t}, tmpl: DefaultExecuteCommand}
			target, err := detect(context.Background(), r)
			switch {
			case tree.Refused != "":
				if err == nil || !strings.Contains(err.Error(), tree.Refused) || !strings.Contains(err.Error(), "not a kernel release") {
					t.Errorf("kernels %q, %v; want %q refused", target.Kernels, err, tree.Refused)
				}
			case len(tree.Want) == 0:
				if err == nil || !strings.Contains(err.Error(), "no kernel in the image") {
					t.Errorf("kernels %q, %v; want no kernel", target.Kernels, err)
				}
			case err != nil || !slices.Equal(target.Kernels, tree.Want) || target.Arch != "amd64" || target.Distro != "debian":
				t.Errorf("target %+v, %v; want kernels %q of a debian amd64 image", target, err, tree.Want)
			}
		})
	}
}
