package cachedir

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// nobody is a uid that is neither root nor the test's user.
const nobody = 65534

// asRoot skips a test that must chown files to another user, unless
// PODVM_REQUIRE_ROOT asks for it to fail instead.
func asRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("PODVM_REQUIRE_ROOT") != "" {
		t.Fatal("PODVM_REQUIRE_ROOT is set and the test does not run as root")
	}
	t.Skip("needs root to chown to another user")
}

func TestTrusted(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, root string)
		root  bool // needs root
		want  string
	}{
		{"missing", func(t *testing.T, root string) {}, false, ""},
		{"good", func(t *testing.T, root string) { mkdir(t, root, 0o755) }, false, ""},
		{"writable by others", func(t *testing.T, root string) { mkdir(t, root, 0o777) }, false, "writable by group or others"},
		{"writable by group", func(t *testing.T, root string) { mkdir(t, root, 0o775) }, false, "writable by group or others"},
		{"a file", func(t *testing.T, root string) { write(t, root, "x", 0o644) }, false, "not a directory"},
		{"a link to a good directory", func(t *testing.T, root string) {
			target := root + ".target"
			mkdir(t, target, 0o755)
			symlink(t, target, root)
		}, false, "symbolic link"},
		{"owned by nobody", func(t *testing.T, root string) {
			mkdir(t, root, 0o755)
			chown(t, root, nobody)
		}, true, "owned by uid 65534"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.root {
				asRoot(t)
			}
			root := filepath.Join(t.TempDir(), "cache")
			tt.setup(t, root)
			err := Trusted(root)
			check(t, err, tt.want)
		})
	}
}

// TestOpenDirEveryLevel: each level from the root down to the directory
// used is checked, not only the root.
func TestOpenDirEveryLevel(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, root string) // root, root/a and root/a/b exist, 0755
		root  bool
		want  string
	}{
		{"good", func(t *testing.T, root string) {}, false, ""},
		{"middle level writable by others", func(t *testing.T, root string) {
			chmod(t, filepath.Join(root, "a"), 0o777)
		}, false, "writable by group or others"},
		{"last level writable by group", func(t *testing.T, root string) {
			chmod(t, filepath.Join(root, "a", "b"), 0o770)
		}, false, "writable by group or others"},
		{"middle level a link", func(t *testing.T, root string) {
			a := filepath.Join(root, "a")
			if err := os.Rename(a, root+".elsewhere"); err != nil {
				t.Fatal(err)
			}
			symlink(t, root+".elsewhere", a)
		}, false, "symbolic link"},
		{"last level a link", func(t *testing.T, root string) {
			b := filepath.Join(root, "a", "b")
			if err := os.Rename(b, root+".elsewhere"); err != nil {
				t.Fatal(err)
			}
			symlink(t, root+".elsewhere", b)
		}, false, "symbolic link"},
		{"last level a file", func(t *testing.T, root string) {
			b := filepath.Join(root, "a", "b")
			if err := os.Remove(b); err != nil {
				t.Fatal(err)
			}
			write(t, b, "x", 0o644)
		}, false, "not a directory"},
		{"middle level owned by nobody", func(t *testing.T, root string) {
			chown(t, filepath.Join(root, "a"), nobody)
		}, true, "owned by uid 65534"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.root {
				asRoot(t)
			}
			root := filepath.Join(t.TempDir(), "cache")
			mkdir(t, filepath.Join(root, "a", "b"), 0o755)
			tt.setup(t, root)
			d, err := OpenDir(root, filepath.Join(root, "a", "b"), false)
			if d != nil {
				d.Close()
			}
			check(t, err, tt.want)
		})
	}
}

func TestOpenDirCreates(t *testing.T) {
	// A fresh user may have no ~/.cache yet.
	root := filepath.Join(t.TempDir(), ".cache", "podvm")
	d, err := OpenDir(root, filepath.Join(root, "modules", "v1"), true)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Name() != filepath.Join(root, "modules", "v1") {
		t.Errorf("name %q", d.Name())
	}
	if fi, err := os.Lstat(filepath.Join(root, "modules", "v1")); err != nil || !fi.IsDir() {
		t.Errorf("not created: %v", err)
	}
	for _, outside := range []string{filepath.Dir(root), "/etc", filepath.Join(root, "..", "x")} {
		if d, err := OpenDir(root, outside, true); err == nil {
			d.Close()
			t.Errorf("OpenDir(%q) below %q: no error", outside, root)
		}
	}
}

func TestOpenFileAt(t *testing.T) {
	host := filepath.Join(t.TempDir(), "host-file")
	write(t, host, "host secret", 0o600)
	tests := []struct {
		name  string
		setup func(t *testing.T, p string)
		max   int64
		root  bool
		want  string
	}{
		{"good", func(t *testing.T, p string) { write(t, p, "data", 0o644) }, 0, false, ""},
		{"at the cap", func(t *testing.T, p string) { write(t, p, "data", 0o644) }, 4, false, ""},
		{"over the cap", func(t *testing.T, p string) { write(t, p, "data!", 0o644) }, 4, false, "larger than the 4 bytes allowed"},
		{"link to a host file", func(t *testing.T, p string) { symlink(t, host, p) }, 0, false, "symbolic link"},
		{"link to /dev/zero", func(t *testing.T, p string) { symlink(t, "/dev/zero", p) }, 1 << 20, false, "symbolic link"},
		{"relative link", func(t *testing.T, p string) {
			write(t, p+".real", "data", 0o644)
			symlink(t, filepath.Base(p)+".real", p)
		}, 0, false, "symbolic link"},
		{"fifo", func(t *testing.T, p string) {
			if err := syscall.Mkfifo(p, 0o644); err != nil {
				t.Fatal(err)
			}
		}, 0, false, "not a regular file"},
		{"directory", func(t *testing.T, p string) { mkdir(t, p, 0o755) }, 0, false, "not a regular file"},
		{"writable by others", func(t *testing.T, p string) { write(t, p, "data", 0o666) }, 0, false, "writable by group or others"},
		{"owned by nobody", func(t *testing.T, p string) {
			write(t, p, "data", 0o644)
			chown(t, p, nobody)
		}, 0, true, "owned by uid 65534"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.root {
				asRoot(t)
			}
			dir := t.TempDir()
			tt.setup(t, filepath.Join(dir, "f"))
			d, err := OpenDir(dir, dir, false)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			done := make(chan error, 1)
			var data []byte
			go func() {
				f, err := OpenFileAt(d, "f", tt.max)
				if err == nil {
					data, err = io.ReadAll(f)
					f.Close()
				}
				done <- err
			}()
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("OpenFileAt hangs")
			}
			check(t, err, tt.want)
			if err != nil && (strings.Contains(err.Error(), "host secret") || strings.Contains(err.Error(), "11 bytes")) {
				t.Errorf("the error tells about the host file: %v", err)
			}
			if err == nil && string(data) != "data" {
				t.Errorf("read %q", data)
			}
		})
	}
	d, err := OpenDir(filepath.Dir(host), filepath.Dir(host), false)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, bad := range []string{"", ".", "..", "../host-file", "a/b", "x\x00"} {
		if f, err := OpenFileAt(d, bad, 0); err == nil || !errors.Is(err, ErrUntrusted) {
			if f != nil {
				f.Close()
			}
			t.Errorf("OpenFileAt(%q): %v; want ErrUntrusted", bad, err)
		}
	}
}

func TestRoot(t *testing.T) {
	t.Setenv("PODVM_CACHE", "/srv/podvm-cache")
	if got, err := Root(""); err != nil || got != "/srv/podvm-cache" {
		t.Errorf("Root(\"\") = %q, %v; want $PODVM_CACHE", got, err)
	}
	if got, err := Root("/var/cache/x"); err != nil || got != "/var/cache/x" {
		t.Errorf("Root(setting) = %q, %v; want the setting", got, err)
	}
	t.Setenv("PODVM_CACHE", "")
	t.Setenv("XDG_CACHE_HOME", "/home/u/.cache")
	if got, err := Root(""); err != nil || got != "/home/u/.cache/podvm" {
		t.Errorf("Root(\"\") = %q, %v; want the user's cache directory", got, err)
	}
}

func check(t *testing.T, err error, want string) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return
	}
	if err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, ErrUntrusted) {
		t.Fatalf("got %v; want ErrUntrusted with %q", err, want)
	}
}

func mkdir(t *testing.T, p string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	chmod(t, p, mode)
}

func chmod(t *testing.T, p string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, p, data string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(p, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	chmod(t, p, mode)
}

func symlink(t *testing.T, target, p string) {
	t.Helper()
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}

func chown(t *testing.T, p string, uid int) {
	t.Helper()
	if err := os.Lchown(p, uid, -1); err != nil {
		t.Fatal(err)
	}
}
