package rootfs

import (
	"errors"
	"os"
	"path/filepath"
)

// BuilderID identifies artifacts of this builder to post-processors.
const BuilderID = "podvm-gpu.rootfs"

// Artifact is a root filesystem directory, a tarball of it when
// output_tarball is set, and a bootable disk image of it with a disk format.
type Artifact struct {
	Dir     string
	Tarball string
	Image   string
}

func (a *Artifact) BuilderId() string { return BuilderID }

func (a *Artifact) Files() []string {
	files := []string{a.Dir}
	if a.Tarball != "" {
		files = append(files, a.Tarball)
	}
	if a.Image != "" {
		files = append(files, a.Image)
	}
	return files
}

func (a *Artifact) Id() string { return a.Dir }

func (a *Artifact) String() string {
	s := "Root filesystem in " + a.Dir
	if a.Tarball != "" {
		s += ", packed into " + a.Tarball
	}
	if a.Image != "" {
		s += ", bootable disk " + a.Image
	}
	return s
}

func (a *Artifact) State(string) interface{} { return nil }

// Destroy removes the tarball and the tree; the tree only if nothing is
// mounted below it.
func (a *Artifact) Destroy() error {
	var errs []error
	for _, f := range []string{a.Tarball, a.Image} {
		if f == "" {
			continue
		}
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := removeTree(a.Dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func dirOf(p string) string { return filepath.Dir(p) }
