//go:build !linux || podvm_nonlinux

package chroot

import "syscall"

// procAttr puts a command in a process group of its own. Only Linux has a
// parent-death signal; elsewhere a command outlives a crashed plugin.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
