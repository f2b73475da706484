//go:build !linux || podvm_nonlinux

package rootfs

import (
	"path/filepath"
	"strings"
	"testing"
)

// The non-Linux build refuses the builder at Prepare, which is what
// `packer validate` calls, whatever the template says. make test-nonlinux
// runs this on the Linux CI host with the podvm_nonlinux tag, which selects
// the same files as a darwin build.
func TestPrepareOffLinux(t *testing.T) {
	for _, tc := range []struct {
		name string
		raw  map[string]interface{}
	}{
		{"debootstrap defaults", map[string]interface{}{"packer_build_name": "test"}},
		{"directory source", map[string]interface{}{
			"source_type":       "directory",
			"source_path":       t.TempDir(),
			"output_directory":  filepath.Join(t.TempDir(), "out"),
			"packer_build_name": "test",
		}},
		// The refusal comes first: a user on macOS learns that the builder
		// cannot run here before fixing anything else.
		{"invalid setting", map[string]interface{}{"format": "bogus"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := new(Builder).Prepare(tc.raw)
			if err == nil {
				t.Fatal("Prepare accepted the builder in a non-Linux build")
			}
			for _, want := range []string{"podvm-rootfs", "only on a Linux host", "podvm-gpu provisioner"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			if strings.Contains(err.Error(), "format") {
				t.Errorf("error %q goes on to validate the settings", err)
			}
		})
	}
}
