//go:build !linux || podvm_nonlinux

package mount

import (
	"errors"
	"path/filepath"
	"testing"
)

// Off Linux every mount fails with errors.ErrUnsupported and nothing is
// recorded, so a Stack never tries to undo a mount it did not make.
func TestStackOffLinux(t *testing.T) {
	s := new(Stack)
	for _, m := range []Mount{
		{Source: "tmpfs", Target: filepath.Join(t.TempDir(), "run"), FSType: "tmpfs"},
		{Source: t.TempDir(), Target: t.TempDir(), Flags: Bind | ReadOnly},
	} {
		if err := s.Mount(m); !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("Mount(%s) = %v, want errors.ErrUnsupported", m, err)
		}
	}
	if got := s.Mounted(); len(got) != 0 {
		t.Errorf("Mounted() = %v after failed mounts", got)
	}
	if err := s.Unmount(); err != nil {
		t.Errorf("Unmount with nothing mounted: %v", err)
	}
}
