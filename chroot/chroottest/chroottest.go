// Package chroottest builds tiny root filesystems for tests that chroot
// into them, and skips (or, with PODVM_REQUIRE_ROOT=1, fails) tests that
// need root.
package chroottest

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// RequireRoot skips the test when not running as root. With
// PODVM_REQUIRE_ROOT=1 (make check and CI set it) it fails instead, so a
// misconfigured runner cannot turn these tests into silent skips.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if mustRun() {
		t.Fatal("this test needs root (chroot, mount) and PODVM_REQUIRE_ROOT=1 says it must run")
	}
	t.Skip("needs root (chroot, mount): run as root; PODVM_REQUIRE_ROOT=1 turns this skip into a failure")
}

func mustRun() bool {
	return os.Getenv("PODVM_REQUIRE_ROOT") == "1"
}

// applets are the busybox commands the tests use inside a root.
var applets = []string{"sh", "setsid", "sleep", "echo", "cat", "printf", "id", "ls", "mkdir", "touch", "rm", "mount", "true", "false", "pwd", "env", "ln", "stat", "grep"}

// BusyboxRoot returns a fresh directory holding a statically linked
// busybox as /bin/busybox with its applets linked in /bin, plus /tmp, /etc,
// /proc, /sys, /dev and /run: enough to chroot into. It needs the
// busybox-static package (Debian) or another static busybox in PATH.
func BusyboxRoot(t testing.TB) string {
	t.Helper()
	bb := staticBusybox(t)
	root := t.TempDir()
	for _, d := range []string{"bin", "tmp", "etc", "proc", "sys", "dev", "run", "root", "usr/sbin"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(root, "tmp"), 0o1777); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "bin/busybox"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, a := range applets {
		if err := os.Symlink("busybox", filepath.Join(root, "bin", a)); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func staticBusybox(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"busybox.static", "busybox"} {
		p, err := exec.LookPath(name)
		if err != nil {
			continue
		}
		if isStatic(p) {
			return p
		}
	}
	if mustRun() {
		t.Fatal("no statically linked busybox found: install busybox-static")
	}
	t.Skip("no statically linked busybox found: install busybox-static")
	return ""
}

// isStatic reports whether the ELF file at p has no program interpreter.
func isStatic(p string) bool {
	f, err := elf.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return false
		}
	}
	return true
}

// RequireTools skips the test when a host tool is missing from PATH; with
// PODVM_REQUIRE_ROOT=1 it fails instead, naming the tool.
func RequireTools(t testing.TB, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			if mustRun() {
				t.Fatalf("%s not found in PATH, and PODVM_REQUIRE_ROOT=1 says this test must run (make deps installs it)", tool)
			}
			t.Skipf("%s not found in PATH", tool)
		}
	}
}

// KernelTreeMounts is shell that, run as root in a private mount
// namespace (unshare -m --propagation private), gives it a writable
// /usr/lib (an overlay, so /usr/lib/modules can be made) and an empty
// /boot, both in a tmpfs at $PODVM_TEST_SCRATCH: an image's kernel files
// on this host, which is left as it was.
const KernelTreeMounts = `mount -t tmpfs podvm-test "$PODVM_TEST_SCRATCH"
mkdir "$PODVM_TEST_SCRATCH/u" "$PODVM_TEST_SCRATCH/w" "$PODVM_TEST_SCRATCH/boot"
mount -t overlay overlay -o "lowerdir=/usr/lib,upperdir=$PODVM_TEST_SCRATCH/u,workdir=$PODVM_TEST_SCRATCH/w" /usr/lib
mount --bind "$PODVM_TEST_SCRATCH/boot" /boot
`
