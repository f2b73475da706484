package aptrepo

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestLoadSignerNotRegular: repo --key and local_repo_signing_key naming a
// device or a FIFO are refused at once (read whole, /dev/zero ran out of
// memory and a FIFO blocked for ever).
func TestLoadSignerNotRegular(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{fifo, "/dev/zero"} {
		t.Run(filepath.Base(path), func(t *testing.T) {
			done := make(chan error, 1)
			go func() {
				_, err := LoadSigner(path, "", time.Now())
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), "signing key") || !strings.Contains(err.Error(), "not a regular file") {
					t.Errorf("LoadSigner(%s): %v; want a refusal", path, err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("LoadSigner(%s) blocks", path)
			}
		})
	}
}
