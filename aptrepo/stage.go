package aptrepo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podvm-gpu/packer-plugin-podvm/staging"
)

// MarkerFile is written into every repository directory built whole
// (Copy and Link placements), so that a later build replaces only a
// directory this tool wrote.
const MarkerFile = ".podvm-repo"

// File modes of the repository: world-readable, since apt's download
// method reads it as the unprivileged _apt user.
const (
	fileMode = 0o644
	dirMode  = 0o755
)

// stage is a temporary directory the repository is built in before it is
// renamed into place.
type stage struct {
	dir string
	out string
	// perFile: dir lies inside an existing out, and its files are renamed
	// into out one by one; otherwise dir itself replaces out.
	perFile bool
	done    bool
}

// newStage creates the staging directory for out. It lies beside out, on
// the same file system, so the final rename cannot fail for crossing one.
func newStage(out string, indexOnly bool) (*stage, error) {
	fi, err := os.Lstat(out)
	switch {
	case err == nil && !fi.IsDir():
		return nil, fmt.Errorf("output %s exists and is not a directory", out)
	case err == nil && indexOnly:
		staging.RemoveStale(out, ".aptrepo-tmp-")
		dir, err := os.MkdirTemp(out, staging.Pattern(".aptrepo-tmp-"))
		if err != nil {
			return nil, fmt.Errorf("create staging directory: %w", err)
		}
		return &stage{dir: dir, out: out, perFile: true}, nil
	case err == nil:
		if err := replaceable(out); err != nil {
			return nil, err
		}
	case !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("output directory: %w", err)
	}
	parent := filepath.Dir(out)
	if err := os.MkdirAll(parent, dirMode); err != nil {
		return nil, fmt.Errorf("create output parent: %w", err)
	}
	staging.RemoveStale(parent, "."+filepath.Base(out)+".tmp-")
	dir, err := os.MkdirTemp(parent, staging.Pattern("."+filepath.Base(out)+".tmp-"))
	if err != nil {
		return nil, fmt.Errorf("create staging directory: %w", err)
	}
	// MkdirTemp makes it 0700; the repository directory must be readable.
	if err := os.Chmod(dir, dirMode); err != nil {
		os.Remove(dir)
		return nil, fmt.Errorf("create staging directory: %w", err)
	}
	return &stage{dir: dir, out: out}, nil
}

// replaceable refuses to replace a directory that is neither empty nor a
// repository this tool wrote: a mistyped --out must not delete someone's
// files, and a Release file alone does not make a directory ours.
func replaceable(out string) error {
	entries, err := os.ReadDir(out)
	if err != nil {
		return fmt.Errorf("output directory: %w", err)
	}
	if len(entries) == 0 {
		return nil
	}
	if fi, err := os.Lstat(filepath.Join(out, MarkerFile)); err == nil && fi.Mode().IsRegular() {
		return nil
	}
	return fmt.Errorf("output %s is a non-empty directory this tool did not write (it has no %s); refusing to replace it: choose another output directory, or empty it yourself", out, MarkerFile)
}

// commit moves the staged repository into place.
func (s *stage) commit(files []string) error {
	if s.perFile {
		for _, name := range files {
			if err := os.Rename(filepath.Join(s.dir, name), filepath.Join(s.out, name)); err != nil {
				return fmt.Errorf("install %s: %w", name, err)
			}
		}
		if err := syncDir(s.out); err != nil {
			return err
		}
		s.done = true
		return os.Remove(s.dir)
	}
	if err := writeFile(filepath.Join(s.dir, MarkerFile), []byte("A repository written by packer-plugin-podvm; a later build may replace this directory.\n")); err != nil {
		return err
	}
	if err := syncDir(s.dir); err != nil {
		return err
	}
	replaced, err := replaceDir(s.dir, s.out)
	if err != nil {
		return fmt.Errorf("install %s: %w", s.out, err)
	}
	s.done = true
	if replaced != "" {
		// The old repository now lives at replaced.
		if err := os.RemoveAll(replaced); err != nil {
			return fmt.Errorf("remove previous repository: %w", err)
		}
	}
	return syncDir(filepath.Dir(s.out))
}

// cleanup removes the staging directory unless it was committed.
func (s *stage) cleanup() {
	if !s.done {
		os.RemoveAll(s.dir)
	}
}

// createFile creates a new file with mode 0644 whatever the umask.
func createFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fileMode)
	if err != nil {
		return nil, err
	}
	if err := f.Chmod(fileMode); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// writeFile writes a new file durably, with mode 0644.
func writeFile(path string, data []byte) error {
	f, err := createFile(path)
	if err != nil {
		return fmt.Errorf("write %s: %w", filepath.Base(path), err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", filepath.Base(path), err)
	}
	return nil
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// lockDir takes an exclusive flock on the directory dir itself, waiting
// for another build that holds it, and returns its release. Locking the
// directory, not a file in it, leaves nothing behind in the repository
// (whose files all go into the image). The lock goes with the process, so
// a killed build never leaves it held.
func lockDir(ctx context.Context, dir string) (func(), error) {
	f, err := os.Open(dir)
	if errors.Is(err, os.ErrNotExist) {
		// A new directory appears whole, by one rename: nothing to
		// interleave with.
		return func() {}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("lock output directory: %w", err)
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			f.Close()
			return nil, fmt.Errorf("lock output directory %s: %w", dir, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	// Closing the descriptor releases the lock.
	return func() { f.Close() }, nil
}
