package mkosi

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/podvm-gpu/packer-plugin-podvm/staging"
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
// are removed, so nothing stale stays for mkosi to pick up, and the user's
// own files stay. The tree is written into a staging directory beside dir
// first: a failure while writing leaves dir as it was. A new dir appears
// whole, by one rename; an existing one gets each file by rename, after
// every destination was checked to be free.
func Write(dir string, files []File, force bool) error {
	if err := CheckOutput(dir, force); err != nil {
		return err
	}
	var list strings.Builder
	for _, f := range files {
		if !fs.ValidPath(f.Path) || f.Path == generatedList {
			return fmt.Errorf("mkosi: bad tree path %q", f.Path)
		}
		list.WriteString(f.Path + "\n")
	}
	dir = filepath.Clean(dir)
	parent, prefix := filepath.Dir(dir), "."+filepath.Base(dir)+".podvm-tmp-"
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("mkosi: %w", err)
	}
	staging.RemoveStale(parent, prefix)
	stage, err := os.MkdirTemp(parent, staging.Pattern(prefix))
	if err != nil {
		return fmt.Errorf("mkosi: staging directory: %w", err)
	}
	defer os.RemoveAll(stage) // a no-op once renamed into place
	if err := os.Chmod(stage, 0o755); err != nil {
		return fmt.Errorf("mkosi: %w", err)
	}
	all := append(slices.Clone(files), File{Path: generatedList, Mode: 0o644, Data: []byte(list.String())})
	for _, f := range all {
		name := filepath.Join(stage, filepath.FromSlash(f.Path))
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			return fmt.Errorf("mkosi: %w", err)
		}
		if err := os.WriteFile(name, f.Data, f.Mode); err != nil {
			return fmt.Errorf("mkosi: %w", err)
		}
		// WriteFile applies the umask.
		if err := os.Chmod(name, f.Mode); err != nil {
			return fmt.Errorf("mkosi: %w", err)
		}
	}

	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && len(entries) == 0) {
		if err == nil {
			if err := os.Remove(dir); err != nil {
				return fmt.Errorf("mkosi: %w", err)
			}
		}
		if err := os.Rename(stage, dir); err != nil {
			return fmt.Errorf("mkosi: %w", err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("mkosi: %w", err)
	}
	previous, err := previousFiles(dir)
	if err != nil {
		return err
	}
	for _, f := range all {
		if err := destinationFree(dir, f.Path, previous); err != nil {
			return err
		}
	}
	if err := removePrevious(dir, previous); err != nil {
		return err
	}
	for _, f := range all {
		to := filepath.Join(dir, filepath.FromSlash(f.Path))
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return fmt.Errorf("mkosi: %w", err)
		}
		if err := os.Rename(filepath.Join(stage, filepath.FromSlash(f.Path)), to); err != nil {
			return fmt.Errorf("mkosi: %w", err)
		}
	}
	return nil
}

// previousFiles lists the files the last generation wrote into dir; none
// when dir holds no list (not ours: overwrite what we write, touch nothing
// else).
func previousFiles(dir string) ([]string, error) {
	data, err := os.ReadFile(filepath.Join(dir, generatedList))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("mkosi: %w", err)
	}
	var out []string
	for _, p := range strings.Split(string(data), "\n") {
		if p != "" && fs.ValidPath(p) {
			out = append(out, p)
		}
	}
	return out, nil
}

// destinationFree says whether p can be written in dir: every directory
// on the way is a directory or missing, and p itself is no directory,
// unless the previous generation's removal clears the way.
func destinationFree(dir, p string, previous []string) error {
	parts := strings.Split(p, "/")
	for i := range parts {
		sub := path.Join(parts[:i+1]...)
		fi, err := os.Lstat(filepath.Join(dir, filepath.FromSlash(sub)))
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("mkosi: %w", err)
		}
		last := i == len(parts)-1
		switch {
		case !last && !fi.IsDir() && !slices.Contains(previous, sub):
			return fmt.Errorf("mkosi: cannot write %s: %s in %s is not a directory; nothing was changed", p, sub, dir)
		case last && fi.IsDir():
			return fmt.Errorf("mkosi: cannot write %s: it is a directory in %s; nothing was changed", p, dir)
		}
	}
	return nil
}

func removePrevious(dir string, previous []string) error {
	dirs := map[string]bool{}
	for _, p := range previous {
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
