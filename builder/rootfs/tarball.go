package rootfs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/podvm-gpu/packer-plugin-podvm/staging"
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
	return extractFrom(ctx, f, dir)
}

// extractFrom unpacks the open tarball f, whose name gives the
// compression, into the existing directory dir.
func extractFrom(ctx context.Context, f *os.File, dir string) error {
	file := f.Name()
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
// says. It writes in a staging directory beside file and renames the
// archive into place, so an interrupted build never leaves a truncated
// archive under the final name.
func createTarball(ctx context.Context, dir, file string) error {
	_, err := writeTarball(ctx, dir, file, false)
	return err
}

// writeTarball is createTarball that returns the archive's SHA256 and,
// with record set, also writes the digest record file+digestSuffix once
// the archive is in place. The staging directory is named for this
// process (package staging), so one that a killed build left beside file
// is removed by the next build that writes there.
func writeTarball(ctx context.Context, dir, file string, record bool) (sum string, err error) {
	parent, base := filepath.Dir(file), filepath.Base(file)
	prefix := "." + base + ".tmp-"
	staging.RemoveStale(parent, prefix)
	removeLegacyTemps(parent, prefix)
	work, err := os.MkdirTemp(parent, staging.Pattern(prefix))
	if err != nil {
		return "", fmt.Errorf("create tarball %s: %w", file, err)
	}
	defer os.RemoveAll(work)
	tmp, err := os.OpenFile(filepath.Join(work, base), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", fmt.Errorf("create tarball %s: %w", file, err)
	}
	defer tmp.Close()
	h := sha256.New()
	out := io.MultiWriter(tmp, h)
	var w io.WriteCloser
	switch tarSuffix(file, outputTarballs) {
	case ".tar.zst":
		w, err = zstd.NewWriter(out, zstd.WithEncoderLevel(zstd.SpeedDefault))
	case ".tar.gz":
		w, err = gzip.NewWriterLevel(out, gzip.DefaultCompression)
	default:
		return "", fmt.Errorf("create tarball %s: unsupported extension", file)
	}
	if err != nil {
		return "", fmt.Errorf("create tarball %s: %w", file, err)
	}
	args := append([]string{"--create", "--file=-", "--directory=" + dir}, tarCreateFlags...)
	cmd := exec.Command("tar", append(args, ".")...)
	cmd.Stdout = w
	if err := runHost(ctx, cmd); err != nil {
		w.Close()
		return "", fmt.Errorf("create tarball %s: %w", file, err)
	}
	if err := w.Close(); err != nil {
		return "", fmt.Errorf("create tarball %s: %w", file, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		return "", fmt.Errorf("create tarball %s: %w", file, err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("create tarball %s: %w", file, err)
	}
	sum = hex.EncodeToString(h.Sum(nil))
	var rec string
	if record {
		// Written before either rename, so that the record appears
		// whole; the archive goes first, so a record never describes an
		// archive that is not there yet. A build killed between the two
		// renames leaves an archive without a record, which the next
		// build refuses and rebuilds.
		rec = filepath.Join(work, base+digestSuffix)
		if err := os.WriteFile(rec, digestRecord(sum, base), 0o644); err != nil {
			return "", fmt.Errorf("record the SHA256 of %s: %w", file, err)
		}
	}
	if err := os.Rename(tmp.Name(), file); err != nil {
		return "", fmt.Errorf("create tarball %s: %w", file, err)
	}
	if record {
		if err := os.Rename(rec, file+digestSuffix); err != nil {
			return "", fmt.Errorf("record the SHA256 of %s: %w", file, err)
		}
	}
	return sum, nil
}

// removeLegacyTemps removes the temporary files that earlier versions
// wrote beside a tarball (prefix and a random number, no process ID), which
// a killed build left behind.
func removeLegacyTemps(dir, prefix string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if ok && e.Type().IsRegular() && rest != "" && strings.Trim(rest, "0123456789") == "" {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
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
