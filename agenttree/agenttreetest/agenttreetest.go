// Package agenttreetest gives tests the stand-in pod VM binaries tree,
// test/e2e/testdata/podvm-binaries: scripts of this project's own under
// cloud-api-adaptor's program names, and units shaped like its units.
package agenttreetest

import (
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// Dir is the stand-in tree in the checkout. Its modes are git's (only the
// executable bit) and the umask's: tests use StandIn.
func Dir(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("agenttreetest: cannot locate the checkout")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "test", "e2e", "testdata", "podvm-binaries")
}

// StandIn copies the stand-in tree into a new directory of the test with
// deliberate modes: directories 0755, files 0755 where git marks them
// executable and 0644 otherwise; symlinks as they are.
func StandIn(t testing.TB) string {
	t.Helper()
	src := Dir(t)
	dst := filepath.Join(t.TempDir(), "podvm-binaries")
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			if err := os.MkdirAll(to, 0o755); err != nil {
				return err
			}
			return os.Chmod(to, 0o755) // MkdirAll's mode passes the umask
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, to)
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			mode := fs.FileMode(0o644)
			if info.Mode()&0o100 != 0 {
				mode = 0o755
			}
			if err := os.WriteFile(to, b, mode); err != nil {
				return err
			}
			return os.Chmod(to, mode)
		}
	})
	if err != nil {
		t.Fatalf("copying the stand-in binaries tree: %v", err)
	}
	// A wants link to a unit the tree does not have, which CAA's mkosi
	// skeleton provides, under systemd's escaped name. Made here, not kept
	// in the checkout: a backslash is not allowed in a Go module's file
	// names.
	if err := os.Symlink(`../`+SkeletonUnit, filepath.Join(dst, "etc/systemd/system/multi-user.target.wants", SkeletonUnit)); err != nil {
		t.Fatalf("copying the stand-in binaries tree: %v", err)
	}
	return dst
}

// SkeletonUnit is the unit StandIn's dangling wants link enables: the
// image must provide it (the CAA-shaped tree's skeleton does).
const SkeletonUnit = `run-kata\x2dcontainers.mount`
