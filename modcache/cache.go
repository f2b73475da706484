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

// Cache is a module cache directory.
type Cache struct {
	// Dir holds the entries (created when missing).
	Dir string
	// MaxSize bounds the entries' total size in bytes; the least recently
	// used go first. 0: no bound.
	MaxSize int64
	now     func() time.Time
}

// New returns the cache in dir, which Dir names below the module cache
// directory.
func New(dir string, maxSize int64) *Cache {
	return &Cache{Dir: dir, MaxSize: maxSize, now: time.Now}
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

// Get opens the archive cached for inputs, verified against the hash
// recorded when it was stored, at offset 0. It returns nil and no error on
// a miss. A corrupt entry is removed and reported as a miss wrapping
// ErrCorrupt, so the caller builds and stores a good one.
func (c *Cache) Get(inputs string) (*os.File, error) {
	key := Key(inputs)
	// Files are opened relative to the entry's directory, so an eviction
	// or replacement by another build (a rename of the whole directory)
	// cannot pair one entry's record with another's archive.
	d, err := os.Open(filepath.Join(c.Dir, key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
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
		cur, err := os.Stat(filepath.Join(c.Dir, key))
		return err != nil || !os.SameFile(cur, fi)
	}
	corrupt := func(format string, args ...any) error {
		if gone() {
			return nil
		}
		c.evictIf(key, fi)
		return fmt.Errorf("%w %s: "+format, append([]any{ErrCorrupt, key}, args...)...)
	}
	mf, err := openAt(d, entryMeta)
	if err != nil {
		return nil, corrupt("%v", err)
	}
	if gone() {
		// Removed between the directory's open and the record's.
		mf.Close()
		return nil, nil
	}
	data, err := io.ReadAll(mf)
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
	f, err := openAt(d, entryTar)
	if err != nil {
		return nil, corrupt("%v", err)
	}
	if gone() {
		f.Close()
		return nil, nil
	}
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("module cache: reading %s: %w", f.Name(), err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != m.SHA256 || n != m.Size {
		f.Close()
		return nil, corrupt("%s has sha256 %s (%d bytes), recorded %s (%d bytes)", entryTar, got, n, m.SHA256, m.Size)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("module cache: %w", err)
	}
	// The record's time is the entry's last use, for the size bound.
	now := c.clock()
	_ = os.Chtimes(filepath.Join(c.Dir, key, entryMeta), now, now)
	return f, nil
}

// openAt opens name in the directory d.
func openAt(d *os.File, name string) (*os.File, error) {
	fd, err := unix.Openat(int(d.Fd()), name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: filepath.Join(d.Name(), name), Err: err}
	}
	return os.NewFile(uintptr(fd), filepath.Join(d.Name(), name)), nil
}

// evictIf evicts key if it is still the directory fi describes, not a
// good entry another build has put there since.
func (c *Cache) evictIf(key string, fi fs.FileInfo) {
	if cur, err := os.Stat(filepath.Join(c.Dir, key)); err == nil && os.SameFile(cur, fi) {
		_ = c.evict(key, nil)
	}
}

// evict removes a bad entry: renamed away first, so no reader sees it half
// removed.
func (c *Cache) evict(key string, why error) error {
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
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return fmt.Errorf("module cache: %w", err)
	}
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
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return fmt.Errorf("module cache: %w", err)
	}
	f, err := os.CreateTemp(c.Dir, tmpPrefix+"download-")
	if err != nil {
		return fmt.Errorf("module cache: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	return fill(f)
}

// Entry describes one cached build.
type Entry struct {
	Key  string
	Size int64
	Used time.Time // the record's mtime, which Get touches
}

// List returns the entries, most recently used first.
func (c *Cache) List() ([]Entry, error) {
	des, err := os.ReadDir(c.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("module cache: %w", err)
	}
	var out []Entry
	for _, de := range des {
		if !de.IsDir() || strings.HasPrefix(de.Name(), tmpPrefix) {
			continue
		}
		p := filepath.Join(c.Dir, de.Name(), entryMeta)
		fi, err := os.Stat(p)
		if err != nil {
			continue // removed meanwhile, or being written
		}
		e := Entry{Key: de.Name(), Used: fi.ModTime()}
		if data, err := os.ReadFile(p); err == nil {
			var m meta
			if json.Unmarshal(data, &m) == nil {
				e.Size = m.Size
			}
		}
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Used.After(out[j].Used) })
	return out, nil
}

// Prune removes the least recently used entries until the rest fit in
// MaxSize, and temporary directories that killed builds left behind.
func (c *Cache) Prune() error {
	des, err := os.ReadDir(c.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
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

// Root resolves the build_cache_dir setting; see cachedir.Root, which new
// code calls directly.
func Root(dir string) (string, error) { return cachedir.Root(dir) }

// Trusted says why root may not serve as a build cache, or nil; see
// cachedir.Trusted, which new code calls directly.
func Trusted(root string) error { return cachedir.Trusted(root) }
