//go:build !podvm_nonlinux

package aptrepo

import (
	"errors"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// replaceDir moves dir to out. If out exists, the two are swapped in one
// step (renameat2 RENAME_EXCHANGE), so out is at every moment either the
// old or the new repository; the old one is then at the returned path.
func replaceDir(dir, out string) (string, error) {
	err := unix.Renameat2(unix.AT_FDCWD, dir, unix.AT_FDCWD, out, unix.RENAME_EXCHANGE)
	switch {
	case err == nil:
		return dir, nil
	case errors.Is(err, unix.ENOENT):
		// Nothing to exchange with (or it vanished meanwhile).
		return "", os.Rename(dir, out)
	case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOSYS):
		// A file system or kernel without exchange.
		return replaceDirByRenames(dir, out)
	}
	return "", &os.LinkError{Op: "exchange", Old: dir, New: out, Err: err}
}

// linkFallback reports link errors a copy gets around.
func linkFallback(err error) bool {
	return errors.Is(err, syscall.EXDEV) || errors.Is(err, syscall.EPERM) ||
		errors.Is(err, syscall.EMLINK) || errors.Is(err, syscall.ENOTSUP)
}
