//go:build !podvm_nonlinux

package chroot

import "syscall"

// procAttr puts a command in a process group of its own and SIGKILLs it
// if this process dies first.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
