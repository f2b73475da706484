package aptrepo

import (
	"bytes"
	"compress/gzip"
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"hash"
	"strconv"
	"strings"
	"time"
)

// Names of the files a repository consists of, besides its .debs.
const (
	PackagesFile       = "Packages"
	PackagesGzFile     = "Packages.gz"
	ReleaseFile        = "Release"
	InReleaseFile      = "InRelease"
	ReleaseGPGFile     = "Release.gpg"
	KeyringFile        = "keyring.gpg"
	ArmoredKeyringFile = "keyring.asc"
)

// ownFields are set by the index, never taken from a .deb's control file.
var ownFields = []string{"Filename", "Size", "MD5sum", "SHA1", "SHA256", "SHA512"}

func isOwnField(name string) bool {
	for _, f := range ownFields {
		if strings.EqualFold(name, f) {
			return true
		}
	}
	return false
}

// stanza renders pkg's entry in Packages: Package first, the rest of the
// control file in its own order, then the fields the repository vouches
// for (location, size, digests).
func (pkg *Package) stanza(b []byte) []byte {
	b = append(b, "Package: "...)
	b = append(b, pkg.Name...)
	b = append(b, '\n')
	var rest Paragraph
	for _, f := range pkg.control {
		if strings.EqualFold(f.Name, "Package") || isOwnField(f.Name) {
			continue
		}
		rest = append(rest, f)
	}
	b = rest.appendTo(b)
	b = append(b, "Filename: "...)
	b = append(b, pkg.Filename...)
	b = append(b, "\nSize: "...)
	b = strconv.AppendInt(b, pkg.Size, 10)
	// The weak and the long digests only when the build computed them
	// (Options.AllDigests): apt verifies with SHA256.
	for _, d := range []struct{ field, sum string }{
		{"MD5sum", pkg.MD5sum}, {"SHA1", pkg.SHA1}, {"SHA256", pkg.SHA256}, {"SHA512", pkg.SHA512},
	} {
		if d.sum != "" {
			b = append(b, "\n"+d.field+": "...)
			b = append(b, d.sum...)
		}
	}
	b = append(b, '\n')
	return b
}

// packagesIndex renders Packages for pkgs, which are already sorted.
func packagesIndex(pkgs []Package) []byte {
	var b []byte
	for i := range pkgs {
		if i > 0 {
			b = append(b, '\n')
		}
		b = pkgs[i].stanza(b)
	}
	return b
}

// gzipBytes compresses data with a header carrying neither a name nor a
// modification time, so the output depends on data alone.
func gzipBytes(data []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(data); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// releaseDateLayout is RFC 2822 with the zone spelled "UTC", as apt and
// Debian's archive write it.
const releaseDateLayout = "Mon, 02 Jan 2006 15:04:05 UTC"

type indexFile struct {
	name string
	data []byte
}

// releaseFile renders Release for the given index files. It carries no
// Valid-Until (nodes live longer than any sensible expiry), no Suite or
// Codename (a flat source names no suite) and no Components (apt rejects
// them on a flat repository).
func releaseFile(origin, label string, date time.Time, archs []string, files []indexFile, allDigests bool) []byte {
	var b strings.Builder
	if origin != "" {
		fmt.Fprintf(&b, "Origin: %s\n", origin)
	}
	if label != "" {
		fmt.Fprintf(&b, "Label: %s\n", label)
	}
	fmt.Fprintf(&b, "Date: %s\n", date.UTC().Format(releaseDateLayout))
	if len(archs) > 0 {
		fmt.Fprintf(&b, "Architectures: %s\n", strings.Join(archs, " "))
	}
	// apt requires and verifies SHA256. MD5Sum and SHA1, which apt ignores
	// as too weak, and SHA512 are for older tools that still read them.
	sums := []struct {
		field string
		new   func() hash.Hash
	}{{"SHA256", sha256.New}}
	if allDigests {
		sums = []struct {
			field string
			new   func() hash.Hash
		}{{"MD5Sum", md5.New}, {"SHA1", sha1.New}, {"SHA256", sha256.New}, {"SHA512", sha512.New}}
	}
	for _, s := range sums {
		fmt.Fprintf(&b, "%s:\n", s.field)
		for _, f := range files {
			h := s.new()
			h.Write(f.data)
			fmt.Fprintf(&b, " %s %d %s\n", hex.EncodeToString(h.Sum(nil)), len(f.data), f.name)
		}
	}
	return []byte(b.String())
}
