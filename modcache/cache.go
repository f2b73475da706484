// Package modcache keeps kernel modules built by DKMS, unsigned, in a host
// cache keyed by everything their build read: the kernel's ABI and
// configuration, the driver package, DKMS and the compiler. A rebuild of an
// image with the same inputs restores them in seconds instead of compiling
// them for minutes; they are signed after restoring, so a per-build key
// stays per build.
//
// Entries are written to a temporary directory and renamed into place, and
// never changed after that, so builds running at the same time share the
// cache without locks: a reader verifies an entry's hash on an open file,
// which a concurrent replacement or eviction cannot change under it.
package modcache

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podvm-gpu/packer-plugin-podvm/cachedir"
)

// layout names the on-disk format; a new one starts an empty directory.
const layout = "v1"

const (
	entryMeta = "entry.json"
	entryTar  = "modules.tar"
	// tmpPrefix marks entries being written or removed.
	tmpPrefix = ".tmp-"
	// staleTmp is how old a temporary directory must be before a prune
	// takes it for the leftover of a killed build.
	staleTmp = time.Hour
)

const (
	// maxMeta bounds an entry's record, a few hundred bytes of inputs: a
	// record is read whole, so a larger one is refused unread.
	maxMeta = 1 << 20
	// maxArchive bounds an archive when the cache has no size bound;
	// DKMS builds of a driver for a few kernels are a few hundred MiB.
	maxArchive = 16 << 30
)

// Cache is a module cache directory.
type Cache struct {
	// Dir holds the entries (created when missing).
	Dir string
	// MaxSize bounds the entries' total size in bytes; the least recently
	// used go first. 0: no bound.
	MaxSize int64
	// root is the build cache directory Dir is below (Dir itself when it
	// is not laid out as Dir(root)): every level from it down to an
	// entry's files is checked before anything is read or written.
	root string
	now  func() time.Time
}

// New returns the cache in dir, which Dir names below the module cache
// directory. When dir is Dir(root), every level from root down is
// checked on use (cachedir.OpenDir); otherwise, as where mkosi mounts the
// host's cache into its sandbox, every level from dir down.
func New(dir string, maxSize int64) *Cache {
	root := dir
	if up := filepath.Dir(filepath.Dir(dir)); Dir(up) == filepath.Clean(dir) {
		root = up
	}
	return &Cache{Dir: dir, MaxSize: maxSize, root: root, now: time.Now}
}

// Dir is where the entries are below the build cache directory: one
// folder per layout, so a new layout starts empty.
func Dir(root string) string { return filepath.Join(root, "modules", layout) }

// Key is the content key of a build's inputs.
func Key(inputs string) string {
	sum := sha256.Sum256([]byte(inputs))
	return hex.EncodeToString(sum[:])
}

// meta is an entry's record, next to its archive.
type meta struct {
	Inputs  string    `json:"inputs"`
	SHA256  string    `json:"sha256"`
	Size    int64     `json:"size"`
	Created time.Time `json:"created"`
}

// ErrCorrupt marks an entry that failed its check; Get has removed it.
var ErrCorrupt = errors.New("corrupt cache entry")

// open opens the entries' directory after checking every level from the
// cache root down to it; with create, missing levels are made. An error
// wraps fs.ErrNotExist when a level is missing, and cachedir.ErrUntrusted
// when one fails the owner, mode or type rules.
func (c *Cache) open(create bool) (*os.File, error) {
	root := c.root
	if root == "" {
		root = c.Dir
	}
	d, err := cachedir.OpenDir(root, c.Dir, create)
	if err != nil {
		return nil, fmt.Errorf("module cache: %w", err)
	}
	return d, nil
}

// Get opens the archive cached for inputs, verified against the hash
// recorded when it was stored, at offset 0. It returns nil and no error on
// a miss. A corrupt entry, or one that fails the trust rules (a link, a
// file that is not regular, too large, or writable by another user), is
// removed and reported as a miss wrapping ErrCorrupt, so the caller
// builds and stores a good one. A cache directory that fails the trust
// rules is an error: nothing is read from it.
func (c *Cache) Get(inputs string) (*os.File, error) {
	key := Key(inputs)
	top, err := c.open(false)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer top.Close()
	// Files are opened relative to the entry's directory, so an eviction
	// or replacement by another build (a rename of the whole directory)
	// cannot pair one entry's record with another's archive.
	d, err := cachedir.OpenDirAt(top, key, false)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if errors.Is(err, cachedir.ErrUntrusted) {
		if fi, lerr := os.Lstat(filepath.Join(c.Dir, key)); lerr == nil {
			c.evictIf(key, fi)
		}
		return nil, fmt.Errorf("%w %s: %v", ErrCorrupt, key, refusal(err))
	}
	if err != nil {
		return nil, fmt.Errorf("module cache: %w", err)
	}
	defer d.Close()
	fi, err := d.Stat()
	if err != nil {
		return nil, fmt.Errorf("module cache: %w", err)
	}
	// gone: another build evicted the entry after it was opened.
	gone := func() bool {
		cur, err := os.Lstat(filepath.Join(c.Dir, key))
		return err != nil || !os.SameFile(cur, fi)
	}
	corrupt := func(format string, args ...any) error {
		if gone() {
			return nil
		}
		c.evictIf(key, fi)
		return fmt.Errorf("%w %s: "+format, append([]any{ErrCorrupt, key}, args...)...)
	}
	// A refused file is named with the reason only: through a link it
	// could be any host file, whose size or hash is nobody's business.
	mf, err := cachedir.OpenFileAt(d, entryMeta, maxMeta)
	if errors.Is(err, fs.ErrNotExist) && gone() {
		return nil, nil // removed between the directory's open and the record's
	}
	if err != nil {
		return nil, corrupt("%v", refusal(err))
	}
	data, err := io.ReadAll(io.LimitReader(mf, maxMeta+1))
	mf.Close()
	if err != nil {
		return nil, fmt.Errorf("module cache: %w", err)
	}
	var m meta
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, corrupt("%s: %v", entryMeta, err)
	}
	if m.Inputs != inputs {
		return nil, corrupt("recorded inputs differ from the build's")
	}
	if !validSHA256(m.SHA256) || m.Size < 0 {
		return nil, corrupt("%s: no valid sha256 and size recorded", entryMeta)
	}
	f, err := cachedir.OpenFileAt(d, entryTar, c.maxArchive())
	if errors.Is(err, fs.ErrNotExist) && gone() {
		return nil, nil
	}
	if err != nil {
		return nil, corrupt("%v", refusal(err))
	}
	if gone() {
		f.Close()
		return nil, nil
	}
	// f is a regular file in a checked directory from here on, so what
	// is said about it is about the cache's own file.
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("module cache: %w", err)
	}
	if st.Size() != m.Size {
		f.Close()
		return nil, corrupt("%s has %d bytes, recorded %d", entryTar, st.Size(), m.Size)
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.LimitReader(f, m.Size)); err != nil {
		f.Close()
		return nil, fmt.Errorf("module cache: reading %s: %w", f.Name(), err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != m.SHA256 {
		f.Close()
		return nil, corrupt("%s has sha256 %s, recorded %s", entryTar, got, m.SHA256)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("module cache: %w", err)
	}
	// The record's time is the entry's last use, for the size bound; set
	// on the name in the checked directory, never through a link.
	ts := unix.NsecToTimespec(c.clock().UnixNano())
	_ = unix.UtimesNanoAt(int(d.Fd()), entryMeta, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW)
	return f, nil
}

// refusal words an open's error: a file that failed the trust rules was
// refused, whatever else it was.
func refusal(err error) error {
	if errors.Is(err, cachedir.ErrUntrusted) {
		return fmt.Errorf("refused: %w", err)
	}
	return err
}

// maxArchive is the largest archive Get reads: one larger than the whole
// cache's bound cannot be an entry the cache kept.
func (c *Cache) maxArchive() int64 {
	if c.MaxSize > 0 {
		return c.MaxSize
	}
	return maxArchive
}

// validSHA256 reports whether s is a SHA256 as hex.EncodeToString writes it.
func validSHA256(s string) bool {
	if len(s) != sha256.Size*2 {
		return false
	}
	for _, r := range s {
		if (r < '0' || r > '9') && (r < 'a' || r > 'f') {
			return false
		}
	}
	return true
}

// evictIf evicts key if it is still what fi (an Lstat or an open
// directory's Stat) describes, not a good entry another build has put
// there since.
func (c *Cache) evictIf(key string, fi fs.FileInfo) {
	if cur, err := os.Lstat(filepath.Join(c.Dir, key)); err == nil && os.SameFile(cur, fi) {
		_ = c.evict(key, nil)
	}
}

// evict removes a bad entry: renamed away first, so no reader sees it half
// removed. An entry that is a link is removed as a link (RemoveAll never
// follows one), and nothing is done in a cache whose levels fail the
// trust rules.
func (c *Cache) evict(key string, why error) error {
	top, err := c.open(false)
	if err != nil {
		return why
	}
	top.Close()
	tmp, err := os.MkdirTemp(c.Dir, tmpPrefix)
	if err != nil {
		os.RemoveAll(filepath.Join(c.Dir, key))
		return why
	}
	// A failed rename: another build evicted it first.
	_ = os.Rename(filepath.Join(c.Dir, key), filepath.Join(tmp, key))
	os.RemoveAll(tmp)
	return why
}

// Put stores the archive read from r for inputs. A concurrent Put of the
// same inputs may win; either entry is good.
func (c *Cache) Put(inputs string, r io.Reader) error {
	top, err := c.open(true)
	if err != nil {
		return err
	}
	top.Close()
	tmp, err := os.MkdirTemp(c.Dir, tmpPrefix)
	if err != nil {
		return fmt.Errorf("module cache: %w", err)
	}
	defer os.RemoveAll(tmp)
	f, err := os.OpenFile(filepath.Join(tmp, entryTar), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("module cache: %w", err)
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), r)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("module cache: storing: %w", err)
	}
	m := meta{Inputs: inputs, SHA256: hex.EncodeToString(h.Sum(nil)), Size: n, Created: c.clock().UTC()}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("module cache: %w", err)
	}
	if err := os.WriteFile(filepath.Join(tmp, entryMeta), append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("module cache: %w", err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("module cache: %w", err)
	}
	key := Key(inputs)
	if err := os.Rename(tmp, filepath.Join(c.Dir, key)); err != nil {
		// Another build's entry is there (or on its way out): theirs is
		// as good as this one.
		if errors.Is(err, fs.ErrExist) || errors.Is(err, unix.ENOTEMPTY) {
			return nil
		}
		return fmt.Errorf("module cache: %w", err)
	}
	// The entry is stored; a failed prune only leaves the cache larger.
	_ = c.Prune()
	return nil
}

// receive hands fill a temporary file in the cache directory, removed
// after it returns.
func (c *Cache) receive(fill func(f *os.File) error) error {
	top, err := c.open(true)
	if err != nil {
		return err
	}
	top.Close()
	f, err := os.CreateTemp(c.Dir, tmpPrefix+"download-")
	if err != nil {
		return fmt.Errorf("module cache: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	return fill(f)
}

// lockSuffix names a key's build lock, a plain file beside the entries,
// which List and Prune pass over (they read directories only).
const lockSuffix = ".lock"

// Lock takes the build lock of inputs, waiting while another build holds
// it; waiting is called once if it must wait. Builds of the same modules
// running at once then compile them once: the one that waited finds the
// other's entry. The lock is advisory (flock), so a build that dies drops
// it, and unlock releases it. A cache that cannot be locked returns an
// error, and the caller builds without waiting.
func (c *Cache) Lock(ctx context.Context, inputs string, waiting func()) (unlock func(), err error) {
	top, err := c.open(true)
	if err != nil {
		return nil, err
	}
	defer top.Close()
	fd, err := unix.Openat(int(top.Fd()), Key(inputs)+lockSuffix, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("module cache: build lock: %w", err)
	}
	f := os.NewFile(uintptr(fd), Key(inputs)+lockSuffix)
	for said := false; ; {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("module cache: build lock: %w", err)
		}
		if !said && waiting != nil {
			waiting()
			said = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// Entry describes one cached build.
type Entry struct {
	Key  string
	Size int64
	Used time.Time // the record's mtime, which Get touches
}

// List returns the entries, most recently used first. Entries that fail
// the trust rules are left out; Get removes them.
func (c *Cache) List() ([]Entry, error) {
	top, err := c.open(false)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer top.Close()
	des, err := top.ReadDir(-1)
	if err != nil {
		return nil, fmt.Errorf("module cache: %w", err)
	}
	var out []Entry
	for _, de := range des {
		if !de.IsDir() || strings.HasPrefix(de.Name(), tmpPrefix) {
			continue
		}
		if e, ok := entryAt(top, de.Name()); ok {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Used.After(out[j].Used) })
	return out, nil
}

// entryAt reads the record of the entry key in top for List; false when
// it is gone, being written, or fails the trust rules.
func entryAt(top *os.File, key string) (Entry, bool) {
	d, err := cachedir.OpenDirAt(top, key, false)
	if err != nil {
		return Entry{}, false
	}
	defer d.Close()
	mf, err := cachedir.OpenFileAt(d, entryMeta, maxMeta)
	if err != nil {
		return Entry{}, false
	}
	defer mf.Close()
	fi, err := mf.Stat()
	if err != nil {
		return Entry{}, false
	}
	e := Entry{Key: key, Used: fi.ModTime()}
	if data, err := io.ReadAll(io.LimitReader(mf, maxMeta)); err == nil {
		var m meta
		if json.Unmarshal(data, &m) == nil && m.Size >= 0 {
			e.Size = m.Size
		}
	}
	return e, true
}

// Prune removes the least recently used entries until the rest fit in
// MaxSize, and temporary directories that killed builds left behind.
func (c *Cache) Prune() error {
	top, err := c.open(false)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	des, err := top.ReadDir(-1)
	top.Close()
	if err != nil {
		return fmt.Errorf("module cache: %w", err)
	}
	for _, de := range des {
		if !strings.HasPrefix(de.Name(), tmpPrefix) {
			continue
		}
		if fi, err := de.Info(); err == nil && c.clock().Sub(fi.ModTime()) > staleTmp {
			os.RemoveAll(filepath.Join(c.Dir, de.Name()))
		}
	}
	if c.MaxSize <= 0 {
		return nil
	}
	entries, err := c.List()
	if err != nil {
		return err
	}
	var total int64
	for _, e := range entries {
		total += e.Size
		if total > c.MaxSize {
			_ = c.evict(e.Key, nil)
		}
	}
	return nil
}

func (c *Cache) clock() time.Time {
	if c.now == nil {
		return time.Now()
	}
	return c.now()
}
