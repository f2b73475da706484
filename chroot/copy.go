package chroot

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"time"
)

// keptMode is the part of a file mode a copy keeps: permissions plus the
// setuid, setgid and sticky bits.
func keptMode(m fs.FileMode) fs.FileMode {
	return m & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
}

// copyTree copies the directory src (its contents; the caller applies the
// trailing-slash rule) to the destinations that resolve returns for each
// slash-separated relative path, "." being the top; follow says whether a
// symlink already at that destination is followed (for files and
// directories, as cp would) or replaced (for symlinks). Symlinks are copied
// as links; devices, sockets and pipes are refused.
func copyTree(src string, resolve func(rel string, follow bool) (string, error), exclude []string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if rel != "." && excluded(rel, exclude) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		isLink := info.Mode()&fs.ModeSymlink != 0
		dst, err := resolve(rel, !isLink)
		if err != nil {
			return err
		}
		switch {
		case info.IsDir():
			return makeDir(dst, info)
		case info.Mode().IsRegular():
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			return writeFile(dst, f, keptMode(info.Mode()), info.ModTime())
		case isLink:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return makeSymlink(dst, target)
		default:
			return fmt.Errorf("%s: cannot copy %s", p, info.Mode().Type())
		}
	})
}

func excluded(rel string, patterns []string) bool {
	base := path.Base(rel)
	for _, pat := range patterns {
		if ok, _ := path.Match(pat, rel); ok {
			return true
		}
		if ok, _ := path.Match(pat, base); ok {
			return true
		}
	}
	return false
}

func makeDir(dst string, info fs.FileInfo) error {
	st, err := os.Lstat(dst)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return err
		}
	case err != nil:
		return err
	case !st.IsDir():
		return fmt.Errorf("%s exists and is not a directory", dst)
	}
	return os.Chmod(dst, keptMode(info.Mode()))
}

// writeFile replaces dst with r's content through a temporary file and a
// rename, so a reader never sees half a file and a running executable can
// be replaced (writing it in place fails with ETXTBSY).
func writeFile(dst string, r io.Reader, mode fs.FileMode, mtime time.Time) (err error) {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	if st, err := os.Lstat(dst); err == nil && st.IsDir() {
		return fmt.Errorf("%s exists and is a directory", dst)
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".podvm-upload-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := io.Copy(tmp, r); err != nil {
		return err
	}
	// Chmod after creation: the umask applies to the mode given at open.
	if err := tmp.Chmod(mode); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if !mtime.IsZero() {
		if err := os.Chtimes(tmp.Name(), mtime, mtime); err != nil {
			return err
		}
	}
	return os.Rename(tmp.Name(), dst)
}

func makeSymlink(dst, target string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	st, err := os.Lstat(dst)
	switch {
	case err == nil && st.IsDir():
		return fmt.Errorf("%s exists and is a directory", dst)
	case err == nil:
		if err := os.Remove(dst); err != nil {
			return err
		}
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	return os.Symlink(target, dst)
}
