package agenttree

import (
	"io/fs"
	"syscall"
)

// fileIdentity is a file's device and inode, and its count of hard links.
func fileIdentity(fi fs.FileInfo) (fileID, uint64, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, 0, false
	}
	return fileID{dev: uint64(st.Dev), ino: st.Ino}, uint64(st.Nlink), true
}
