package rootfs

import (
	"fmt"
	"os"
	"testing"
)

// TestMain keeps the tests' builds out of the user's build cache.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "podvm-rootfs-test-cache-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("PODVM_BUILD_CACHE_DIR", dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
