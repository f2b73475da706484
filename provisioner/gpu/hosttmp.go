package gpu

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

// hostTemp is a temporary directory on the build host that is removed even
// when this process never gets to remove it. An interrupted packer build
// (SIGINT) returns without waiting for its provisioners and then kills
// every plugin process with SIGKILL, so a deferred os.RemoveAll never runs
// and the .debs copied from the guest would stay behind. A small watcher
// process holds the read end of a pipe whose write end only this process
// has: when this process exits, however it exits, the kernel closes the
// write end, the watcher's read returns and it removes the directory.
type hostTemp struct {
	Dir     string
	hold    *os.File // the pipe's write end; closing it releases the watcher
	watcher *exec.Cmd
}

// newHostTemp makes the directory (os.MkdirTemp's pattern) and starts its
// watcher in a process group of its own, so that the terminal's SIGINT,
// which reaches packer's whole group, does not end it first.
func newHostTemp(pattern string) (*hostTemp, error) {
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("temporary directory watcher: %w", err)
	}
	cmd := exec.Command("/bin/sh", "-c", `read -r _; rm -rf -- "$1"`, "podvm-gpu-tmp-watcher", dir)
	cmd.Stdin = r
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	r.Close() // the watcher has its own copy
	if err != nil {
		w.Close()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("starting the temporary directory watcher: %w", err)
	}
	return &hostTemp{Dir: dir, hold: w, watcher: cmd}, nil
}

// Remove removes the directory and lets the watcher go.
func (h *hostTemp) Remove() error {
	err := os.RemoveAll(h.Dir)
	h.hold.Close()
	h.watcher.Wait()
	return err
}
