package rootfs

import (
	"os"
	"path/filepath"
	"testing"
)

func TestScrubHostIdentity(t *testing.T) {
	root := t.TempDir()
	outside := filepath.Join(t.TempDir(), "host-hostname")
	if err := os.WriteFile(outside, []byte("buildhost\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	os.Symlink(outside, filepath.Join(root, "etc/hostname"))
	os.WriteFile(filepath.Join(root, "etc/hosts"), []byte("10.0.0.5 buildhost\n"), 0o644)
	os.WriteFile(filepath.Join(root, "etc/resolv.conf"), []byte("nameserver 10.0.0.1\n"), 0o644)

	if err := scrubHostIdentity(root); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "etc/hostname")); string(b) != "localhost\n" {
		t.Errorf("hostname %q", b)
	}
	if b, _ := os.ReadFile(outside); string(b) != "buildhost\n" {
		t.Errorf("wrote through the symlink: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "etc/hosts")); len(b) == 0 || string(b) == "10.0.0.5 buildhost\n" {
		t.Errorf("hosts %q", b)
	}
	if _, err := os.Lstat(filepath.Join(root, "etc/resolv.conf")); !os.IsNotExist(err) {
		t.Errorf("resolv.conf still there: %v", err)
	}
}
