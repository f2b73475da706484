package rootfs

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

// dirLock is an exclusive flock(2) on a file beside the output directory.
// It sits beside, not inside, so it never ends up in the image and -force
// can replace the directory while holding it. The kernel drops the lock
// when the process dies, so a crashed build never blocks the next one.
type dirLock struct {
	path string
	f    *os.File
}

// lockPath is the lock file for dir: ".NAME.lock" in dir's parent.
func lockPath(dir string) string {
	return filepath.Join(filepath.Dir(dir), "."+filepath.Base(dir)+".lock")
}

// lockDir takes the lock for dir without waiting: a second build on the
// same directory fails at once instead of queueing behind the first.
func lockDir(dir string) (*dirLock, error) {
	p := lockPath(dir)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	// A build killed with SIGKILL leaves its lock to a child it was
	// starting, which holds it only until it execs: a lock whose owner is
	// gone is waited for briefly.
	orphanWait := time.Now().Add(orphanGrace)
	for {
		f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, fmt.Errorf("lock %s: %w", dir, err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				owner, _ := os.ReadFile(p)
				if !alive(string(owner)) && time.Now().Before(orphanWait) {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				return nil, fmt.Errorf("output_directory %s is in use by another build (lock %s held by pid %s); wait for it to finish or choose another output_directory",
					dir, p, string(owner))
			}
			return nil, fmt.Errorf("lock %s: %w", dir, err)
		}
		// The holder we waited on may have removed the file as it released
		// it; then our lock is on an unlinked file and worthless.
		if same, err := sameFile(f, p); err != nil {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", dir, err)
		} else if !same {
			f.Close()
			continue
		}
		if err := f.Truncate(0); err == nil {
			fmt.Fprintf(f, "%d", os.Getpid())
		}
		return &dirLock{path: p, f: f}, nil
	}
}

// orphanGrace is how long a lock whose owner is gone is waited for.
const orphanGrace = 2 * time.Second

// alive reports whether the process with the pid in owner runs.
func alive(owner string) bool {
	pid, err := strconv.Atoi(strings.TrimSpace(owner))
	if err != nil || pid <= 0 {
		return true // unknown: treat as a live build
	}
	return syscall.Kill(pid, 0) != syscall.ESRCH
}

func sameFile(f *os.File, p string) (bool, error) {
	a, err := f.Stat()
	if err != nil {
		return false, err
	}
	b, err := os.Stat(p)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return os.SameFile(a, b), nil
}

// release removes the lock file and drops the lock; it may be called more
// than once. Removing before unlocking means anyone who opened the file
// meanwhile sees it is stale (sameFile) and starts over.
func (l *dirLock) release() error {
	if l == nil || l.f == nil {
		return nil
	}
	rmErr := os.Remove(l.path)
	if errors.Is(rmErr, os.ErrNotExist) {
		rmErr = nil
	}
	closeErr := l.f.Close()
	l.f = nil
	if err := errors.Join(rmErr, closeErr); err != nil {
		return fmt.Errorf("release lock %s: %w", l.path, err)
	}
	return nil
}
