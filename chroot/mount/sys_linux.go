//go:build !podvm_nonlinux

package mount

import "syscall"

// The mount(2) flags callers combine in Mount.Flags: Linux's own values.
const (
	Bind     uintptr = syscall.MS_BIND
	ReadOnly uintptr = syscall.MS_RDONLY
	NoSuid   uintptr = syscall.MS_NOSUID
	NoDev    uintptr = syscall.MS_NODEV
	NoExec   uintptr = syscall.MS_NOEXEC

	msPrivate uintptr = syscall.MS_PRIVATE
	msRemount uintptr = syscall.MS_REMOUNT
	msRec     uintptr = syscall.MS_REC
)

func sysMount(source, target, fstype string, flags uintptr, data string) error {
	return syscall.Mount(source, target, fstype, flags, data)
}

// sysUnmount unmounts target; lazy detaches it (umount -l) instead.
func sysUnmount(target string, lazy bool) error {
	flags := 0
	if lazy {
		flags = syscall.MNT_DETACH
	}
	return syscall.Unmount(target, flags)
}
