package rootfs

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
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

// lookup returns the cache file for k if it exists.
func (k baseKey) lookup(dir string) (string, bool) {
	p := filepath.Join(dir, k.fileName())
	fi, err := os.Stat(p)
	return p, err == nil && fi.Mode().IsRegular()
}
