package rootfs

import (
	"fmt"
	"os"
	"testing"
)

// TestMain keeps the tests' builds out of the user's build cache.
func TestMain(m *testing.M) {
	// A helper that a test kills takes its parent's directory: killed, it
	// could not remove one of its own.
	if os.Getenv(killHelperEnv) != "" {
		os.Exit(m.Run())
	}
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
