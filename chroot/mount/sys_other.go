//go:build !linux || podvm_nonlinux

package mount

import (
	"errors"
	"fmt"
	"runtime"
)

// The mount flags, as distinct bits so that Mount values and their String
// mean the same everywhere. Off Linux they never reach a kernel: the
// plugin's other parts (the provisioner, the repository signer) build for
// macOS too, and this package only has to compile there.
const (
	Bind uintptr = 1 << iota
	ReadOnly
	NoSuid
	NoDev
	NoExec

	msPrivate
	msRemount
	msRec
)

// errUnsupported is what every mount and unmount returns off Linux.
var errUnsupported = fmt.Errorf("bind and pseudo-filesystem mounts need Linux (this is %s): %w",
	runtime.GOOS, errors.ErrUnsupported)

func sysMount(_, _, _ string, _ uintptr, _ string) error { return errUnsupported }

func sysUnmount(_ string, _ bool) error { return errUnsupported }
