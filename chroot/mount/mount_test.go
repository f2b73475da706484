package mount

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/podvm-gpu/packer-plugin-podvm/chroot/chroottest"
)

const sampleMountinfo = `22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
23 22 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:2 - proc proc rw
24 22 0:5 / /dev rw,nosuid shared:3 - devtmpfs udev rw,size=4096k
90 22 0:50 / /build/root/proc rw,relatime - proc proc rw
91 22 0:5 / /build/root/dev rw,nosuid - devtmpfs udev rw
92 91 0:51 / /build/root/dev/pts rw,relatime - devpts devpts rw,gid=5,mode=620,ptmxmode=666
93 22 0:52 / /build/root/run rw,relatime - tmpfs tmpfs rw
94 93 0:53 / /build/root/run rw,relatime - tmpfs tmpfs rw
95 22 0:54 / /build/root/with\040space rw - tmpfs tmpfs rw
96 22 0:55 / /build/rootfs-other/proc rw - proc proc rw
97 22 0:56 / /build/root rw - tmpfs tmpfs rw
`

func TestParseMountinfo(t *testing.T) {
	got, err := parseMountinfo(strings.NewReader(sampleMountinfo))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 11 || got[8] != "/build/root/with space" {
		t.Errorf("parseMountinfo = %q", got)
	}
}

func TestBelow(t *testing.T) {
	all, err := parseMountinfo(strings.NewReader(sampleMountinfo))
	if err != nil {
		t.Fatal(err)
	}
	// Deepest first; the stacked /run twice, newest first; the sibling
	// /build/rootfs-other and /build/root itself are not "below".
	want := []string{
		"/build/root/dev/pts",
		"/build/root/with space",
		"/build/root/run",
		"/build/root/run",
		"/build/root/dev",
		"/build/root/proc",
	}
	for _, dir := range []string{"/build/root", "/build/root/"} {
		if got := below(all, dir); !reflect.DeepEqual(got, want) {
			t.Errorf("below(%q) =\n%q\nwant\n%q", dir, got, want)
		}
	}
}

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{
		`/a\040b`:      "/a b",
		`/tab\011x`:    "/tab\tx",
		`/back\134sl`:  `/back\sl`,
		`/plain`:       "/plain",
		`/short\04`:    `/short\04`,
		`/notoctal\9x`: `/notoctal\9x`,
	} {
		if got := unescape(in); got != want {
			t.Errorf("unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

func mounted(t *testing.T, dir string) []string {
	t.Helper()
	got, err := Under(dir)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestStackMountsAndUnmountsInReverse(t *testing.T) {
	chroottest.RequireRoot(t)
	root := t.TempDir()
	for _, d := range []string{"run", "dev", "ro"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var warnings []string
	s := &Stack{Warn: func(m string) { warnings = append(warnings, m) }}
	t.Cleanup(func() { s.Unmount() })
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	steps := []Mount{
		{Source: "tmpfs", Target: filepath.Join(root, "run"), FSType: "tmpfs", Data: "mode=0755"},
		{Source: src, Target: filepath.Join(root, "dev"), Flags: Bind, Private: true},
		{Source: "tmpfs", Target: filepath.Join(root, "dev"), FSType: "tmpfs"}, // stacked on the bind
		{Source: src, Target: filepath.Join(root, "ro"), Flags: Bind | ReadOnly},
	}
	for _, m := range steps {
		if err := s.Mount(m); err != nil {
			t.Fatal(err)
		}
	}
	if got := mounted(t, root); len(got) != 4 {
		t.Fatalf("mounted: %q", got)
	}
	if err := os.WriteFile(filepath.Join(root, "ro/g"), nil, 0o644); !strings.Contains(errString(err), "read-only") {
		t.Errorf("write to read-only bind: %v", err)
	}
	// Something inside the build mounts on top of ours.
	if err := os.Mkdir(filepath.Join(root, "run/inner"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := sysMount("tmpfs", filepath.Join(root, "run/inner"), "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	if err := s.Unmount(); err != nil {
		t.Fatal(err)
	}
	if got := mounted(t, root); len(got) != 0 {
		t.Errorf("still mounted after Unmount: %q", got)
	}
	if len(s.Mounted()) != 0 {
		t.Errorf("Mounted() after Unmount: %v", s.Mounted())
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "run/inner") {
		t.Errorf("warnings: %q", warnings)
	}
	// Idempotent.
	if err := s.Unmount(); err != nil {
		t.Errorf("second Unmount: %v", err)
	}
}

func TestUnmountBusyFallsBackToLazy(t *testing.T) {
	chroottest.RequireRoot(t)
	defer func(r int, d time.Duration) { busyRetries, busyDelay = r, d }(busyRetries, busyDelay)
	busyRetries, busyDelay = 3, 10*time.Millisecond

	root := t.TempDir()
	target := filepath.Join(root, "busy")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	var warnings []string
	s := &Stack{Warn: func(m string) { warnings = append(warnings, m) }}
	if err := s.Mount(Mount{Source: "tmpfs", Target: target, FSType: "tmpfs"}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(target, "held-open"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := s.Unmount(); err != nil {
		t.Fatal(err)
	}
	if got := mounted(t, root); len(got) != 0 {
		t.Errorf("still mounted: %q", got)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "umount -l") {
		t.Errorf("warnings: %q, want one about a lazy unmount", warnings)
	}
}

func TestSweep(t *testing.T) {
	chroottest.RequireRoot(t)
	root := t.TempDir()
	for _, d := range []string{"a", "a/b"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := sysMount("tmpfs", filepath.Join(root, "a"), "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "a/b"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := sysMount("tmpfs", filepath.Join(root, "a/b"), "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	found, err := Sweep(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(root, "a/b"), filepath.Join(root, "a")}
	if !reflect.DeepEqual(found, want) {
		t.Errorf("Sweep found %q, want %q", found, want)
	}
	if got := mounted(t, root); len(got) != 0 {
		t.Errorf("still mounted: %q", got)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
