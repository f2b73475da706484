package mkosi

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podvm-gpu/packer-plugin-podvm/chroot/chroottest"
)

// TestWriteForceNeverLeavesTheTree has a forced regeneration meet a
// .podvm-generated list that leads outside the tree: through a directory
// replaced by a symbolic link, by "..", by an absolute path. No file
// outside the tree may be removed or written, whatever the list says.
func TestWriteForceNeverLeavesTheTree(t *testing.T) {
	cases := []struct {
		name string
		// setup prepares dir (a tree of the previous generation) against
		// victim (a directory outside it) and returns the list to plant.
		setup func(t *testing.T, dir, victim string) string
		// refused: Write must fail, naming the reason.
		refused string
	}{
		{
			name: "directory replaced by a link",
			setup: func(t *testing.T, dir, victim string) string {
				mustRemoveAll(t, filepath.Join(dir, "mkosi.extra"))
				mustSymlink(t, victim, filepath.Join(dir, "mkosi.extra"))
				return "mkosi.conf\nmkosi.extra/file\n"
			},
			refused: "symbolic link",
		},
		{
			name: "link deeper down",
			setup: func(t *testing.T, dir, victim string) string {
				mustRemoveAll(t, filepath.Join(dir, "mkosi.extra/etc"))
				mustSymlink(t, victim, filepath.Join(dir, "mkosi.extra/etc"))
				return "mkosi.conf\nmkosi.extra/etc/file\n"
			},
			refused: "symbolic link",
		},
		{
			name: "relative link to the victim",
			setup: func(t *testing.T, dir, victim string) string {
				mustRemoveAll(t, filepath.Join(dir, "mkosi.extra"))
				mustSymlink(t, "../victim", filepath.Join(dir, "mkosi.extra"))
				return "mkosi.conf\nmkosi.extra/file\n"
			},
			refused: "symbolic link",
		},
		{
			name: "dot-dot",
			setup: func(t *testing.T, dir, victim string) string {
				return "mkosi.conf\n../victim/file\nmkosi.extra/../../victim/file\n"
			},
			refused: "not a path inside the tree",
		},
		{
			name: "absolute",
			setup: func(t *testing.T, dir, victim string) string {
				return "mkosi.conf\n" + filepath.Join(victim, "file") + "\n"
			},
			refused: "not a path inside the tree",
		},
		{
			name: "the list is a link to a list elsewhere",
			setup: func(t *testing.T, dir, victim string) string {
				list := filepath.Join(t.TempDir(), "list")
				if err := os.WriteFile(list, []byte("mkosi.conf\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				mustRemoveAll(t, filepath.Join(dir, generatedList))
				mustSymlink(t, list, filepath.Join(dir, generatedList))
				return ""
			},
			refused: generatedList,
		},
		{
			// The last component a link: the link is the tree's, and goes;
			// its target stays.
			name: "a listed file is a link",
			setup: func(t *testing.T, dir, victim string) string {
				mustRemoveAll(t, filepath.Join(dir, "mkosi.extra/etc/x.conf"))
				mustSymlink(t, filepath.Join(victim, "file"), filepath.Join(dir, "mkosi.extra/etc/x.conf"))
				return "mkosi.conf\nmkosi.extra/etc/x.conf\n"
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			parent := t.TempDir()
			dir, victim := filepath.Join(parent, "tree"), filepath.Join(parent, "victim")
			if err := os.Mkdir(victim, 0o755); err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{"file", "mkosi.conf"} {
				if err := os.WriteFile(filepath.Join(victim, name), []byte("precious\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			old := []File{
				{Path: "mkosi.conf", Mode: 0o644, Data: []byte("old\n")},
				{Path: "mkosi.extra/etc/x.conf", Mode: 0o644, Data: []byte("old x\n")},
			}
			if err := Write(dir, old, false); err != nil {
				t.Fatal(err)
			}
			if list := c.setup(t, dir, victim); list != "" {
				if err := os.WriteFile(filepath.Join(dir, generatedList), []byte(list), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			next := []File{
				{Path: "mkosi.conf", Mode: 0o644, Data: []byte("new\n")},
				{Path: "mkosi.postinst.d/y.sh", Mode: 0o755, Data: []byte("#!/bin/sh\n")},
			}
			err := Write(dir, next, true)
			switch {
			case c.refused == "" && err != nil:
				t.Errorf("Write: %v", err)
			case c.refused != "" && (err == nil || !strings.Contains(err.Error(), c.refused)):
				t.Errorf("Write: got %v, want an error saying %q", err, c.refused)
			}
			for _, name := range []string{"file", "mkosi.conf"} {
				if b, err := os.ReadFile(filepath.Join(victim, name)); err != nil || string(b) != "precious\n" {
					t.Errorf("victim/%s outside the tree: %q, %v", name, b, err)
				}
			}
			if entries, _ := os.ReadDir(victim); len(entries) != 2 {
				t.Errorf("victim holds %d entries, want 2: something was written outside the tree", len(entries))
			}
			if c.refused != "" {
				if b, err := os.ReadFile(filepath.Join(dir, "mkosi.conf")); err != nil || string(b) != "old\n" {
					t.Errorf("refused write changed mkosi.conf: %q, %v", b, err)
				}
			}
		})
	}
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func mustRemoveAll(t *testing.T, p string) {
	t.Helper()
	if err := os.RemoveAll(p); err != nil {
		t.Fatal(err)
	}
}

// TestWriteForceOnAMountPoint: the new files are staged beside the tree
// and renamed in, which fails across file systems. With the tree a mount
// point, the write must fail before the previous generation is removed.
func TestWriteForceOnAMountPoint(t *testing.T) {
	chroottest.RequireRoot(t)
	dir := filepath.Join(t.TempDir(), "tree")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", dir).Run() })
	for name, data := range map[string]string{
		"mkosi.conf":  "old\n",
		generatedList: "mkosi.conf\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	err := Write(dir, []File{{Path: "mkosi.conf", Mode: 0o644, Data: []byte("new\n")}}, true)
	if err == nil || !strings.Contains(err.Error(), "another file system") {
		t.Fatalf("Write on a mount point: %v, want a refusal naming the file system", err)
	}
	if data, err := os.ReadFile(filepath.Join(dir, "mkosi.conf")); err != nil || string(data) != "old\n" {
		t.Errorf("the previous generation was touched: %q, %v", data, err)
	}
}
