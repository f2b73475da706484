//go:build !linux || podvm_nonlinux

package aptrepo

import (
	"errors"
	"os"
	"syscall"
)

// replaceDir moves dir to out, moving an existing out aside first; the old
// repository is then at the returned path.
func replaceDir(dir, out string) (string, error) {
	if _, err := os.Lstat(out); errors.Is(err, os.ErrNotExist) {
		return "", os.Rename(dir, out)
	}
	return replaceDirByRenames(dir, out)
}

// linkFallback reports link errors a copy gets around.
func linkFallback(err error) bool {
	var errno syscall.Errno
	return errors.As(err, &errno)
}
