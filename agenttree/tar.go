package agenttree

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
)

// WriteTar writes the tree as an archive to unpack on the image's root:
// every entry root's (0:0), with its mode, links as links. It reads the
// tree again and refuses anything that changed since Check in a way
// Check would refuse: a file is opened without following a link, and
// must still be the regular file of its mode.
func (t *Tree) WriteTar(w io.Writer) error {
	root, err := filepath.EvalSymlinks(t.Dir)
	if err != nil {
		return fmt.Errorf("binaries tree %s: %w", t.Dir, err)
	}
	tw := tar.NewWriter(w)
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		name := filepath.ToSlash(rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		h := &tar.Header{Name: name, Mode: int64(info.Mode().Perm()), ModTime: info.ModTime(), Format: tar.FormatPAX}
		m := info.Mode()
		switch {
		case m.IsDir():
			h.Typeflag, h.Name = tar.TypeDir, name+"/"
			return tw.WriteHeader(h)
		case m&fs.ModeSymlink != 0:
			if h.Linkname, err = os.Readlink(p); err != nil {
				return err
			}
			h.Typeflag = tar.TypeSymlink
			return tw.WriteHeader(h)
		case m.IsRegular() && m&(fs.ModeSetuid|fs.ModeSetgid) == 0 && m.Perm()&0o022 == 0:
			return writeFile(tw, h, p, info)
		}
		return fmt.Errorf("/%s is a %s with mode %v: changed since it was checked", name, strings.ToLower(fmt.Sprint(m.Type())), m)
	})
	if err != nil {
		return fmt.Errorf("packing the binaries tree %s: %w", t.Dir, err)
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("packing the binaries tree %s: %w", t.Dir, err)
	}
	return nil
}

// writeFile adds one regular file, read through a descriptor that cannot
// have followed a link, and no longer than it was when walked.
func writeFile(tw *tar.Writer, h *tar.Header, p string, walked fs.FileInfo) error {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() || !os.SameFile(fi, walked) {
		return fmt.Errorf("/%s: replaced since it was walked", h.Name)
	}
	h.Typeflag, h.Size = tar.TypeReg, fi.Size()
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	n, err := io.Copy(tw, io.LimitReader(f, fi.Size()))
	if err == nil && n != fi.Size() {
		err = errors.New("it shrank while it was read")
	}
	if err != nil {
		return fmt.Errorf("/%s: %w", path.Clean(h.Name), err)
	}
	return nil
}
