package aptrepo

import (
	"fmt"
	"os"
)

// replaceDirByRenames replaces out with dir in two renames: out moves aside
// (to dir's name with ".old" appended), then dir takes its place. If the
// second rename fails, out is moved back. Between the two renames out does
// not exist; where renameat2 works, replaceDir avoids that.
func replaceDirByRenames(dir, out string) (string, error) {
	old := dir + ".old"
	if err := os.Rename(out, old); err != nil {
		return "", err
	}
	if err := os.Rename(dir, out); err != nil {
		if rerr := os.Rename(old, out); rerr != nil {
			return "", fmt.Errorf("%w (and restoring %s from %s failed: %v)", err, out, old, rerr)
		}
		return "", err
	}
	return old, nil
}
