// Package staging names the temporary directories a tree is built in
// before it is renamed into place, after the process that owns them, so a
// later run can remove the ones a killed run left (SIGKILL skips every
// cleanup) and leave a live run's alone.
package staging

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Pattern is a pattern for os.MkdirTemp: prefix, this process's ID and a
// dash, to which MkdirTemp adds its random part.
func Pattern(prefix string) string {
	return prefix + strconv.Itoa(os.Getpid()) + "-"
}

// RemoveStale removes the directories named prefix<pid>-* in dir whose
// process is gone, and those named prefix* without a process ID, which
// earlier versions left. Errors are ignored: a leftover that cannot be
// removed now is tried again next time.
func RemoveStale(dir, prefix string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok || !e.IsDir() {
			continue
		}
		if pidText, _, ok := strings.Cut(rest, "-"); ok {
			if pid, err := strconv.Atoi(pidText); err == nil && alive(pid) {
				continue
			}
		}
		os.RemoveAll(filepath.Join(dir, e.Name()))
	}
}

func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
