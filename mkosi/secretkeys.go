package mkosi

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	"github.com/podvm-gpu/packer-plugin-podvm/keyscan"
)

// CheckSecretKeys scans every file below the directories dirs of the image
// at root for private key material of any kind (see keyscan), passing over
// files a package installed and nobody changed. It returns the findings as
// "<image path>: <kind>". A directory the image lacks is skipped.
func CheckSecretKeys(root string, dirs []string) ([]string, error) {
	pristine, err := keyscan.DpkgPristine(root)
	if err != nil {
		return nil, fmt.Errorf("check-keys: %w", err)
	}
	var found []string
	seen := map[string]bool{}
	for _, d := range dirs {
		if !path.IsAbs(d) {
			return nil, fmt.Errorf("check-keys: %q is not an absolute path in the image", d)
		}
		top := filepath.Join(root, filepath.FromSlash(d))
		if _, err := os.Stat(top); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		// API file systems are not part of the image; /run and /tmp are
		// directories of the tree, shipped with it, so they are scanned.
		skip := []string{"proc", "sys", "dev"}
		if d != "/" {
			skip = nil
		}
		findings, _, err := keyscan.Tree(top, skip, func(rel string, md5sum func() string) bool {
			return pristine(path.Join(d, rel), md5sum)
		})
		if err != nil {
			return nil, fmt.Errorf("check-keys: %w", err)
		}
		for _, f := range findings {
			p := path.Join(d, f.Path)
			if !seen[p] {
				seen[p] = true
				found = append(found, p+": "+f.Kind)
			}
		}
	}
	return found, nil
}
