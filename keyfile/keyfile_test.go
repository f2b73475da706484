package keyfile

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRead: a regular file, directly or through a link, is read; devices,
// FIFOs, directories and files above the cap are refused at once, with
// the setting and the path in the message.
func TestRead(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "key.pem")
	if err := os.WriteFile(key, []byte("KEY\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.pem")
	if err := os.Symlink(key, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, bytes.Repeat([]byte{'a'}, 101), 0o600); err != nil {
		t.Fatal(err)
	}
	devLink := filepath.Join(dir, "zero-link")
	if err := os.Symlink("/dev/zero", devLink); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path string
		want       string // "" reads KEY\n
	}{
		{"regular", key, ""},
		{"symlink to a regular file", link, ""},
		{"/dev/zero", "/dev/zero", "a character device, not a regular file"},
		{"symlink to /dev/zero", devLink, "a character device, not a regular file"},
		{"FIFO", fifo, "a FIFO, not a regular file"},
		{"directory", dir, "a directory, not a regular file"},
		{"above the cap", big, "101 bytes, more than the 100"},
		{"missing", filepath.Join(dir, "none"), "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan struct{})
			var data []byte
			var err error
			go func() {
				defer close(done)
				data, err = Read(tc.path, "some_setting", 100)
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatalf("Read(%s) blocks", tc.path)
			}
			if tc.want == "" {
				if err != nil || string(data) != "KEY\n" {
					t.Fatalf("Read(%s) = %q, %v; want KEY", tc.path, data, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Read(%s) accepted %d bytes", tc.path, len(data))
			}
			if msg := err.Error(); !strings.Contains(msg, tc.want) || !strings.HasPrefix(msg, "some_setting: ") || !strings.Contains(msg, tc.path) {
				t.Errorf("Read(%s): %q; want the setting, the path and %q", tc.path, msg, tc.want)
			}
		})
	}
}

// TestReadNeverOpensNonRegular: opening a device can act on it (a watchdog
// arms), so a path that is not a regular file is refused before any open.
// A FIFO shows it: a writer waiting to open one goes on only once a reader
// opens it.
func TestReadNeverOpensNonRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(dir, "opened")
	writer := exec.Command("sh", "-c", `exec 3>"$1"; : >"$2"`, "sh", fifo, marker)
	if err := writer.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		writer.Process.Kill()
		writer.Wait()
	}()
	time.Sleep(200 * time.Millisecond) // the writer blocks in its open
	if _, err := Read(fifo, "some_setting", 100); err == nil {
		t.Fatal("Read accepted a FIFO")
	}
	time.Sleep(500 * time.Millisecond)
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("Read opened the FIFO: the waiting writer went on")
	}
}
