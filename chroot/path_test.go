package chroot

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestResolveIn(t *testing.T) {
	root := t.TempDir()
	mkdir := func(p string) {
		if err := os.MkdirAll(filepath.Join(root, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, p string) {
		if err := os.Symlink(target, filepath.Join(root, p)); err != nil {
			t.Fatal(err)
		}
	}
	mkdir("usr/lib/modules")
	mkdir("etc")
	mkdir("a/b")
	link("usr/lib", "lib")                  // merged-usr style relative link
	link("/usr/lib", "abslib")              // absolute link: means the root's /usr/lib
	link("/etc", "evil")                    // absolute link to a host-looking path
	link("../../../../../../etc", "a/b/up") // climbs far above the root
	link("loop2", "loop1")
	link("loop1", "loop2")
	link("/nonexistent/file", "dangling")
	link("../..", "a/b/dotdot")

	tests := []struct {
		in   string
		want string // relative to root
	}{
		{"/", ""},
		{"", ""},
		{"/etc/passwd", "etc/passwd"},
		{"etc//passwd/", "etc/passwd"},
		{"/lib/modules", "usr/lib/modules"},
		{"/abslib/modules/x", "usr/lib/modules/x"},
		{"/evil/shadow", "etc/shadow"},
		{"/a/b/up/shadow", "etc/shadow"},
		{"/../../../etc/shadow", "etc/shadow"},
		{"/a/b/../../etc", "etc"},
		{"/dangling", "nonexistent/file"},
		{"/a/b/dotdot/etc", "etc"},
		{"/missing/dir/file", "missing/dir/file"},
	}
	for _, tt := range tests {
		got, err := ResolveIn(root, tt.in)
		if err != nil {
			t.Errorf("ResolveIn(%q): %v", tt.in, err)
			continue
		}
		want := filepath.Join(root, tt.want)
		if got != want {
			t.Errorf("ResolveIn(%q) = %q, want %q", tt.in, got, want)
		}
		if got != root && !strings.HasPrefix(got, root+"/") {
			t.Errorf("ResolveIn(%q) = %q escapes the root", tt.in, got)
		}
	}

	if _, err := ResolveIn(root, "/loop1/x"); err == nil || !strings.Contains(err.Error(), "too many levels") {
		t.Errorf("symlink loop: got %v, want a too-many-levels error", err)
	}
	if _, err := ResolveIn("relative/root", "/x"); err == nil {
		t.Error("relative root: want an error")
	}
}

func TestResolveParentIn(t *testing.T) {
	root := t.TempDir()
	if err := os.Symlink("/etc", filepath.Join(root, "evil")); err != nil {
		t.Fatal(err)
	}
	got, err := resolveParentIn(root, "/evil")
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(root, "evil"); got != want {
		t.Errorf("resolveParentIn(/evil) = %q, want the link itself %q", got, want)
	}
	got, err = resolveParentIn(root, "/evil/x")
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(root, "etc/x"); got != want {
		t.Errorf("resolveParentIn(/evil/x) = %q, want %q", got, want)
	}
}
