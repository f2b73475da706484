// Package kerneltest holds the fixture trees that every reader of the
// image's kernels is tested on: imagekernel's own (the host reader, the
// listing run in a chroot, the mkosi scripts' shell function) and the
// podvm-rootfs disk writer.
package kerneltest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Tree is a fixture: entries of an image and the kernels the rule finds
// in it, oldest first; or, with Refused, the name it refuses.
type Tree struct {
	Name    string
	Entries []string // "path/" a directory, "path -> target" a link, else an empty file
	Want    []string
	Refused string
}

const (
	mods = "usr/lib/modules/"
	deb  = "6.12.57+deb13-amd64"
	old  = "6.12.41+deb13-amd64"
)

// Trees are the fixtures.
var Trees = []Tree{
	{Name: "one kernel", Entries: []string{mods + deb + "/", "boot/vmlinuz-" + deb}, Want: []string{deb}},
	{Name: "vmlinuz without its modules directory", Entries: []string{"boot/vmlinuz-" + deb}},
	{Name: "modules directory without vmlinuz", Entries: []string{mods + deb + "/kernel/", "boot/config-" + deb}},
	{Name: "the image in the modules directory", Entries: []string{mods + deb + "/vmlinuz"}, Want: []string{deb}},
	{Name: ".old copies", Entries: []string{
		mods + deb + "/", "boot/vmlinuz-" + deb, "boot/vmlinuz-" + old + ".old", "boot/vmlinuz.old -> vmlinuz-" + old + ".old", mods + old + "/kernel/"},
		Want: []string{deb}},
	{Name: "-dbg builds", Entries: []string{
		mods + deb + "/", "boot/vmlinuz-" + deb, "boot/vmlinuz-" + deb + "-dbg",
		"usr/lib/debug/lib/modules/" + deb + "/", "usr/lib/debug/boot/vmlinux-" + deb},
		Want: []string{deb}},
	{Name: "links", Entries: []string{
		// Ubuntu's unversioned links; a versioned link into the modules
		// directory; a dangling one.
		"boot/vmlinuz -> vmlinuz-" + deb, "vmlinuz -> boot/vmlinuz-" + deb,
		mods + deb + "/image", "boot/vmlinuz-" + deb + " -> ../" + mods + deb + "/image",
		mods + old + "/", "boot/vmlinuz-" + old + " -> vmlinuz-gone"},
		Want: []string{deb}},
	{Name: "several kernels, in dpkg's order", Entries: []string{
		mods + "6.1.0-10-amd64/", "boot/vmlinuz-6.1.0-10-amd64",
		mods + "6.1.0-9-amd64/", "boot/vmlinuz-6.1.0-9-amd64",
		mods + deb + "/", "boot/vmlinuz-" + deb,
		mods + old + "/vmlinuz",
		mods + "6.12.57~rc1+deb13-amd64/", "boot/vmlinuz-6.12.57~rc1+deb13-amd64",
		mods + "5.10.0-30-amd64/", "boot/vmlinuz-5.10.0-30-amd64",
		mods + "6.8.0-1028-azure/", "boot/vmlinuz-6.8.0-1028-azure"},
		Want: []string{"5.10.0-30-amd64", "6.1.0-9-amd64", "6.1.0-10-amd64", "6.8.0-1028-azure", old, "6.12.57~rc1+deb13-amd64", deb}},
	{Name: "no kernel at all", Entries: []string{"boot/", mods}},
	{Name: "a name that is no release", Entries: []string{mods + "6.1$(touch${IFS}x)/", "boot/vmlinuz-6.1$(touch${IFS}x)", mods + deb + "/", "boot/vmlinuz-" + deb},
		Refused: "6.1$(touch${IFS}x)"},
}

// Build makes t's entries below root.
func Build(tb testing.TB, root string, t Tree) {
	tb.Helper()
	for _, e := range t.Entries {
		p, target, link := strings.Cut(e, " -> ")
		full := filepath.Join(root, p)
		must(tb, os.MkdirAll(filepath.Dir(full), 0o755))
		switch {
		case link:
			must(tb, os.Symlink(target, full))
		case strings.HasSuffix(p, "/"):
			must(tb, os.MkdirAll(full, 0o755))
		default:
			must(tb, os.WriteFile(full, []byte("x"), 0o644))
		}
	}
}

func must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}
