package rootfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// BuilderID identifies artifacts of this builder to post-processors.
const BuilderID = "podvm-gpu.rootfs"

// Artifact is a root filesystem directory, and a tarball of it when
// output_tarball is set.
type Artifact struct {
	Dir     string
	Tarball string
}

func (a *Artifact) BuilderId() string { return BuilderID }

func (a *Artifact) Files() []string {
	files := []string{a.Dir}
	if a.Tarball != "" {
		files = append(files, a.Tarball)
	}
	return files
}

func (a *Artifact) Id() string { return a.Dir }

func (a *Artifact) String() string {
	if a.Tarball != "" {
		return fmt.Sprintf("Root filesystem in %s, packed into %s", a.Dir, a.Tarball)
	}
	return "Root filesystem in " + a.Dir
}

func (a *Artifact) State(string) interface{} { return nil }

// Destroy removes the tarball and the tree; the tree only if nothing is
// mounted below it.
func (a *Artifact) Destroy() error {
	var errs []error
	if a.Tarball != "" {
		if err := os.Remove(a.Tarball); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := removeTree(a.Dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func dirOf(p string) string { return filepath.Dir(p) }
