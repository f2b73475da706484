package mkosi

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// layerRecord names, at the root of a tree the layer was added to, what
// the layer wrote: its files with their SHA-256 and the directories it
// made. Regenerating replaces exactly these; --remove takes them out.
const layerRecord = ".podvm-gpu-layer"

// TreeInfo is what the layer reads from an existing tree's own
// configuration.
type TreeInfo struct {
	// Root is the tree's directory.
	Root string
	// Distribution, Release and Architecture as the tree sets them
	// (mkosi's names), "" where it does not.
	Distribution, Release, Architecture string
	// Images are the tree's subimages (mkosi.images/NAME), sorted; none
	// for a tree of one image. Bootable are those that set Bootable=,
	// Bootloader= or Format=disk.
	Images, Bootable []string
}

// ReadTree reads the distribution settings of the tree at dir (its
// mkosi.conf and the files of mkosi.conf.d, as mkosi orders them; sections
// under a [Match] are skipped, since what they apply to is not known here)
// and lists its images.
func ReadTree(dir string) (TreeInfo, error) {
	t := TreeInfo{Root: dir}
	fi, err := os.Stat(dir)
	if err != nil {
		return t, fmt.Errorf("--into: %w", err)
	}
	if !fi.IsDir() {
		return t, fmt.Errorf("--into %s is not a directory; give a mkosi tree", dir)
	}
	files, err := confFiles(dir)
	if err != nil {
		return t, err
	}
	if len(files) == 0 {
		return t, fmt.Errorf("--into %s has no mkosi.conf or mkosi.conf.d; give the root of a mkosi tree", dir)
	}
	for _, f := range files {
		kv, err := readConf(f)
		if err != nil {
			return t, err
		}
		for _, e := range kv {
			switch e.key {
			case "Distribution":
				t.Distribution = e.value
			case "Release":
				t.Release = e.value
			case "Architecture":
				t.Architecture = e.value
			}
		}
	}
	entries, err := os.ReadDir(filepath.Join(dir, "mkosi.images"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return t, fmt.Errorf("--into: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		conf := filepath.Join(dir, "mkosi.images", name, "mkosi.conf")
		switch {
		case e.IsDir():
		case strings.HasSuffix(name, ".conf") && e.Type().IsRegular():
			conf, name = filepath.Join(dir, "mkosi.images", name), strings.TrimSuffix(name, ".conf")
		default:
			continue
		}
		t.Images = append(t.Images, name)
		kv, err := readConf(conf)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return t, err
		}
		for _, e := range kv {
			if (e.key == "Bootable" && e.value != "no") || e.key == "Bootloader" && e.value != "none" || e.key == "Format" && e.value == "disk" {
				t.Bootable = append(t.Bootable, name)
				break
			}
		}
	}
	sort.Strings(t.Images)
	return t, nil
}

// confFiles lists the tree's top-level configuration files in mkosi's
// order: mkosi.conf, then mkosi.conf.d's files (and their directories'
// mkosi.conf) by name. The layer's own drop-in is not the tree's.
func confFiles(dir string) ([]string, error) {
	var out []string
	if _, err := os.Stat(filepath.Join(dir, "mkosi.conf")); err == nil {
		out = append(out, filepath.Join(dir, "mkosi.conf"))
	}
	entries, err := os.ReadDir(filepath.Join(dir, "mkosi.conf.d"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("--into: %w", err)
	}
	for _, e := range entries {
		p := filepath.Join(dir, "mkosi.conf.d", e.Name())
		switch {
		case e.Name() == LayerDropIn:
		case e.IsDir():
			if _, err := os.Stat(filepath.Join(p, "mkosi.conf")); err == nil {
				out = append(out, filepath.Join(p, "mkosi.conf"))
			}
		case strings.HasSuffix(e.Name(), ".conf"):
			out = append(out, p)
		}
	}
	return out, nil
}

type confEntry struct{ key, value string }

// readConf returns the settings of a mkosi configuration file outside
// [Match] sections (and after the first [Match], the whole file is
// conditional: mkosi skips it when the match fails).
func readConf(name string) ([]confEntry, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	var out []confEntry
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		switch {
		case l == "" || l[0] == '#' || l[0] == ';':
		case strings.HasPrefix(l, "["):
			if strings.EqualFold(strings.Trim(l, "[] "), "Match") || strings.EqualFold(strings.Trim(l, "[] "), "TriggerMatch") {
				return out, nil
			}
		default:
			k, v, ok := strings.Cut(l, "=")
			if ok {
				out = append(out, confEntry{strings.TrimSpace(k), strings.TrimSpace(v)})
			}
		}
	}
	return out, sc.Err()
}

// LayerFor picks the image that gets the layer: image when given, else
// the one bootable image, else "system". A tree of one image is its own.
func LayerFor(t TreeInfo, image string) (*Layer, error) {
	if len(t.Images) == 0 {
		if image != "" {
			return nil, fmt.Errorf("--image %s: the tree has no mkosi.images; leave --image out for a tree of one image", image)
		}
		return &Layer{}, nil
	}
	if image == "" {
		switch {
		case len(t.Bootable) == 1:
			image = t.Bootable[0]
		case slices.Contains(t.Images, "system"):
			image = "system"
		default:
			return nil, fmt.Errorf("--image: the tree's images are %s and not exactly one is bootable; name the one that gets the GPU layer", strings.Join(t.Images, ", "))
		}
	}
	if !slices.Contains(t.Images, image) {
		return nil, fmt.Errorf("--image %s: no such image in mkosi.images; the tree's images: %s", image, strings.Join(t.Images, ", "))
	}
	if fi, err := os.Stat(filepath.Join(t.Root, "mkosi.images", image)); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("--image %s: mkosi.images/%s.conf is a single file; the GPU layer goes into a drop-in directory of the image: make the image a directory (mkosi.images/%s/mkosi.conf)", image, image, image)
	}
	return &Layer{ImageDir: "mkosi.images/" + image}, nil
}

// layerState is a layer's record: its files' hashes and the directories
// it made, all relative to the tree's root.
type layerState struct {
	files map[string]string
	dirs  []string
}

// readLayerRecord reads the record of a previous layer; an empty state
// when there is none.
func readLayerRecord(root *os.File) (layerState, error) {
	st := layerState{files: map[string]string{}}
	fd, err := unix.Openat(int(root.Fd()), layerRecord, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("%s: %w", layerRecord, err)
	}
	f := os.NewFile(uintptr(fd), layerRecord)
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return st, fmt.Errorf("%s is not a regular file; nothing was changed", layerRecord)
	}
	data, err := io.ReadAll(io.LimitReader(f, 4<<20))
	if err != nil {
		return st, fmt.Errorf("%s: %w", layerRecord, err)
	}
	for i, l := range strings.Split(string(data), "\n") {
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		kind, rest, _ := strings.Cut(l, " ")
		var p string
		switch kind {
		case "file":
			var sum string
			sum, p, _ = strings.Cut(rest, " ")
			st.files[p] = sum
		case "dir":
			p = rest
			st.dirs = append(st.dirs, p)
		default:
			return st, fmt.Errorf("%s line %d: %q is neither a file nor a dir entry; nothing was changed", layerRecord, i+1, l)
		}
		if !fs.ValidPath(p) || p == "." || p == layerRecord {
			return st, fmt.Errorf("%s line %d: %q is not a path inside the tree; nothing was changed", layerRecord, i+1, p)
		}
	}
	return st, nil
}

func (st layerState) encode() []byte {
	var b strings.Builder
	b.WriteString("# The GPU layer packer-plugin-podvm mkosi --into wrote into this tree;\n# `packer-plugin-podvm mkosi --into DIR --remove` takes it out again.\n")
	for _, d := range st.dirs {
		fmt.Fprintf(&b, "dir %s\n", d)
	}
	names := make([]string, 0, len(st.files))
	for p := range st.files {
		names = append(names, p)
	}
	sort.Strings(names)
	for _, p := range names {
		fmt.Fprintf(&b, "file %s %s\n", st.files[p], p)
	}
	return []byte(b.String())
}

// WriteLayer writes the layer's files into the tree at dir. It replaces
// the files of a previous layer (named by its record) and refuses, before
// any change, to write where a file of the tree's own is. It makes the
// directories on the way and records them with the files, so RemoveLayer
// leaves the tree as it was. Nothing is followed through a symbolic link.
func WriteLayer(dir string, files []File) error {
	root, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("mkosi --into: %w", err)
	}
	defer root.Close()
	prev, err := readLayerRecord(root)
	if err != nil {
		return fmt.Errorf("mkosi --into %s: %w", dir, err)
	}
	next := layerState{files: map[string]string{}}
	made := map[string]bool{}
	for _, d := range prev.dirs {
		made[d] = true
	}
	for _, f := range files {
		if !fs.ValidPath(f.Path) || f.Path == layerRecord {
			return fmt.Errorf("mkosi --into: bad layer path %q", f.Path)
		}
		if _, ours := prev.files[f.Path]; !ours {
			if _, err := typeBeneath(root, f.Path); err == nil {
				return fmt.Errorf("mkosi --into %s: %s is the tree's own file, not the layer's; nothing was changed", dir, f.Path)
			} else if !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("mkosi --into %s: %w", dir, err)
			}
		}
		for d := path.Dir(f.Path); d != "."; d = path.Dir(d) {
			typ, err := typeBeneath(root, d)
			switch {
			case errors.Is(err, fs.ErrNotExist):
				made[d] = true
			case err != nil:
				return fmt.Errorf("mkosi --into %s: %w", dir, err)
			case typ != fs.ModeDir:
				return fmt.Errorf("mkosi --into %s: cannot write %s: %s is not a directory; nothing was changed", dir, f.Path, d)
			}
		}
		sum := sha256.Sum256(f.Data)
		next.files[f.Path] = hex.EncodeToString(sum[:])
	}
	// The previous layer's files that this one does not write go.
	for p := range prev.files {
		if _, again := next.files[p]; !again {
			if err := removeBeneath(root, p, 0); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("mkosi --into %s: remove %s of the previous layer: %w", dir, p, err)
			}
		}
	}
	// Recorded first, with the previous layer's files, so that --remove
	// cleans up after a write that fails halfway.
	all := layerState{files: maps.Clone(next.files), dirs: slices.Sorted(maps.Keys(made))}
	maps.Copy(all.files, prev.files)
	if err := writeBeneath(root, File{Path: layerRecord, Mode: 0o644, Data: all.encode()}); err != nil {
		return fmt.Errorf("mkosi --into %s: %w", dir, err)
	}
	for _, f := range files {
		if err := writeBeneath(root, f); err != nil {
			return fmt.Errorf("mkosi --into %s: %s: %w", dir, f.Path, err)
		}
	}
	for d := range made {
		if typ, err := typeBeneath(root, d); err == nil && typ == fs.ModeDir {
			next.dirs = append(next.dirs, d)
		}
	}
	sort.Strings(next.dirs)
	removeEmpty(root, prev.dirs, next.dirs)
	return writeBeneath(root, File{Path: layerRecord, Mode: 0o644, Data: next.encode()})
}

// RemoveLayer takes the layer out of the tree at dir: its files, the
// directories it made (where they are empty now) and its record. It
// returns the files that differed from what the layer wrote: edited since,
// and removed all the same, as they were the layer's.
func RemoveLayer(dir string) (edited []string, err error) {
	root, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("mkosi --into: %w", err)
	}
	defer root.Close()
	st, err := readLayerRecord(root)
	if err != nil {
		return nil, fmt.Errorf("mkosi --into %s: %w", dir, err)
	}
	if len(st.files) == 0 && len(st.dirs) == 0 {
		return nil, fmt.Errorf("mkosi --into %s --remove: the tree has no GPU layer (no %s); nothing was changed", dir, layerRecord)
	}
	names := make([]string, 0, len(st.files))
	for p := range st.files {
		names = append(names, p)
	}
	sort.Strings(names)
	for _, p := range names {
		if sum, err := hashBeneath(root, p); err == nil && sum != st.files[p] {
			edited = append(edited, p)
		}
		if err := removeBeneath(root, p, 0); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return edited, fmt.Errorf("mkosi --into %s --remove: %s: %w", dir, p, err)
		}
	}
	removeEmpty(root, st.dirs, nil)
	if err := removeBeneath(root, layerRecord, 0); err != nil {
		return edited, fmt.Errorf("mkosi --into %s --remove: %w", dir, err)
	}
	return edited, nil
}

// removeEmpty removes the directories of dirs that keep is without,
// deepest first, where they are empty; one that is not holds the tree's
// own files now and stays. Empty directories below them go first: mkosi
// makes the mount points of the layer's BuildSources= there.
func removeEmpty(root *os.File, dirs, keep []string) {
	var below []string
	for _, d := range dirs {
		if !slices.Contains(keep, d) {
			below = append(below, emptyDirsBelow(root, d)...)
		}
	}
	sorted := append(below, dirs...)
	sort.Slice(sorted, func(i, j int) bool { return strings.Count(sorted[i], "/") > strings.Count(sorted[j], "/") })
	for _, d := range sorted {
		if !slices.Contains(keep, d) {
			removeBeneath(root, d, unix.AT_REMOVEDIR) // fails when not empty, which is fine
		}
	}
}

// typeBeneath returns the type of p below root (fs.ModeDir,
// fs.ModeSymlink, 0 for a regular file, fs.ModeIrregular for anything
// else), never following a symbolic link on the way; fs.ErrNotExist when
// p or a directory on the way is missing.
func typeBeneath(root *os.File, p string) (fs.FileMode, error) {
	fd, err := openBeneath(root, path.Dir(p), false)
	if errors.Is(err, unix.ENOENT) {
		return 0, fs.ErrNotExist
	}
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstatat(fd, path.Base(p), &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return 0, fs.ErrNotExist
		}
		return 0, &fs.PathError{Op: "stat", Path: p, Err: err}
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return fs.ModeDir, nil
	case unix.S_IFLNK:
		return fs.ModeSymlink, nil
	case unix.S_IFREG:
		return 0, nil
	}
	return fs.ModeIrregular, nil
}

// writeBeneath writes f below root: into a temporary file in its
// directory, then renamed over the name, so a reader never sees half a
// file; the directories on the way are made, none through a link.
func writeBeneath(root *os.File, f File) error {
	fd, err := openBeneath(root, path.Dir(f.Path), true)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	tmp := "." + path.Base(f.Path) + ".podvm-tmp"
	w, err := unix.Openat(fd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(f.Mode.Perm()))
	if err != nil {
		return err
	}
	out := os.NewFile(uintptr(w), tmp)
	_, err = out.Write(f.Data)
	if err == nil {
		// The umask applied at creation.
		err = out.Chmod(f.Mode.Perm())
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(fd, tmp, fd, path.Base(f.Path))
	}
	if err != nil {
		unix.Unlinkat(fd, tmp, 0)
	}
	return err
}

// hashBeneath returns the SHA-256 of the regular file p below root.
func hashBeneath(root *os.File, p string) (string, error) {
	fd, err := openBeneath(root, path.Dir(p), false)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	r, err := unix.Openat(fd, path.Base(p), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	f := os.NewFile(uintptr(r), p)
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// emptyDirsBelow lists the directories below d (relative to root) that
// hold only directories, never following a link. Deeper ones come first
// after sorting by depth, as removeEmpty does.
func emptyDirsBelow(root *os.File, d string) []string {
	fd, err := openBeneath(root, d, false)
	if err != nil {
		return nil
	}
	f := os.NewFile(uintptr(fd), d)
	entries, err := f.ReadDir(-1)
	f.Close()
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && e.Type()&fs.ModeSymlink == 0 {
			sub := path.Join(d, e.Name())
			out = append(out, emptyDirsBelow(root, sub)...)
			out = append(out, sub)
		}
	}
	return out
}
