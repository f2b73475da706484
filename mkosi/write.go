package mkosi

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/podvm-gpu/packer-plugin-podvm/staging"
	"golang.org/x/sys/unix"
)

// generatedList names, in the tree, the files Write wrote, so a forced
// regeneration removes the previous tree's files and leaves the user's own
// (mkosi.local.conf, caches, outputs) alone.
const generatedList = ".podvm-generated"

// CheckOutput says whether Write could write into dir: a missing or empty
// directory, or with force a non-empty one. The generator calls it before
// anything slow (fetching keys), so a wrong --output is reported as such.
func CheckOutput(dir string, force bool) error {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("mkosi: --output: %w", err)
	case !fi.IsDir():
		return fmt.Errorf("mkosi: --output %s exists and is not a directory; give a directory", dir)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("mkosi: --output: %w", err)
	}
	if len(entries) > 0 && !force {
		return fmt.Errorf("mkosi: --output %s is not empty; use --force to regenerate into it", dir)
	}
	return nil
}

// Write writes files under dir. A dir that exists and is not empty is
// refused unless force is set; then the files of the previous generation
// are removed, so nothing stale stays for mkosi to pick up, and the user's
// own files stay. The tree is written into a staging directory beside dir
// first: a failure while writing leaves dir as it was. A new dir appears
// whole, by one rename; an existing one gets each file by rename, after
// every destination was checked to be free.
func Write(dir string, files []File, force bool) error {
	if err := CheckOutput(dir, force); err != nil {
		return err
	}
	var list strings.Builder
	for _, f := range files {
		if !fs.ValidPath(f.Path) || f.Path == generatedList {
			return fmt.Errorf("mkosi: bad tree path %q", f.Path)
		}
		list.WriteString(f.Path + "\n")
	}
	dir = filepath.Clean(dir)
	parent, prefix := filepath.Dir(dir), "."+filepath.Base(dir)+".podvm-tmp-"
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("mkosi: %w", err)
	}
	staging.RemoveStale(parent, prefix)
	stage, err := os.MkdirTemp(parent, staging.Pattern(prefix))
	if err != nil {
		return fmt.Errorf("mkosi: staging directory: %w", err)
	}
	defer os.RemoveAll(stage) // a no-op once renamed into place
	if err := os.Chmod(stage, 0o755); err != nil {
		return fmt.Errorf("mkosi: %w", err)
	}
	all := append(slices.Clone(files), File{Path: generatedList, Mode: 0o644, Data: []byte(list.String())})
	for _, f := range all {
		name := filepath.Join(stage, filepath.FromSlash(f.Path))
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			return fmt.Errorf("mkosi: %w", err)
		}
		if err := os.WriteFile(name, f.Data, f.Mode); err != nil {
			return fmt.Errorf("mkosi: %w", err)
		}
		// WriteFile applies the umask.
		if err := os.Chmod(name, f.Mode); err != nil {
			return fmt.Errorf("mkosi: %w", err)
		}
	}

	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && len(entries) == 0) {
		if err == nil {
			if err := os.Remove(dir); err != nil {
				return fmt.Errorf("mkosi: %w", err)
			}
		}
		if err := os.Rename(stage, dir); err != nil {
			return fmt.Errorf("mkosi: %w", err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("mkosi: %w", err)
	}
	previous, err := previousFiles(dir)
	if err != nil {
		return err
	}
	if err := checkPrevious(dir, previous); err != nil {
		return err
	}
	for _, f := range all {
		if err := destinationFree(dir, f.Path, previous); err != nil {
			return err
		}
	}
	root, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("mkosi: %w", err)
	}
	defer root.Close()
	// The new files are renamed in from the staging directory beside the
	// tree; from another file system (the tree a mount point) that fails,
	// so it is found out before the previous generation is removed.
	if err := sameFileSystem(root, stage); err != nil {
		return fmt.Errorf("mkosi: %s: %w", dir, err)
	}
	if err := removePrevious(root, previous); err != nil {
		return err
	}
	for _, f := range all {
		if err := moveBeneath(root, filepath.Join(stage, filepath.FromSlash(f.Path)), f.Path); err != nil {
			return fmt.Errorf("mkosi: %s in %s: %w", f.Path, dir, err)
		}
	}
	return nil
}

// previousFiles lists the files the last generation wrote into dir; none
// when dir holds no list (not ours: overwrite what we write, touch nothing
// else). The list is a file in the tree and could have been edited or
// replaced: it is read only as a regular file, and an entry that is not a
// plain path inside the tree fails the whole write, before any change.
func previousFiles(dir string) ([]string, error) {
	f, err := os.OpenFile(filepath.Join(dir, generatedList), os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if errors.Is(err, unix.ELOOP) {
		return nil, fmt.Errorf("mkosi: %s in %s is a symbolic link; refusing to remove what it lists; nothing was changed", generatedList, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("mkosi: %w", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return nil, fmt.Errorf("mkosi: %w", err)
	} else if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("mkosi: %s in %s is not a regular file; nothing was changed", generatedList, dir)
	}
	// A real list names a few hundred short paths.
	const maxList = 4 << 20
	data, err := io.ReadAll(io.LimitReader(f, maxList+1))
	if err != nil {
		return nil, fmt.Errorf("mkosi: %s: %w", generatedList, err)
	}
	if len(data) > maxList {
		return nil, fmt.Errorf("mkosi: %s in %s is larger than %d bytes; nothing was changed", generatedList, dir, maxList)
	}
	var out []string
	for _, p := range strings.Split(string(data), "\n") {
		if p == "" {
			continue
		}
		if !fs.ValidPath(p) || p == "." {
			return nil, fmt.Errorf("mkosi: %s in %s lists %q, which is not a path inside the tree; refusing to remove anything; nothing was changed", generatedList, dir, p)
		}
		out = append(out, p)
	}
	return out, nil
}

// checkPrevious refuses to regenerate when a directory on the way to a
// file of the previous generation is now a symbolic link: removing the
// file through it would remove a file outside the tree.
func checkPrevious(dir string, previous []string) error {
	for _, p := range previous {
		parts := strings.Split(p, "/")
		for i := range len(parts) - 1 {
			sub := path.Join(parts[:i+1]...)
			fi, err := os.Lstat(filepath.Join(dir, filepath.FromSlash(sub)))
			if errors.Is(err, fs.ErrNotExist) {
				break
			}
			if err != nil {
				return fmt.Errorf("mkosi: %w", err)
			}
			if fi.Mode()&fs.ModeSymlink != 0 {
				return fmt.Errorf("mkosi: cannot remove %s of the previous generation: %s in %s is a symbolic link, and removing through it could remove files outside the tree; remove the link yourself; nothing was changed", p, sub, dir)
			}
			if !fi.IsDir() {
				break
			}
		}
	}
	return nil
}

// destinationFree says whether p can be written in dir: every directory
// on the way is a directory or missing, and p itself is no directory,
// unless the previous generation's removal clears the way.
func destinationFree(dir, p string, previous []string) error {
	parts := strings.Split(p, "/")
	for i := range parts {
		sub := path.Join(parts[:i+1]...)
		fi, err := os.Lstat(filepath.Join(dir, filepath.FromSlash(sub)))
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("mkosi: %w", err)
		}
		last := i == len(parts)-1
		switch {
		case !last && !fi.IsDir() && !slices.Contains(previous, sub):
			return fmt.Errorf("mkosi: cannot write %s: %s in %s is not a directory; nothing was changed", p, sub, dir)
		case last && fi.IsDir():
			return fmt.Errorf("mkosi: cannot write %s: it is a directory in %s; nothing was changed", p, dir)
		}
	}
	return nil
}

// removePrevious removes the files of the previous generation, and the
// directories that leaves empty. Every name is resolved from root one
// component at a time, with no symbolic link followed (checkPrevious
// reported any; one that appeared since is refused here), so nothing
// outside the tree can be removed.
func removePrevious(root *os.File, previous []string) error {
	dirs := map[string]bool{}
	for _, p := range previous {
		err := removeBeneath(root, p, 0)
		if errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EPERM) {
			// A directory where the list has a file (EPERM on macOS):
			// removed only when empty.
			err = removeBeneath(root, p, unix.AT_REMOVEDIR)
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, unix.ENOTDIR) {
			return fmt.Errorf("mkosi: remove %s of the previous generation: %w", p, err)
		}
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	// Remove the directories left empty, deepest first.
	for len(dirs) > 0 {
		deepest := ""
		for d := range dirs {
			if strings.Count(d, "/") >= strings.Count(deepest, "/") {
				deepest = d
			}
		}
		delete(dirs, deepest)
		removeBeneath(root, deepest, unix.AT_REMOVEDIR) // fails when not empty, which is fine
	}
	return nil
}

// openBeneath opens the directory rel (slash-separated, "." for root
// itself) below root, one component at a time and never through a
// symbolic link (ELOOP), so the result lies inside root's tree. With
// create, missing directories are made, mode 0755.
func openBeneath(root *os.File, rel string, create bool) (int, error) {
	fd, err := unix.Openat(int(root.Fd()), ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if rel == "." {
		return fd, nil
	}
	for _, c := range strings.Split(rel, "/") {
		next, err := unix.Openat(fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) && create {
			if err = unix.Mkdirat(fd, c, 0o755); err == nil || errors.Is(err, unix.EEXIST) {
				next, err = unix.Openat(fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			}
		}
		unix.Close(fd)
		if errors.Is(err, unix.ELOOP) {
			return -1, fmt.Errorf("%s: %s is a symbolic link: %w", rel, c, err)
		}
		if err != nil {
			return -1, &fs.PathError{Op: "open", Path: rel, Err: err}
		}
		fd = next
	}
	return fd, nil
}

// removeBeneath unlinks p below root with unlinkat's flags; a link at p is
// removed itself, never its target.
func removeBeneath(root *os.File, p string, flags int) error {
	fd, err := openBeneath(root, path.Dir(p), false)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Unlinkat(fd, path.Base(p), flags); err != nil {
		return &fs.PathError{Op: "remove", Path: p, Err: err}
	}
	return nil
}

// moveBeneath renames the file from into the tree at p, making the
// directories on the way, none of them through a symbolic link.
func moveBeneath(root *os.File, from, p string) error {
	fd, err := openBeneath(root, path.Dir(p), true)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Renameat(unix.AT_FDCWD, from, fd, path.Base(p)); err != nil {
		return &os.LinkError{Op: "rename", Old: from, New: p, Err: err}
	}
	return nil
}

// sameFileSystem says why files cannot be renamed from dir into root, or
// nil: they lie on different file systems.
func sameFileSystem(root *os.File, dir string) error {
	var a, b unix.Stat_t
	if err := unix.Fstat(int(root.Fd()), &a); err != nil {
		return err
	}
	if err := unix.Stat(dir, &b); err != nil {
		return err
	}
	if a.Dev != b.Dev {
		return fmt.Errorf("the tree is on another file system than its parent directory (a mount point?), where the new files are staged; nothing was changed: generate into a directory below the mount point instead")
	}
	return nil
}
