package chroot

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Process is a process whose root directory is inside a chroot tree.
type Process struct {
	PID  int
	Comm string
}

func (p Process) String() string { return fmt.Sprintf("%s (pid %d)", p.Comm, p.PID) }

// Processes lists the processes whose root directory is root or lies below
// it: daemons a package started despite policy-rc.d, or a gpg-agent that
// apt-key left behind. They keep the tree's mounts busy.
func Processes(root string) ([]Process, error) {
	root = filepath.Clean(root)
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	var out []Process
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		r, err := os.Readlink(filepath.Join("/proc", e.Name(), "root"))
		if err != nil {
			// Gone meanwhile, or a kernel thread.
			continue
		}
		if r != root && !strings.HasPrefix(r, root+"/") {
			continue
		}
		comm, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		out = append(out, Process{PID: pid, Comm: strings.TrimSpace(string(comm))})
	}
	return out, nil
}

// KillProcesses SIGKILLs every process inside root and waits up to wait
// for them to disappear. It returns the processes it killed.
func KillProcesses(root string, wait time.Duration) ([]Process, error) {
	procs, err := Processes(root)
	if err != nil || len(procs) == 0 {
		return nil, err
	}
	for _, p := range procs {
		if err := syscall.Kill(p.PID, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return procs, fmt.Errorf("kill %s: %w", p, err)
		}
	}
	deadline := time.Now().Add(wait)
	for {
		left := 0
		for _, p := range procs {
			// A zombie has no root any more: it holds nothing in the tree.
			if _, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(p.PID), "root")); err == nil {
				left++
			}
		}
		if left == 0 {
			return procs, nil
		}
		if time.Now().After(deadline) {
			return procs, fmt.Errorf("%d killed processes in %s still exist after %s", left, root, wait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
