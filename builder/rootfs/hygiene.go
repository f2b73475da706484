package rootfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/podvm-gpu/packer-plugin-podvm/chroot"
	"github.com/podvm-gpu/packer-plugin-podvm/keyscan"
)

// What an image must not carry, as cloud images have it: every VM made
// from it gets its own machine ID and SSH host keys at first boot, and
// package lists and downloaded packages are stale, useless weight.
var (
	// hygieneGlobs are removed outright.
	hygieneGlobs = []string{
		"etc/ssh/ssh_host_*",
		"var/lib/apt/lists/*",
		"var/lib/apt/lists/partial/*",
		"var/cache/apt/*.bin",
		"var/cache/apt/archives/*.deb",
		"var/cache/apt/archives/partial/*",
	}
	// hygieneKeep are entries the globs match that apt needs to exist.
	hygieneKeep = map[string]bool{
		"var/lib/apt/lists/partial":      true,
		"var/lib/apt/lists/lock":         true,
		"var/cache/apt/archives/lock":    true,
		"var/cache/apt/archives/partial": true,
	}
)

// scrubImage makes the tree clean in the sense of hygieneProblems: an
// empty /etc/machine-id (systemd makes a new one at first boot and runs
// its first-boot units), no dbus copy of the ID, no SSH host keys, no apt
// lists or package cache.
func scrubImage(root string) error {
	if err := replaceFile(root, "/etc/machine-id", nil, 0o444); err != nil {
		return err
	}
	if dir, err := chroot.ResolveIn(root, "/var/lib/dbus"); err == nil {
		dbus := filepath.Join(dir, "machine-id")
		if fi, err := os.Lstat(dbus); err == nil && fi.Mode().IsRegular() {
			if err := os.Remove(dbus); err != nil {
				return fmt.Errorf("remove /var/lib/dbus/machine-id: %w", err)
			}
		}
	}
	for _, g := range hygieneGlobs {
		matches, err := globIn(root, g)
		if err != nil {
			return err
		}
		for _, m := range matches {
			rel, _ := filepath.Rel(root, m)
			if hygieneKeep[rel] {
				continue
			}
			if err := os.RemoveAll(m); err != nil {
				return fmt.Errorf("remove /%s: %w", rel, err)
			}
		}
	}
	return nil
}

// hygieneProblems lists what the tree carries that no image may, private
// key material of any kind among it (files a package shipped unchanged
// aside).
func hygieneProblems(root string) []string {
	var out []string
	pristine, err := keyscan.DpkgPristine(root)
	if err != nil {
		out = append(out, "reading dpkg's file sums: "+err.Error())
	}
	found, _, err := keyscan.Tree(root, []string{"proc", "sys", "dev"}, pristine)
	if err != nil {
		out = append(out, "scanning for private keys: "+err.Error())
	}
	for _, f := range found {
		out = append(out, fmt.Sprintf("%s: private key material (%s)", f.Path, f.Kind))
	}
	fi, err := os.Lstat(filepath.Join(root, "etc/machine-id"))
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		out = append(out, "/etc/machine-id: "+err.Error())
	case !fi.Mode().IsRegular():
		out = append(out, "/etc/machine-id is not a regular file")
	case fi.Size() != 0:
		out = append(out, "/etc/machine-id is not empty: every VM from this image would share one machine ID")
	}
	if dir, err := chroot.ResolveIn(root, "/var/lib/dbus"); err == nil {
		if fi, err := os.Lstat(filepath.Join(dir, "machine-id")); err == nil && fi.Mode().IsRegular() {
			out = append(out, "/var/lib/dbus/machine-id is a file of its own: every VM would share it")
		}
	}
	for _, g := range hygieneGlobs {
		matches, _ := globIn(root, g)
		for _, m := range matches {
			rel, _ := filepath.Rel(root, m)
			if hygieneKeep[rel] {
				continue
			}
			what := "apt package lists or cache"
			if strings.HasPrefix(rel, "etc/ssh/") {
				what = "an SSH host key: every VM would share it"
			}
			out = append(out, fmt.Sprintf("/%s: %s", rel, what))
		}
	}
	return out
}

// globIn matches pattern (relative to the tree, the pattern in its last
// element only) with its directory resolved inside root: a link in the tree
// never leads the scrub to the host's files.
func globIn(root, pattern string) ([]string, error) {
	dir, err := chroot.ResolveIn(root, "/"+filepath.Dir(pattern))
	if err != nil {
		return nil, nil // a directory the tree lacks holds nothing
	}
	return filepath.Glob(filepath.Join(dir, filepath.Base(pattern)))
}
