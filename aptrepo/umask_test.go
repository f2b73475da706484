//go:build unix

package aptrepo

import "syscall"

func setUmask(m int) int { return syscall.Umask(m) }
