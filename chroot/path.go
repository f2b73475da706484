package chroot

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// maxSymlinks bounds symlink expansion, as the kernel does (ELOOP), so a
// loop inside the tree cannot hang a resolution.
const maxSymlinks = 40

// ResolveIn maps path, as a process chrooted into root would see it, to a
// host path that lies inside root. Symlinks and ".." are interpreted
// relative to root, so an absolute link such as /etc/localtime ->
// /usr/share/zoneinfo/UTC stays in the tree and a link to "../../../etc"
// is clamped at root, like openat2's RESOLVE_IN_ROOT. Components that do
// not exist yet are appended literally, so the result can be created.
//
// The result has no symlink in it at the time of the call. Nothing may
// change the tree concurrently for that to stay true: callers use it while
// no command of theirs runs inside the root.
func ResolveIn(root, path string) (string, error) {
	if !filepath.IsAbs(root) {
		return "", fmt.Errorf("resolve %q: root %q is not absolute", path, root)
	}
	root = filepath.Clean(root)
	// Components still to walk, in order; resolved holds the walked,
	// symlink-free part relative to root.
	todo := splitPath(path)
	var resolved []string
	links := 0
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case ".":
			continue
		case "..":
			if len(resolved) > 0 {
				resolved = resolved[:len(resolved)-1]
			}
			continue
		}
		host := filepath.Join(root, filepath.Join(resolved...), c)
		fi, err := os.Lstat(host)
		if errors.Is(err, fs.ErrNotExist) {
			// Nothing below a missing component can be a symlink, but ".."
			// after it must still be honoured, so keep walking.
			resolved = append(resolved, c)
			continue
		}
		if err != nil {
			return "", fmt.Errorf("resolve %q in %s: %w", path, root, err)
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			resolved = append(resolved, c)
			continue
		}
		links++
		if links > maxSymlinks {
			return "", fmt.Errorf("resolve %q in %s: too many levels of symbolic links", path, root)
		}
		target, err := os.Readlink(host)
		if err != nil {
			return "", fmt.Errorf("resolve %q in %s: %w", path, root, err)
		}
		if strings.HasPrefix(target, "/") {
			resolved = resolved[:0]
		}
		todo = append(splitPath(target), todo...)
	}
	return filepath.Join(root, filepath.Join(resolved...)), nil
}

func splitPath(p string) []string {
	var out []string
	for _, c := range strings.Split(p, "/") {
		if c != "" {
			out = append(out, c)
		}
	}
	return out
}

// resolveParentIn is ResolveIn for all but the last component of p, which
// is kept as it is: the caller replaces whatever is there (a symlink, say)
// instead of following it.
func resolveParentIn(root, p string) (string, error) {
	p = path.Clean("/" + p)
	if p == "/" {
		return ResolveIn(root, p)
	}
	dir, err := ResolveIn(root, path.Dir(p))
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, path.Base(p)), nil
}
