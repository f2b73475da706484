package gpu

import (
	"context"
	"strings"
	"testing"

	"github.com/podvm-gpu/packer-plugin-podvm/builder/rootfs"
)

// TestDpkgUnsafeIO: dpkg skips fsync in a chroot by default, on a live
// machine only when asked, and never with no.
func TestDpkgUnsafeIO(t *testing.T) {
	for _, tc := range []struct {
		setting, where string
		want           bool
	}{
		{"auto", "chroot", true},
		{"auto", "system", false},
		{"yes", "system", true},
		{"no", "chroot", false},
	} {
		t.Run(tc.setting+"-"+tc.where, func(t *testing.T) {
			tk, _ := testKey(t)
			p := newTestProvisioner(t, map[string]interface{}{"nvidia_container_toolkit_repo_keyring": tk, "dpkg_unsafe_io": tc.setting})
			comm := newFakeComm(debian13())
			var gen map[string]interface{}
			if tc.where == "chroot" {
				gen = map[string]interface{}{generatedChroot: "true"}
			}
			if err := p.Provision(context.Background(), &recordingUi{comm: comm}, comm, gen); err != nil {
				t.Fatal(err)
			}
			var installs, unsafe int
			for _, c := range comm.cmds {
				if strings.Contains(c, " install --allow-change-held-packages") { // the plan's installs, not downloads or simulations
					installs++
					if strings.Contains(c, "--force-unsafe-io") {
						unsafe++
					}
				}
			}
			if installs == 0 || (tc.want && unsafe != installs) || (!tc.want && unsafe != 0) {
				t.Errorf("%d of %d installs with --force-unsafe-io, want all: %v", unsafe, installs, tc.want)
			}
		})
	}
	if err := (&Provisioner{}).Prepare(map[string]interface{}{"dpkg_unsafe_io": "always"}); err == nil || !strings.Contains(err.Error(), `dpkg_unsafe_io: "always"; allowed: auto, yes, no`) {
		t.Errorf("bad value: %v", err)
	}
}

// TestGeneratedChrootName: the provisioner reads the variable under the
// name the builder generates it.
func TestGeneratedChrootName(t *testing.T) {
	if generatedChroot != rootfs.GeneratedChroot {
		t.Errorf("provisioner reads %q, builder generates %q", generatedChroot, rootfs.GeneratedChroot)
	}
}
