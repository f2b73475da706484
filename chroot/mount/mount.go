// Package mount mounts filesystems into a chroot tree and, whatever
// happens, takes them down again: in reverse order, retrying while they
// are busy, and detaching lazily (umount -l) only as a last resort, which
// is reported.
package mount

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Mount describes one mount(2) call.
type Mount struct {
	Source string
	Target string // absolute host path
	FSType string
	Flags  uintptr // Bind, ReadOnly, NoSuid, NoDev, NoExec
	Data   string
	// Private makes the new mount private right after it is made. A bind of
	// a shared mount (the host's /dev under systemd) joins its peer group,
	// so anything mounted on top of the bind (devpts) would also appear on
	// the host.
	Private bool
}

func (m Mount) String() string {
	if m.Flags&Bind != 0 {
		return fmt.Sprintf("%s (bind of %s)", m.Target, m.Source)
	}
	return fmt.Sprintf("%s (%s)", m.Target, m.FSType)
}

// How long an unmount keeps retrying a busy mount before detaching it.
var (
	busyRetries = 20
	busyDelay   = 100 * time.Millisecond
)

// Stack records the mounts it made so they can be undone in reverse order.
// It is safe for concurrent use; Unmount may be called any number of times.
type Stack struct {
	// Warn receives messages about mounts that had to be detached lazily or
	// that someone else left behind. Nil drops them.
	Warn func(msg string)

	mu     sync.Mutex
	mounts []Mount
}

// Mount performs m and records it.
func (s *Stack) Mount(m Mount) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := sysMount(m.Source, m.Target, m.FSType, m.Flags, m.Data); err != nil {
		return fmt.Errorf("mount %s: %w", m, err)
	}
	s.mounts = append(s.mounts, m)
	if m.Private {
		if err := sysMount("", m.Target, "", msPrivate, ""); err != nil {
			return fmt.Errorf("make %s private: %w", m.Target, err)
		}
	}
	// A read-only bind needs a remount: MS_RDONLY is ignored on the first
	// MS_BIND call.
	if m.Flags&Bind != 0 && m.Flags&ReadOnly != 0 {
		flags := msRemount | Bind | m.Flags&^msRec
		if err := sysMount("", m.Target, "", flags, ""); err != nil {
			return fmt.Errorf("remount %s read-only: %w", m.Target, err)
		}
	}
	return nil
}

// Mounted returns the mounts made and not yet undone, oldest first.
func (s *Stack) Mounted() []Mount {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Mount(nil), s.mounts...)
}

// Unmount undoes the recorded mounts, newest first. It goes on after a
// failure so that as much as possible comes down, and returns all errors.
func (s *Stack) Unmount() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for len(s.mounts) > 0 {
		m := s.mounts[len(s.mounts)-1]
		// Something inside the build (a provisioner, a package script) may
		// have mounted on top of ours, which would keep ours busy.
		if extra, err := Sweep(m.Target, s.warn); err != nil {
			errs = append(errs, err)
		} else {
			for _, e := range extra {
				s.warn(fmt.Sprintf("unmounted %s, which was mounted during the build", e))
			}
		}
		if err := unmount(m.Target, s.warn); err != nil {
			errs = append(errs, err)
		}
		s.mounts = s.mounts[:len(s.mounts)-1]
	}
	return errors.Join(errs...)
}

func (s *Stack) warn(msg string) {
	if s.Warn != nil {
		s.Warn(msg)
	}
}

// Sweep unmounts everything mounted strictly below dir, deepest first:
// mounts a provisioner made, or that a crashed earlier build left. dir
// itself is left alone: it may be a mount the user made on purpose. It
// returns the mount points it found.
func Sweep(dir string, warn func(string)) ([]string, error) {
	found, err := Under(dir)
	if err != nil || len(found) == 0 {
		return nil, err
	}
	if warn == nil {
		warn = func(string) {}
	}
	var errs []error
	for _, target := range found {
		if err := unmount(target, warn); err != nil {
			errs = append(errs, err)
		}
	}
	if left, err := Under(dir); err != nil {
		errs = append(errs, err)
	} else if len(left) > 0 {
		errs = append(errs, fmt.Errorf("still mounted under %s: %s", dir, strings.Join(left, ", ")))
	}
	return found, errors.Join(errs...)
}

// Under lists the mount points strictly below dir, in the order they can be
// unmounted: deepest first, and newest first among mounts stacked on one
// point.
func Under(dir string) ([]string, error) {
	all, err := readMountinfo()
	if err != nil {
		return nil, err
	}
	return below(all, dir), nil
}

func below(mountpoints []string, dir string) []string {
	prefix := strings.TrimSuffix(dir, "/") + "/"
	var out []string
	// Reverse first: mountinfo lists older mounts first, and the stable
	// sort keeps that reversed order among equal depths.
	for i := len(mountpoints) - 1; i >= 0; i-- {
		if strings.HasPrefix(mountpoints[i], prefix) {
			out = append(out, mountpoints[i])
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		return strings.Count(out[i], "/") > strings.Count(out[j], "/")
	})
	return out
}

// unmount takes down the mount at target, retrying while it is busy (a
// killed process may still be exiting) and detaching it lazily as a last
// resort. A target that is no longer mounted counts as done.
func unmount(target string, warn func(string)) error {
	var err error
	for i := 0; i <= busyRetries; i++ {
		err = sysUnmount(target, false)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, syscall.EINVAL), errors.Is(err, syscall.ENOENT):
			// Not a mount point (any more): someone else took it down.
			return nil
		case !errors.Is(err, syscall.EBUSY):
			return fmt.Errorf("unmount %s: %w", target, err)
		}
		time.Sleep(busyDelay)
	}
	if lerr := sysUnmount(target, true); lerr != nil {
		return fmt.Errorf("unmount %s: %v; lazy unmount: %w", target, err, lerr)
	}
	warn(fmt.Sprintf("%s was still busy after %s; detached it lazily (umount -l): it disappears once the last process using it exits",
		target, time.Duration(busyRetries)*busyDelay))
	return nil
}
