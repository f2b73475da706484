package rootfs

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestRunHostReportsOutputTail(t *testing.T) {
	cmd := exec.Command("sh", "-c", "for i in $(seq 1 40); do echo line $i; done; echo oops >&2; exit 4")
	err := runHost(context.Background(), cmd)
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	if !strings.Contains(msg, "exit status 4") || !strings.Contains(msg, "oops") || !strings.Contains(msg, "line 40") {
		t.Errorf("error lacks the status or the last output: %v", err)
	}
	if strings.Contains(msg, "line 1\n") {
		t.Errorf("error quotes all the output instead of its tail: %v", err)
	}
}

// A cancelled host command gets SIGTERM first, so an exit trap (which
// debootstrap uses to unmount) runs.
func TestRunHostCancelRunsExitTrap(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "trapped")
	cmd := exec.Command("sh", "-c", `trap 'touch `+marker+`; exit 1' TERM; sleep 30 & wait`)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		time.Sleep(300 * time.Millisecond)
		cancel()
	}()
	start := time.Now()
	err := runHost(ctx, cmd)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("cancellation took %s", d)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("exit trap did not run: %v", err)
	}
}

func TestRunHostCancelKillsStubbornCommand(t *testing.T) {
	old := termGrace
	defer func() { termGrace = old }()
	termGrace = 200 * time.Millisecond
	cmd := exec.Command("sh", "-c", `trap '' TERM; sleep 30`)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := runHost(ctx, cmd); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("a command ignoring SIGTERM ran %s", d)
	}
}

func TestLockDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "rootfs")
	l, err := lockDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lockDir(dir); err == nil || !strings.Contains(err.Error(), "output_directory "+dir+" is in use by another build") {
		t.Errorf("second lock: %v", err)
	} else if !strings.Contains(err.Error(), "pid ") {
		t.Errorf("the error does not name the holder: %v", err)
	}
	if err := l.release(); err != nil {
		t.Fatal(err)
	}
	if err := l.release(); err != nil {
		t.Errorf("second release: %v", err)
	}
	if _, err := os.Stat(lockPath(dir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lock file left (%v)", err)
	}
	// A lock file a killed build left behind holds no lock.
	if err := os.WriteFile(lockPath(dir), []byte("99999"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err = lockDir(dir)
	if err != nil {
		t.Fatalf("stale lock file: %v", err)
	}
	l.release()
	if got := lockPath("/a/b/rootfs"); got != "/a/b/.rootfs.lock" {
		t.Errorf("lockPath = %s", got)
	}
}

func TestOverrideRestore(t *testing.T) {
	root := t.TempDir()
	etc := filepath.Join(root, "etc")
	if err := os.MkdirAll(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	// Regular file with an unusual mode and owner.
	orig := filepath.Join(etc, "resolv.conf")
	if err := os.WriteFile(orig, []byte("nameserver 192.0.2.1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		if err := os.Chown(orig, 123, 456); err != nil {
			t.Fatal(err)
		}
	}
	o, err := installOverride(root, "/etc/resolv.conf", []byte("build\n"), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(orig); string(data) != "build\n" {
		t.Errorf("installed %q", data)
	}
	if fi, _ := os.Stat(orig); fi.Mode().Perm() != 0o644 {
		t.Errorf("installed mode %v", fi.Mode())
	}
	if kept, err := o.restore(); err != nil || kept {
		t.Fatalf("restore: kept %v, %v", kept, err)
	}
	fi, _ := os.Stat(orig)
	if data, _ := os.ReadFile(orig); string(data) != "nameserver 192.0.2.1\n" || fi.Mode().Perm() != 0o600 {
		t.Errorf("restored %q mode %v", data, fi.Mode())
	}
	if os.Geteuid() == 0 {
		if uid, gid := ownerOf(fi); uid != 123 || gid != 456 {
			t.Errorf("restored owner %d:%d", uid, gid)
		}
	}

	// Absent before: absent after.
	o, err = installOverride(root, "/usr/sbin/policy-rc.d", []byte(policyRcD), 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(root, "usr/sbin/policy-rc.d")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("policy-rc.d: %v", err)
	}
	if _, err := o.restore(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(root, "usr/sbin/policy-rc.d")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("policy-rc.d left (%v)", err)
	}

	// A symlink comes back as the same symlink.
	if err := os.Remove(orig); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../run/systemd/resolve/stub-resolv.conf", orig); err != nil {
		t.Fatal(err)
	}
	o, err = installOverride(root, "/etc/resolv.conf", []byte("build\n"), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.restore(); err != nil {
		t.Fatal(err)
	}
	if target, _ := os.Readlink(orig); target != "../run/systemd/resolve/stub-resolv.conf" {
		t.Errorf("restored link %q", target)
	}

	// If the build replaced our file, the build wins.
	o, err = installOverride(root, "/etc/resolv.conf", []byte("build\n"), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(orig, []byte("nameserver 198.51.100.1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if kept, err := o.restore(); err != nil || !kept {
		t.Errorf("restore after the build changed the file: kept %v, %v", kept, err)
	}
	if data, _ := os.ReadFile(orig); string(data) != "nameserver 198.51.100.1\n" {
		t.Errorf("the build's file was replaced: %q", data)
	}

	// An /etc that is a symlink out of the tree is resolved inside it.
	evil := t.TempDir()
	root2 := t.TempDir()
	if err := os.Symlink(evil, filepath.Join(root2, "etc")); err != nil {
		t.Fatal(err)
	}
	o, err = installOverride(root2, "/etc/resolv.conf", []byte("x"), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer o.restore()
	if entries, _ := os.ReadDir(evil); len(entries) != 0 {
		t.Errorf("wrote outside the tree: %v", entries)
	}
}

func ownerOf(fi os.FileInfo) (uid, gid int) {
	st := fi.Sys().(*syscall.Stat_t)
	return int(st.Uid), int(st.Gid)
}
