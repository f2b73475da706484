// Package imagekernel holds the one rule for which kernels an image has,
// followed by the podvm-gpu provisioner (over its communicator), the
// podvm-rootfs disk writer (on the host's copy of the tree) and a mkosi
// tree's build (mkosi run-steps, through mkosi-chroot).
//
// A kernel of the image is a release <v> with a directory
// /usr/lib/modules/<v> and a kernel image beside it: /boot/vmlinuz-<v> or
// /usr/lib/modules/<v>/vmlinuz, links followed inside the image. A modules
// directory left by a removed kernel has no image, and a /boot/vmlinuz-<v>
// without modules (a renamed .old copy, a debug build) has no modules to
// build against; neither counts. Kernels come oldest first, in dpkg's
// version order, so the newest is the last.
package imagekernel

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// The image's directories the rule reads.
const (
	ModulesDir = "/usr/lib/modules"
	BootDir    = "/boot"
)

// releaseRe is the grammar of a kernel release, as /usr/lib/modules and
// /boot name it, such as 6.12.57+deb13-amd64.
var releaseRe = regexp.MustCompile(`^[0-9]+\.[0-9]+[0-9A-Za-z.+_~-]*$`)

// Valid reports whether s is a kernel release. Names read from an image
// pass through it before they reach a shell or a file name.
func Valid(s string) bool { return releaseRe.MatchString(s) }

// Sort orders kernel releases oldest first (Compare).
func Sort(ks []string) {
	sort.SliceStable(ks, func(i, j int) bool { return Compare(ks[i], ks[j]) < 0 })
}

// Tree is what the rule reads from an image: names only, each entry
// present in the image (links resolved inside it).
type Tree struct {
	Modules      []string // directories in /usr/lib/modules
	ModuleImages []string // <v> whose /usr/lib/modules/<v>/vmlinuz exists
	Boot         []string // entries of /boot
}

// Select applies the rule to t: the image's kernels, oldest first. A
// kernel whose name is not a release is an error that names it, never
// skipped: it would be a kernel of the image left untargeted.
func Select(t Tree) ([]string, error) {
	var ks []string
	for _, v := range t.Modules {
		if slices.Contains(ks, v) || !slices.Contains(t.Boot, "vmlinuz-"+v) && !slices.Contains(t.ModuleImages, v) {
			continue
		}
		if !Valid(v) {
			return nil, fmt.Errorf("the image has a kernel in %s/%q that is not a kernel release (such as 6.12.57+deb13-amd64); remove it", ModulesDir, v)
		}
		ks = append(ks, v)
	}
	Sort(ks)
	return ks, nil
}

// ErrNone says the image has no kernel by the rule.
var ErrNone = errors.New("no kernel in the image: no " + ModulesDir + "/<version> with " + BootDir + "/vmlinuz-<version> or " + ModulesDir + "/<version>/vmlinuz")

// ListCommand prints the image's Tree for ParseListing when run in the
// image (a chroot, a VM): one NUL-terminated record per entry, so that no
// name, whatever it holds, reads as another record. It always exits 0.
const ListCommand = `for d in ` + ModulesDir + `/*/; do [ -d "$d" ] || continue; v=${d%/}; v=${v##*/}; ` +
	`printf 'modules %s\0' "$v"; if [ -e "$d/vmlinuz" ]; then printf 'image %s\0' "$v"; fi; done; ` +
	`for f in ` + BootDir + `/vmlinuz-*; do if [ -e "$f" ]; then printf 'boot %s\0' "${f##*/}"; fi; done; true`

// FromListing applies the rule to ListCommand's output: the image's
// kernels, oldest first.
func FromListing(out string) ([]string, error) {
	t, err := ParseListing(out)
	if err != nil {
		return nil, err
	}
	return Select(t)
}

// ParseListing reads ListCommand's output.
func ParseListing(out string) (Tree, error) {
	var t Tree
	for _, rec := range strings.Split(out, "\x00") {
		if rec == "" {
			continue
		}
		kind, name, _ := strings.Cut(rec, " ")
		switch kind {
		case "modules":
			t.Modules = append(t.Modules, name)
		case "image":
			t.ModuleImages = append(t.ModuleImages, name)
		case "boot":
			t.Boot = append(t.Boot, name)
		default:
			return t, fmt.Errorf("listing the image's kernels: unexpected record %q", rec)
		}
	}
	return t, nil
}

// ResolveFunc resolves path, absolute in the image, to a path on this
// host with every link followed inside root, never on the host
// (chroot.ResolveIn). It is a parameter so that this package, which the
// option model imports for Valid and Sort, imports nothing of the chroot's.
type ResolveFunc func(root, path string) (string, error)

// ReadRoot reads the Tree of the image whose root directory is root on
// this host, every link resolved by resolve. A missing directory is an
// empty one; names beginning with a dot are skipped, as the shell's globs
// skip them.
func ReadRoot(root string, resolve ResolveFunc) (Tree, error) {
	var t Tree
	exists := func(p string, dir bool) (bool, error) {
		hp, err := resolve(root, p)
		if err != nil {
			return false, err
		}
		fi, err := os.Stat(hp)
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return err == nil && (!dir || fi.IsDir()), err
	}
	list := func(dir string) ([]string, error) {
		hp, err := resolve(root, dir)
		if err != nil {
			return nil, err
		}
		des, err := os.ReadDir(hp)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		names := make([]string, 0, len(des))
		for _, de := range des {
			if !strings.HasPrefix(de.Name(), ".") {
				names = append(names, de.Name())
			}
		}
		return names, err
	}
	mods, err := list(ModulesDir)
	if err != nil {
		return t, fmt.Errorf("reading the image's kernels: %w", err)
	}
	for _, v := range mods {
		if ok, err := exists(ModulesDir+"/"+v, true); err != nil || !ok {
			if err != nil {
				return t, fmt.Errorf("reading the image's kernels: %w", err)
			}
			continue
		}
		t.Modules = append(t.Modules, v)
		if ok, err := exists(ModulesDir+"/"+v+"/vmlinuz", false); err != nil {
			return t, fmt.Errorf("reading the image's kernels: %w", err)
		} else if ok {
			t.ModuleImages = append(t.ModuleImages, v)
		}
	}
	boot, err := list(BootDir)
	if err != nil {
		return t, fmt.Errorf("reading the image's kernels: %w", err)
	}
	for _, name := range boot {
		if !strings.HasPrefix(name, "vmlinuz-") {
			continue
		}
		if ok, err := exists(BootDir+"/"+name, false); err != nil {
			return t, fmt.Errorf("reading the image's kernels: %w", err)
		} else if ok {
			t.Boot = append(t.Boot, name)
		}
	}
	return t, nil
}
