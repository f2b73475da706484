// Package cachedir resolves the build cache directory and decides whether
// what it holds may be trusted. Whoever can write a level of a cache tree
// chooses what later builds restore into an image, so every directory from
// the cache root down to the file read must be a real directory (not a
// symbolic link), owned by root or by the user running the build, and
// writable by nobody else; a file read from it must in addition be a
// regular file of bounded size.
//
// The module cache, the deb cache and the builder's base-tree cache all use
// these checks. They open each level relative to the one above it with
// O_NOFOLLOW and check the opened descriptor, so a path swapped for a link
// between check and use is refused rather than followed.
package cachedir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrUntrusted marks a cache path that failed the owner, mode or type
// rules, as opposed to an I/O error.
var ErrUntrusted = errors.New("untrusted cache path")

// Root resolves the build_cache_dir setting: "" is $PODVM_CACHE, else the
// user's podvm cache directory. The result is absolute and not checked;
// see Trusted.
func Root(setting string) (string, error) {
	dir := setting
	if dir == "" {
		dir = os.Getenv("PODVM_CACHE")
	}
	if dir != "" {
		return filepath.Abs(dir)
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("build cache: build_cache_dir is not set and %w", err)
	}
	return filepath.Join(base, "podvm"), nil
}

// Trusted says why root may not serve as a build cache root, or nil. A
// missing root is fine: the build creates it, as this user, with mode
// 0755. Levels below root are checked as each is opened (OpenDir,
// OpenDirAt, OpenFileAt).
func Trusted(root string) error {
	fi, err := os.Lstat(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("build cache %s: %w", root, err)
	}
	if err := Check(fi, true); err != nil {
		return fmt.Errorf("build cache %s: %w", root, err)
	}
	return nil
}

// Check applies the rules of one level to fi, the result of an Lstat or a
// Stat of an opened descriptor: a directory when dir is set, else a
// regular file; never a symbolic link; owned by root or by this process's
// effective user; not writable by group or others. The error wraps
// ErrUntrusted and does not name the path.
func Check(fi fs.FileInfo, dir bool) error {
	mode := fi.Mode()
	switch {
	case mode&fs.ModeSymlink != 0:
		return fmt.Errorf("%w: a symbolic link; every level of a cache must be a real directory or file", ErrUntrusted)
	case dir && !mode.IsDir():
		return fmt.Errorf("%w: not a directory (%s)", ErrUntrusted, typeName(mode))
	case !dir && !mode.IsRegular():
		return fmt.Errorf("%w: not a regular file (%s)", ErrUntrusted, typeName(mode))
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%w: no owner information", ErrUntrusted)
	}
	if uid := int(st.Uid); uid != 0 && uid != os.Geteuid() {
		return fmt.Errorf("%w: owned by uid %d, not by root or this build's user (uid %d); whoever owns it chooses what later builds restore", ErrUntrusted, uid, os.Geteuid())
	}
	if mode.Perm()&0o022 != 0 {
		return fmt.Errorf("%w: writable by group or others (mode %04o); allowed: only its owner may write", ErrUntrusted, mode.Perm())
	}
	return nil
}

func typeName(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m.IsDir():
		return "a directory"
	case m.IsRegular():
		return "a regular file"
	}
	return "type " + m.Type().String()
}

// OpenDir opens dir, which is root or a directory below it, checking every
// level from root down with Check, each opened relative to the one above
// without following a link. With create, missing levels are made with
// mode 0755 first. The caller closes the directory and opens what is below
// it with OpenDirAt and OpenFileAt.
func OpenDir(root, dir string, create bool) (*os.File, error) {
	rel, err := filepath.Rel(root, dir)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") || filepath.IsAbs(rel) {
		return nil, fmt.Errorf("cache directory %s is not below the cache root %s", dir, root)
	}
	if create {
		// The root and what leads to it (such as a missing ~/.cache) are
		// the user's choice, made by path; the levels below are made by
		// OpenDirAt, and all of them are checked as they are opened.
		if err := os.MkdirAll(root, 0o755); err != nil {
			return nil, fmt.Errorf("build cache: %w", err)
		}
	}
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, openError(root, true, err)
	}
	d := os.NewFile(uintptr(fd), root)
	if err := checkOpen(d, true); err != nil {
		d.Close()
		return nil, err
	}
	if rel == "." {
		return d, nil
	}
	for _, name := range strings.Split(filepath.ToSlash(rel), "/") {
		next, err := OpenDirAt(d, name, create)
		d.Close()
		if err != nil {
			return nil, err
		}
		d = next
	}
	return d, nil
}

// OpenDirAt opens the directory name (one path element) in d, checked with
// Check, without following a link. With create, it is made with mode 0755
// when missing.
func OpenDirAt(d *os.File, name string, create bool) (*os.File, error) {
	if err := element(name); err != nil {
		return nil, err
	}
	p := filepath.Join(d.Name(), name)
	if create {
		if err := unix.Mkdirat(int(d.Fd()), name, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			return nil, &fs.PathError{Op: "mkdir", Path: p, Err: err}
		}
	}
	fd, err := unix.Openat(int(d.Fd()), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, openError(p, true, err)
	}
	sub := os.NewFile(uintptr(fd), p)
	if err := checkOpen(sub, true); err != nil {
		sub.Close()
		return nil, err
	}
	return sub, nil
}

// OpenFileAt opens the file name (one path element) in d for reading: no
// link is followed and a FIFO or device is never waited on; only a
// regular file that passes Check and holds at most max bytes is returned
// (max <= 0: no cap). A refusal wraps ErrUntrusted and names the path and
// the reason, never the size or content of what was refused.
func OpenFileAt(d *os.File, name string, max int64) (*os.File, error) {
	if err := element(name); err != nil {
		return nil, err
	}
	p := filepath.Join(d.Name(), name)
	// O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
	// writer. It is cleared again once the file proves regular.
	fd, err := unix.Openat(int(d.Fd()), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, openError(p, false, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "fstat", Path: p, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, fmt.Errorf("%s: %w: not a regular file", p, ErrUntrusted)
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "fcntl", Path: p, Err: err}
	}
	f := os.NewFile(uintptr(fd), p)
	if err := checkOpen(f, false); err != nil {
		f.Close()
		return nil, err
	}
	if max > 0 && st.Size > max {
		f.Close()
		return nil, fmt.Errorf("%s: %w: larger than the %d bytes allowed", p, ErrUntrusted, max)
	}
	return f, nil
}

// checkOpen applies Check to the opened f.
func checkOpen(f *os.File, dir bool) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if err := Check(fi, dir); err != nil {
		return fmt.Errorf("%s: %w", f.Name(), err)
	}
	return nil
}

// openError turns a failed no-follow open of p into an error that says
// why: O_NOFOLLOW reports a link as ELOOP, and O_DIRECTORY a non-directory
// as ENOTDIR, so the entry is looked at again to name what it is. The open
// made the decision; the second look only words the message.
func openError(p string, dir bool, err error) error {
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		if fi, lerr := os.Lstat(p); lerr == nil {
			if cerr := Check(fi, dir); cerr != nil {
				return fmt.Errorf("%s: %w", p, cerr)
			}
		}
		return fmt.Errorf("%s: %w: %v", p, ErrUntrusted, err)
	}
	return &fs.PathError{Op: "open", Path: p, Err: err}
}

// element refuses a name that is not one path element: one from an image
// or a record could otherwise climb out of the directory.
func element(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return fmt.Errorf("%w: %q is not a file name", ErrUntrusted, name)
	}
	return nil
}
