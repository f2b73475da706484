package mkosi

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// generatedList names, in the tree, the files Write wrote, so a forced
// regeneration removes the previous tree's files and leaves the user's own
// (mkosi.local.conf, caches, outputs) alone.
const generatedList = ".podvm-generated"

// CheckOutput says whether Write could write into dir: a missing or empty
// directory, or with force a non-empty one. The generator calls it before
// anything slow (fetching keys), so a wrong --output is reported as such.
func CheckOutput(dir string, force bool) error {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("mkosi: --output: %w", err)
	case !fi.IsDir():
		return fmt.Errorf("mkosi: --output %s exists and is not a directory; give a directory", dir)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("mkosi: --output: %w", err)
	}
	if len(entries) > 0 && !force {
		return fmt.Errorf("mkosi: --output %s is not empty; use --force to regenerate into it", dir)
	}
	return nil
}

// Write writes files under dir. A dir that exists and is not empty is
// refused unless force is set; then the files of the previous generation
// are removed first, so nothing stale stays for mkosi to pick up.
func Write(dir string, files []File, force bool) error {
	if err := CheckOutput(dir, force); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("mkosi: %w", err)
	case len(entries) > 0:
		if err := removePrevious(dir); err != nil {
			return err
		}
	}
	var list strings.Builder
	for _, f := range files {
		if !fs.ValidPath(f.Path) || f.Path == generatedList {
			return fmt.Errorf("mkosi: bad tree path %q", f.Path)
		}
		name := filepath.Join(dir, filepath.FromSlash(f.Path))
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			return fmt.Errorf("mkosi: %w", err)
		}
		if err := os.WriteFile(name, f.Data, f.Mode); err != nil {
			return fmt.Errorf("mkosi: %w", err)
		}
		// WriteFile leaves an existing file's mode and applies the umask.
		if err := os.Chmod(name, f.Mode); err != nil {
			return fmt.Errorf("mkosi: %w", err)
		}
		list.WriteString(f.Path + "\n")
	}
	if err := os.WriteFile(filepath.Join(dir, generatedList), []byte(list.String()), 0o644); err != nil {
		return fmt.Errorf("mkosi: %w", err)
	}
	return nil
}

func removePrevious(dir string) error {
	data, err := os.ReadFile(filepath.Join(dir, generatedList))
	if errors.Is(err, fs.ErrNotExist) {
		return nil // not ours: overwrite what we write, touch nothing else
	}
	if err != nil {
		return fmt.Errorf("mkosi: %w", err)
	}
	dirs := map[string]bool{}
	for _, p := range strings.Split(string(data), "\n") {
		if p == "" || !fs.ValidPath(p) {
			continue
		}
		if err := os.Remove(filepath.Join(dir, filepath.FromSlash(p))); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("mkosi: %w", err)
		}
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	// Remove the directories left empty, deepest first.
	for len(dirs) > 0 {
		deepest := ""
		for d := range dirs {
			if strings.Count(d, "/") >= strings.Count(deepest, "/") {
				deepest = d
			}
		}
		delete(dirs, deepest)
		os.Remove(filepath.Join(dir, filepath.FromSlash(deepest))) // fails when not empty, which is fine
	}
	return nil
}
