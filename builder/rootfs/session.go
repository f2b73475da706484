package rootfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
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
			s.ui.Error(fmt.Sprintf("Warning: killed processes still running in the chroot: %s", processList(killed)))
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
	// A second guard that needs no mount table: a directory on another
	// file system (a bind of the host's /dev that mountinfo does not show
	// in this namespace, say) stops the removal before anything is gone.
	if other, err := otherFileSystem(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	} else if other != "" {
		return fmt.Errorf("refusing to remove %s: %s lies on another file system (a mount?)", dir, other)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}

// otherFileSystem returns the first directory below dir that lies on
// another device than dir itself, or "".
func otherFileSystem(dir string) (string, error) {
	var root syscall.Stat_t
	if err := syscall.Lstat(dir, &root); err != nil {
		if errors.Is(err, syscall.ENOENT) {
			return "", nil
		}
		return "", err
	}
	found := ""
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return nil
		}
		if st.Dev != root.Dev {
			found = p
			return filepath.SkipAll
		}
		return nil
	})
	return found, err
}

// processList names processes for a message.
func processList(ps []chroot.Process) string {
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.String()
	}
	return strings.Join(names, ", ")
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
