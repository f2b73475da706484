package rootfs

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"

	"github.com/podvm-gpu/packer-plugin-podvm/chroot"
	"github.com/podvm-gpu/packer-plugin-podvm/chroot/mount"
)

// session is what a build holds on the host: the directory lock, the
// chroot's mounts and the communicator. Builder.Run releases it however
// the build ends: after success, failure or cancellation, during a panic,
// and with -on-error=abort, which skips every step's cleanup but must not
// leave mounts behind.
type session struct {
	ui     packersdk.Ui
	root   string // the output directory, symlinks resolved, once it exists
	lock   *dirLock
	mounts mount.Stack
	comm   *chroot.Communicator
	// stopCloseOnCancel undoes the context.AfterFunc that closes comm.
	stopCloseOnCancel func() bool
}

func newSession(ui packersdk.Ui) *session {
	s := &session{ui: ui}
	s.mounts.Warn = func(msg string) { ui.Error("Warning: " + msg) }
	return s
}

// killWait bounds the wait for processes killed in the chroot to exit.
const killWait = 5 * time.Second

// takeDown stops everything running in the tree and unmounts everything
// below it, ours first in reverse order, then anything else. It may be
// called any number of times.
func (s *session) takeDown() error {
	var errs []error
	if s.comm != nil {
		if s.stopCloseOnCancel != nil {
			s.stopCloseOnCancel()
		}
		s.comm.Close()
	}
	if s.root != "" {
		// Daemons a package started despite policy-rc.d, or a gpg-agent,
		// keep the mounts busy; they belong to the build, so they go.
		killed, err := chroot.KillProcesses(s.root, killWait)
		if len(killed) > 0 {
			names := make([]string, len(killed))
			for i, p := range killed {
				names[i] = p.String()
			}
			s.ui.Error(fmt.Sprintf("Warning: killed processes still running in the chroot: %s", strings.Join(names, ", ")))
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if n := len(s.mounts.Mounted()); n > 0 {
		if err := s.mounts.Unmount(); err != nil {
			errs = append(errs, err)
		} else {
			s.ui.Say(fmt.Sprintf("Unmounted the chroot's %d filesystems", n))
		}
	}
	if s.root != "" {
		found, err := mount.Sweep(s.root, s.mounts.Warn)
		if len(found) > 0 {
			s.ui.Error(fmt.Sprintf("Warning: unmounted %s, mounted during the build", strings.Join(found, ", ")))
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// release takes the tree down and then drops the lock.
func (s *session) release() error {
	err := s.takeDown()
	if lerr := s.lock.release(); lerr != nil {
		err = errors.Join(err, lerr)
	}
	return err
}

// removeTree deletes dir, but only once nothing is mounted below it:
// removing a tree with the host's /dev bound into it would delete the
// host's device nodes.
func removeTree(dir string) error {
	left, err := mount.Under(dir)
	if err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	if len(left) > 0 {
		return fmt.Errorf("refusing to remove %s: still mounted below it: %s", dir, strings.Join(left, ", "))
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}

// emptyTree removes what is inside dir, with removeTree's guard.
func emptyTree(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("empty %s: %w", dir, err)
	}
	for _, e := range entries {
		if err := removeTree(dir + "/" + e.Name()); err != nil {
			return err
		}
	}
	return nil
}
