package gpustack

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podvm-gpu/packer-plugin-podvm/chroot/chroottest"
)

// inImage runs command with sh in a private mount namespace whose
// /usr/lib/modules and /boot hold what setup (a shell script, run there
// first) puts in them, and whose PATH starts with bin: an image's kernel
// files on this host, which is left as it was.
func inImage(t *testing.T, bin, setup, command string) (string, error) {
	t.Helper()
	chroottest.RequireRoot(t)
	chroottest.RequireTools(t, "unshare")
	scratch := t.TempDir()
	wrapper := "set -e\n" + chroottest.KernelTreeMounts + setup + `
exec sh -c "$1"`
	cmd := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", wrapper, "podvm-test", command)
	cmd.Env = append(os.Environ(), "PODVM_TEST_SCRATCH="+scratch, "PATH="+bin+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func stub(t *testing.T, dir, name, script string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestCheckModulesScript runs CheckModules' command against kernel trees:
// a module must exist for each kernel and carry that kernel's vermagic.
func TestCheckModulesScript(t *testing.T) {
	const k1, k2 = "6.12.57+deb13-amd64", "6.12.58+deb13-amd64"
	bin := t.TempDir()
	// modinfo as the image's: -k finds nothing (no modules.dep), -F vermagic
	// reads the fixture's magic from the module file.
	stub(t, bin, "modinfo", `case "$1" in -k) exit 1 ;; -F) cat "$3" ;; esac`+"\n")
	for _, tc := range []struct {
		name, setup, fail string
	}{
		{"built for each kernel", `for k in ` + k1 + ` ` + k2 + `; do mkdir -p /usr/lib/modules/$k/updates/dkms; echo "$k SMP mod_unload" >/usr/lib/modules/$k/updates/dkms/nvidia.ko.xz; echo "$k SMP" >/usr/lib/modules/$k/updates/dkms/nvidia-uvm.ko.xz; done`, ""},
		{"missing for one kernel", `mkdir -p /usr/lib/modules/` + k1 + `/updates /usr/lib/modules/` + k2 + `; echo "` + k1 + ` SMP" >/usr/lib/modules/` + k1 + `/updates/nvidia.ko; echo "` + k1 + ` SMP" >/usr/lib/modules/` + k1 + `/updates/nvidia-uvm.ko`, "module nvidia missing for kernel " + k2},
		{"built for the host's kernel", `for k in ` + k1 + ` ` + k2 + `; do mkdir -p /usr/lib/modules/$k/updates; echo "6.1.0-host SMP" >/usr/lib/modules/$k/updates/nvidia.ko; echo "$k SMP" >/usr/lib/modules/$k/updates/nvidia-uvm.ko; done`, "was built for '6.1.0-host SMP', not " + k1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := CheckModules{Kernels: []string{k1, k2}, Modules: []string{"nvidia", "nvidia-uvm"}}.Command() + " " + k1 + " " + k2
			out, err := inImage(t, bin, tc.setup, cmd)
			switch {
			case tc.fail == "" && err != nil:
				t.Fatalf("%v\n%s", err, out)
			case tc.fail == "" && strings.Count(out, " for 6.12.") != 4:
				t.Errorf("want four modules reported:\n%s", out)
			case tc.fail != "" && (err == nil || !strings.Contains(out, tc.fail)):
				t.Fatalf("error %v, want a failure with %q:\n%s", err, tc.fail, out)
			}
		})
	}
}

// TestUpdateInitramfsScript runs UpdateInitramfs' command: it ends the
// deferral, then regenerates only an initramfs the image has, and only
// where it has update-initramfs.
func TestUpdateInitramfsScript(t *testing.T) {
	const k1, k2 = "6.12.57+deb13-amd64", "6.12.58+deb13-amd64"
	withTool := t.TempDir()
	stub(t, withTool, "update-initramfs", `echo "ran update-initramfs $*"`+"\n")
	for _, tc := range []struct {
		name, bin, setup string
		ran, skipped     []string
	}{
		{"one initramfs", withTool, `: >/boot/initrd.img-` + k2, []string{k2}, []string{k1}},
		{"no initramfs", withTool, ``, nil, []string{k1, k2}},
		// Hides a host's own update-initramfs: the script needs only
		// builtins then.
		{"no update-initramfs", t.TempDir(), `: >/boot/initrd.img-` + k1 + `; if p=$(command -v update-initramfs); then mount -t tmpfs none "${p%/*}"; fi`, nil, []string{k1, k2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := inImage(t, tc.bin, tc.setup, UpdateInitramfs{Kernels: []string{k1, k2}}.Command())
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			for _, k := range tc.ran {
				if !strings.Contains(out, "ran update-initramfs -u -k "+k+"\n") {
					t.Errorf("did not update %s:\n%s", k, out)
				}
			}
			for _, k := range tc.skipped {
				if strings.Contains(out, "-k "+k+"\n") || !strings.Contains(out, "no initramfs for "+k+", nothing to update") {
					t.Errorf("did not skip %s, saying so:\n%s", k, out)
				}
			}
		})
	}
}
