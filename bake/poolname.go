package bake

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// PoolName is the archive's own file name for a .deb apt saved: apt writes
// an epoch's colon as %3a ("libattr1_1%3a2.5.2-3_amd64.deb"), the Debian
// pool leaves the epoch out ("libattr1_2.5.2-3_amd64.deb"). The pool name
// needs no quoting in Packages or in URLs, and the indexer takes no other.
func PoolName(n string) string {
	name, rest, ok := strings.Cut(n, "_")
	if !ok {
		return n
	}
	if epoch, version, ok := strings.Cut(rest, "%3a"); ok && epoch != "" && strings.Trim(epoch, "0123456789") == "" {
		return name + "_" + version
	}
	return n
}

// ToPoolNames renames the .debs in dir to their pool names.
func ToPoolNames(dir string) error {
	debs, err := filepath.Glob(filepath.Join(dir, "*.deb"))
	if err != nil {
		return err
	}
	for _, p := range debs {
		if safe := PoolName(filepath.Base(p)); safe != filepath.Base(p) {
			if err := os.Rename(p, filepath.Join(dir, safe)); err != nil {
				return fmt.Errorf("pool name of %s: %w", filepath.Base(p), err)
			}
		}
	}
	return nil
}
