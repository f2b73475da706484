package rootfs

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podvm-gpu/packer-plugin-podvm/cachedir"
)

// baseKey identifies a bootstrapped base tree. Trees bootstrapped on the
// same UTC day with the same inputs are interchangeable; the day bounds how
// stale a cached tree can be against the archive.
type baseKey struct {
	suite, variant, arch, mirror string
	components, include          []string
	day                          string // YYYY-MM-DD, UTC
}

func newBaseKey(c *Config, now time.Time) baseKey {
	include := slices.Clone(c.Include)
	slices.Sort(include) // debootstrap installs a set: order does not matter
	return baseKey{
		suite:      c.Suite,
		variant:    c.Variant,
		arch:       c.Arch,
		mirror:     c.Mirror,
		components: slices.Clone(c.Components),
		include:    include,
		day:        now.UTC().Format("2006-01-02"),
	}
}

// hash digests everything but the day, so one day's entry can find the
// entries of earlier days to prune.
func (k baseKey) hash() string {
	h := sha256.New()
	for _, f := range []string{k.suite, k.variant, k.arch, k.mirror,
		strings.Join(k.components, ","), strings.Join(k.include, ",")} {
		fmt.Fprintf(h, "%d:%s\n", len(f), f)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

func (k baseKey) variantName() string {
	if k.variant == "" {
		return "default"
	}
	return k.variant
}

// fileName is readable (suite, variant, arch, day) and unique (the hash).
func (k baseKey) fileName() string {
	return fmt.Sprintf("debootstrap-%s-%s-%s-%s-%s.tar.zst", k.suite, k.variantName(), k.arch, k.day, k.hash())
}

// olderEntries lists the cache files of the same key from other days.
func (k baseKey) olderEntries(dir string) []string {
	pattern := fmt.Sprintf("debootstrap-%s-%s-%s-*-%s.tar.zst", k.suite, k.variantName(), k.arch, k.hash())
	matches, _ := filepath.Glob(filepath.Join(dir, pattern))
	self := filepath.Join(dir, k.fileName())
	return slices.DeleteFunc(matches, func(m string) bool { return m == self })
}

// digestSuffix names the record beside each cache entry that holds the
// entry's SHA256, in sha256sum's format. The build that writes an entry
// records its digest; a build that finds one unpacks it only when the
// file still has that digest, so a tarball placed under an entry's
// predictable name, or one damaged since, never becomes an image's root.
const digestSuffix = ".sha256"

// maxDigestRecord bounds the read of a digest record: 64 hex digits, two
// spaces and an entry name fit many times over.
const maxDigestRecord = 4096

// errNoEntry is a cache miss: there is no entry under the key's name.
var errNoEntry = errors.New("no cache entry")

// openEntry opens the entry name in the cache directory d for unpacking.
// The entry and its digest record must pass the cache's owner and mode
// rules (cachedir.OpenFileAt: a regular file, no link, owned by root or
// this user, writable by nobody else), and the entry's SHA256 must match
// the record. The check and the unpack read the same open file, so a file
// swapped in after the check is never the one unpacked. The file is
// returned at its start. A missing entry is errNoEntry; any other error
// says why the entry is refused.
func openEntry(d *os.File, name string) (*os.File, error) {
	f, err := cachedir.OpenFileAt(d, name, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errNoEntry
	}
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
		}
	}()
	want, err := readDigest(d, name)
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return nil, fmt.Errorf("read %s: %w", f.Name(), err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return nil, fmt.Errorf("SHA256 mismatch: the entry's is %s, the one recorded when it was written is %s", got, want)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("read %s: %w", f.Name(), err)
	}
	ok = true
	return f, nil
}

// readDigest reads the SHA256 recorded for the entry name in d.
func readDigest(d *os.File, name string) (string, error) {
	rf, err := cachedir.OpenFileAt(d, name+digestSuffix, maxDigestRecord)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("it has no recorded SHA256 (no %s); the builder records one for every entry it writes", name+digestSuffix)
	}
	if err != nil {
		return "", err
	}
	defer rf.Close()
	b, err := io.ReadAll(io.LimitReader(rf, maxDigestRecord))
	if err != nil {
		return "", fmt.Errorf("read %s: %w", rf.Name(), err)
	}
	sum, file, _ := strings.Cut(strings.TrimSuffix(string(b), "\n"), "  ")
	if !sha256RE.MatchString(sum) || file != name {
		return "", fmt.Errorf("%s is not a SHA256 record of %s", rf.Name(), name)
	}
	return sum, nil
}

var sha256RE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// digestRecord is the content of an entry's digest record.
func digestRecord(sum, name string) []byte {
	return []byte(sum + "  " + name + "\n")
}

// dropEntry removes the entry name and its digest record from d; unlinkat
// removes a link itself, never what it points to.
func dropEntry(d *os.File, name string) {
	for _, n := range []string{name, name + digestSuffix} {
		_ = unix.Unlinkat(int(d.Fd()), n, 0)
	}
}
