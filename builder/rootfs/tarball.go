package rootfs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// Root filesystems carry owners by number, file capabilities and ACLs
// (security.capability on ping, for one): tar must keep all of them.
var (
	tarCreateFlags = []string{
		"--numeric-owner", "--xattrs", "--xattrs-include=*", "--acls",
		// Never descend into a mount: a forgotten /proc or /dev must not end
		// up in the archive.
		"--one-file-system",
		"--sort=name",
	}
	tarExtractFlags = []string{
		"--numeric-owner", "--same-owner", "--preserve-permissions",
		"--xattrs", "--xattrs-include=*", "--acls",
	}
)

// extractTarball unpacks the tarball at file into the existing directory
// dir. Compression follows the file name; decompression happens here, so
// the host needs no zstd binary.
func extractTarball(ctx context.Context, file, dir string) error {
	f, err := os.Open(file)
	if err != nil {
		return fmt.Errorf("extract tarball: %w", err)
	}
	defer f.Close()
	var r io.Reader = f
	switch tarSuffix(file, inputTarballs) {
	case ".tar.zst":
		d, err := zstd.NewReader(f)
		if err != nil {
			return fmt.Errorf("extract %s: %w", file, err)
		}
		defer d.Close()
		r = d
	case ".tar.gz", ".tgz":
		d, err := gzip.NewReader(f)
		if err != nil {
			return fmt.Errorf("extract %s: %w", file, err)
		}
		defer d.Close()
		r = d
	}
	args := append([]string{"--extract", "--file=-", "--directory=" + dir}, tarExtractFlags...)
	cmd := exec.Command("tar", args...)
	// A pipe rather than the reader itself: exec copies a non-file Stdin
	// in a goroutine and would hide a decompression error behind tar's
	// "unexpected EOF".
	pr, pw := io.Pipe()
	cmd.Stdin = pr
	copyErr := make(chan error, 1)
	go func() {
		_, err := io.Copy(pw, r)
		pw.CloseWithError(err)
		copyErr <- err
	}()
	runErr := runHost(ctx, cmd)
	pr.CloseWithError(errors.New("tar exited"))
	if err := <-copyErr; err != nil && runErr == nil {
		return fmt.Errorf("extract %s: %w", file, err)
	} else if err != nil {
		return fmt.Errorf("extract %s: %w (reading the archive: %v)", file, runErr, err)
	}
	if runErr != nil {
		return fmt.Errorf("extract %s: %w", file, runErr)
	}
	return nil
}

// createTarball packs the tree at dir into file, compressed as its name
// says. It writes a temporary file beside file and renames it into place,
// so an interrupted build never leaves a truncated archive under the final
// name.
func createTarball(ctx context.Context, dir, file string) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".tmp-*")
	if err != nil {
		return fmt.Errorf("create tarball: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	var w io.WriteCloser
	switch tarSuffix(file, outputTarballs) {
	case ".tar.zst":
		w, err = zstd.NewWriter(tmp, zstd.WithEncoderLevel(zstd.SpeedDefault))
	case ".tar.gz":
		w, err = gzip.NewWriterLevel(tmp, gzip.DefaultCompression)
	default:
		return fmt.Errorf("create tarball %s: unsupported extension", file)
	}
	if err != nil {
		return fmt.Errorf("create tarball %s: %w", file, err)
	}
	args := append([]string{"--create", "--file=-", "--directory=" + dir}, tarCreateFlags...)
	cmd := exec.Command("tar", append(args, ".")...)
	cmd.Stdout = w
	if err := runHost(ctx, cmd); err != nil {
		w.Close()
		return fmt.Errorf("create tarball %s: %w", file, err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("create tarball %s: %w", file, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		return fmt.Errorf("create tarball %s: %w", file, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("create tarball %s: %w", file, err)
	}
	if err := os.Rename(tmp.Name(), file); err != nil {
		return fmt.Errorf("create tarball %s: %w", file, err)
	}
	return nil
}

// copyTree copies the tree at src into the existing directory dst with
// everything cp -a keeps (owners, modes, times, links, xattrs), staying on
// src's filesystem.
func copyTree(ctx context.Context, src, dst string) error {
	cmd := exec.Command("cp", "--archive", "--one-file-system", "--no-target-directory", src, dst)
	if err := runHost(ctx, cmd); err != nil {
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	return nil
}
