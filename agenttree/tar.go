package agenttree

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"

	"github.com/podvm-gpu/packer-plugin-podvm/inputcheck"
)

// WriteTar writes the tree as an archive to unpack on the image's root:
// every entry root's (0:0), with its mode, links as links. It packs
// exactly the entries Check saw, read again below the directory Check
// resolved (through os.Root, so nothing outside it is ever opened), and
// refuses one that is no longer the same file of the same type and mode:
// what changed since the check is never packed unchecked.
func (t *Tree) WriteTar(w io.Writer) error {
	r, err := os.OpenRoot(t.root)
	if err != nil {
		return fmt.Errorf("packing the binaries tree %s: %w", t.Dir, err)
	}
	defer r.Close()
	tw := tar.NewWriter(w)
	for _, e := range t.checked {
		if e.img == "/" {
			continue
		}
		if err := writeEntry(tw, r, e); err != nil {
			return fmt.Errorf("packing the binaries tree %s: %w", t.Dir, err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("packing the binaries tree %s: %w", t.Dir, err)
	}
	return nil
}

// writeEntry adds one checked entry, if it is still what Check saw.
func writeEntry(tw *tar.Writer, r *os.Root, e entry) error {
	name := strings.TrimPrefix(e.img, "/")
	changed := func(now string) error {
		return refuse("%s changed after it was checked (%s, now %s): run the build again on a tree nothing writes to", e.img, describe(e.mode), now)
	}
	fi, err := r.Lstat(name)
	if err != nil {
		return changed(err.Error())
	}
	if id, _, _ := fileIdentity(fi); fi.Mode() != e.mode || id != e.id {
		return changed(describe(fi.Mode()))
	}
	h := &tar.Header{Name: name, Mode: int64(e.mode.Perm()), ModTime: fi.ModTime(), Format: tar.FormatPAX}
	switch {
	case e.mode.IsDir():
		h.Typeflag, h.Name = tar.TypeDir, name+"/"
		return tw.WriteHeader(h)
	case e.mode&fs.ModeSymlink != 0:
		if h.Linkname, err = r.Readlink(name); err != nil {
			return changed(err.Error())
		}
		h.Typeflag = tar.TypeSymlink
		return tw.WriteHeader(h)
	case !e.mode.IsRegular():
		return changed(describe(fi.Mode()))
	}
	f, err := r.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return changed(err.Error())
	}
	defer f.Close()
	fi, err = f.Stat()
	if err != nil {
		return changed(err.Error())
	}
	if id, _, _ := fileIdentity(fi); fi.Mode() != e.mode || id != e.id || fi.Size() != e.size {
		return changed(fmt.Sprintf("%s of %d bytes", describe(fi.Mode()), fi.Size()))
	}
	h.Typeflag, h.Size = tar.TypeReg, e.size
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	n, err := io.Copy(tw, io.LimitReader(f, e.size))
	if err == nil && n != e.size {
		err = errors.New("it shrank while it was read")
	}
	if err != nil {
		return fmt.Errorf("%s: %w", e.img, err)
	}
	return nil
}

// describe is a mode in words: the kind and the permission bits.
func describe(m fs.FileMode) string {
	return fmt.Sprintf("a %s with mode %04o", inputcheck.FileKind(m), uint32(m.Perm()|m&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)))
}
