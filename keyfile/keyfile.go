// Package keyfile reads the key, certificate and keyring files that a
// user names in a setting: module signing keys and certificates, the
// repository signing key, the repository keyrings.
//
// A setting may name anything on the build host. Read whole, /dev/zero
// never ends and takes all memory, and a FIFO blocks the build forever.
// Read opens without blocking, accepts only a regular file (a symlink is
// followed: users keep keys behind links, and it is the target that must
// be regular), and reads no more than a cap far above any real key.
package keyfile

import (
	"fmt"
	"io"
	"os"
	"syscall"

	"github.com/podvm-gpu/packer-plugin-podvm/inputcheck"
)

// MaxSize bounds a key, certificate or keyring file. An RSA-16384 private
// key in PEM is about 13 KiB and a keyring of a few dozen keys stays well
// below 1 MiB.
const MaxSize = 1 << 20

// Read returns the contents of the regular file at path, at most max
// bytes; setting names the option that gave the path, for the error.
func Read(path, setting string, max int64) ([]byte, error) {
	// Opening a device can act on it (a watchdog arms, a tty becomes the
	// controlling terminal): what is not a regular file is refused before
	// it is opened, and checked again on the open file for a swap between.
	if fi, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("%s: %w", setting, err)
	} else if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %s is a %s, not a regular file", setting, path, inputcheck.FileKind(fi.Mode()))
	}
	// O_NONBLOCK: opening a FIFO for reading otherwise waits for a writer
	// before the mode can be checked. It does not change reads of a
	// regular file.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", setting, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", setting, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %s is a %s, not a regular file", setting, path, inputcheck.FileKind(fi.Mode()))
	}
	if fi.Size() > max {
		return nil, fmt.Errorf("%s: %s is %d bytes, more than the %d a key or certificate file may have", setting, path, fi.Size(), max)
	}
	// The size can change between Stat and the read: the limit holds
	// whatever the file does meanwhile.
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("%s: read %s: %w", setting, path, err)
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%s: %s is more than the %d bytes a key or certificate file may have", setting, path, max)
	}
	return data, nil
}
