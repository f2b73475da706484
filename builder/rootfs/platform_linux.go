//go:build !podvm_nonlinux

package rootfs

import "syscall"

// checkPlatform is where a non-Linux build refuses the builder
// (platform_other.go); on Linux there is nothing to refuse.
func checkPlatform() error { return nil }

// hostProcAttr puts a host command in a process group of its own and
// SIGTERMs it if the plugin dies first, so debootstrap's exit trap still
// unmounts what it mounted.
func hostProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
