package chroot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"
)

// DefaultEnv is the environment of commands run in the root. The host's
// environment is not passed on: its PATH, HOME and locale describe the
// build machine, not the image.
var DefaultEnv = []string{
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"HOME=/root",
	"LANG=C.UTF-8",
	"DEBIAN_FRONTEND=noninteractive",
}

// pipeGrace is how long a command's output is still read after the command
// exits or is killed. A background process that inherited the pipes would
// otherwise keep the command "running" until it exits itself.
const pipeGrace = 2 * time.Second

// ErrClosed is returned by Start after Close.
var ErrClosed = errors.New("chroot communicator is closed")

// Communicator runs commands inside a root directory with chroot(8) and
// copies files across its boundary. It is safe for concurrent use.
type Communicator struct {
	root string
	env  []string

	mu      sync.Mutex
	closed  bool
	nextID  int
	running map[int]context.CancelFunc
	wg      sync.WaitGroup
}

var _ packersdk.Communicator = (*Communicator)(nil)

// New returns a communicator for the directory root, which must exist.
// Commands get env, or DefaultEnv when env is nil.
func New(root string, env []string) (*Communicator, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("chroot root %q: %w", root, err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("chroot root: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("chroot root %s is not a directory", abs)
	}
	if env == nil {
		env = DefaultEnv
	}
	return &Communicator{root: abs, env: env, running: map[int]context.CancelFunc{}}, nil
}

// Root returns the host path of the root directory.
func (c *Communicator) Root() string { return c.root }

// Start runs rc.Command as `chroot ROOT /bin/sh -c COMMAND`. The command
// reaches the root's shell as a single argument, so nothing on the host
// expands it. When ctx is done or Close is called, the command's whole
// process group is killed.
func (c *Communicator) Start(ctx context.Context, rc *packersdk.RemoteCmd) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	ctx, cancel := context.WithCancel(ctx)
	cmd := exec.CommandContext(ctx, "chroot", c.root, "/bin/sh", "-c", rc.Command)
	cmd.Dir = "/"
	cmd.Env = c.env
	cmd.Stdin = rc.Stdin
	cmd.Stdout = orDiscard(rc.Stdout)
	cmd.Stderr = orDiscard(rc.Stderr)
	// A process group of its own lets cancellation reach the command's
	// children too; on Linux, Pdeathsig stops the command if this process
	// dies (procattr_linux.go).
	cmd.SysProcAttr = procAttr()
	cmd.Cancel = func() error {
		// SIGKILL at once: the build is being abandoned, and a grace period
		// would only delay unmounting the tree.
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	cmd.WaitDelay = pipeGrace
	if err := cmd.Start(); err != nil {
		cancel()
		return fmt.Errorf("start %q in %s: %w", rc.Command, c.root, err)
	}
	id := c.nextID
	c.nextID++
	c.running[id] = cancel
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		err := cmd.Wait()
		c.mu.Lock()
		delete(c.running, id)
		c.mu.Unlock()
		cancel()
		rc.SetExited(exitStatus(cmd.ProcessState, err))
	}()
	return nil
}

// Close kills every command still running, waits for them to end and
// makes later Starts fail. Packer's RPC layer hands the communicator a
// context that is never cancelled, so the builder calls Close when its
// own context is done; nothing of ours then holds the tree's mounts.
func (c *Communicator) Close() error {
	c.mu.Lock()
	c.closed = true
	for _, cancel := range c.running {
		cancel()
	}
	c.mu.Unlock()
	c.wg.Wait()
	return nil
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// exitStatus follows the shell's convention: 128+N for a command killed by
// signal N.
func exitStatus(ps *os.ProcessState, err error) int {
	if ps == nil {
		if err != nil {
			return 1
		}
		return 0
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// Upload writes r to dst inside the root, creating parent directories.
// The file gets fi's permission bits, or 0644 without fi. If dst is an
// existing directory the file goes into it under fi's name.
func (c *Communicator) Upload(dst string, r io.Reader, fi *os.FileInfo) error {
	host, err := ResolveIn(c.root, dst)
	if err != nil {
		return fmt.Errorf("upload %s: %w", dst, err)
	}
	mode := fs.FileMode(0o644)
	var mtime time.Time
	if fi != nil && *fi != nil {
		mode = keptMode((*fi).Mode())
		mtime = (*fi).ModTime()
	}
	if st, err := os.Stat(host); err == nil && st.IsDir() {
		if fi == nil || *fi == nil {
			return fmt.Errorf("upload %s: destination is a directory", dst)
		}
		if host, err = ResolveIn(c.root, path.Join(dst, (*fi).Name())); err != nil {
			return fmt.Errorf("upload %s: %w", dst, err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(host), 0o755); err != nil {
		return fmt.Errorf("upload %s: %w", dst, err)
	}
	if err := writeFile(host, r, mode, mtime); err != nil {
		return fmt.Errorf("upload %s: %w", dst, err)
	}
	return nil
}

// UploadDir copies the host directory src to dst inside the root, keeping
// modes and symlinks. As with rsync, src without a trailing slash creates
// dst/<base of src>; with one, src's contents go into dst. exclude holds
// path.Match patterns tested against each entry's relative path and name.
func (c *Communicator) UploadDir(dst, src string, exclude []string) error {
	if !strings.HasSuffix(src, "/") {
		dst = path.Join(dst, filepath.Base(src))
	}
	resolve := func(rel string, follow bool) (string, error) {
		p := path.Join(dst, rel)
		if follow {
			return ResolveIn(c.root, p)
		}
		return resolveParentIn(c.root, p)
	}
	if err := copyTree(src, resolve, exclude); err != nil {
		return fmt.Errorf("upload directory %s to %s: %w", src, dst, err)
	}
	return nil
}

// Download copies the file src inside the root to w.
func (c *Communicator) Download(src string, w io.Writer) error {
	host, err := ResolveIn(c.root, src)
	if err != nil {
		return fmt.Errorf("download %s: %w", src, err)
	}
	f, err := os.Open(host)
	if err != nil {
		return fmt.Errorf("download %s: %w", src, err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil {
		return fmt.Errorf("download %s: %w", src, err)
	} else if !st.Mode().IsRegular() {
		return fmt.Errorf("download %s: not a regular file", src)
	}
	if _, err := io.Copy(w, f); err != nil {
		return fmt.Errorf("download %s: %w", src, err)
	}
	return nil
}

// DownloadDir copies the directory src inside the root to the host
// directory dst, with UploadDir's trailing-slash rule and exclude patterns.
// Symlinks are copied as links, never followed, so a link in the image
// cannot make the copy read host files.
func (c *Communicator) DownloadDir(src, dst string, exclude []string) error {
	host, err := ResolveIn(c.root, src)
	if err != nil {
		return fmt.Errorf("download directory %s: %w", src, err)
	}
	if !strings.HasSuffix(src, "/") {
		dst = filepath.Join(dst, path.Base(src))
	}
	resolve := func(rel string, _ bool) (string, error) {
		return filepath.Join(dst, filepath.FromSlash(rel)), nil
	}
	if err := copyTree(host+"/", resolve, exclude); err != nil {
		return fmt.Errorf("download directory %s to %s: %w", src, dst, err)
	}
	return nil
}
