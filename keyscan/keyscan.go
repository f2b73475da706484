// Package keyscan finds private key material in files: PEM private keys of
// every kind (PKCS#1, PKCS#8, encrypted, EC, OpenSSH, OpenPGP armor),
// OpenSSH's binary format, OpenPGP secret-key packets and DER-encoded
// PKCS#1, PKCS#8 and EC private keys. The builder, the mkosi finalize check
// and the end-to-end tests run the same scan over a whole image.
package keyscan

import (
	"bytes"
	"crypto/md5"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"golang.org/x/sys/unix"
)

// pemPrivate matches the BEGIN line of every PEM private key: "PRIVATE
// KEY", "RSA PRIVATE KEY", "ENCRYPTED PRIVATE KEY", "EC PRIVATE KEY",
// "OPENSSH PRIVATE KEY", "PGP PRIVATE KEY BLOCK" and the like.
var pemPrivate = regexp.MustCompile(`-----BEGIN [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----`)

// opensshMagic starts OpenSSH's binary private key format.
var opensshMagic = []byte("openssh-key-v1\x00")

// maxDER bounds the files tried as a bare DER private key; keys are small.
const maxDER = 64 << 10

// Find reports what private key material data holds, or "" for none.
func Find(name string, data []byte) string {
	if m := pemPrivate.Find(data); m != nil {
		return "PEM " + strings.Trim(string(m), "- ")
	}
	if bytes.HasPrefix(data, opensshMagic) {
		return "OpenSSH private key (binary)"
	}
	if len(data) > 0 && len(data) <= maxDER && data[0] == 0x30 {
		if _, err := x509.ParsePKCS8PrivateKey(data); err == nil {
			return "PKCS#8 private key (DER)"
		}
		if _, err := x509.ParsePKCS1PrivateKey(data); err == nil {
			return "PKCS#1 RSA private key (DER)"
		}
		if _, err := x509.ParseECPrivateKey(data); err == nil {
			return "EC private key (DER)"
		}
	}
	if bytes.Contains(data, []byte("-----BEGIN PGP ")) && armoredSecret(data) {
		return "OpenPGP secret key (armored)"
	}
	// Binary OpenPGP: in a key file, a secret packet anywhere in the
	// walk; in any other file only a well-formed packet sequence, so that
	// random binaries are not mistaken for keys.
	if len(data) > 0 && data[0]&0x80 != 0 {
		if secret, whole := secretPacket(data); secret && (whole || keyFile(name)) {
			return "OpenPGP secret key packet"
		}
	}
	return ""
}

func keyFile(name string) bool {
	for _, x := range []string{".gpg", ".asc", ".key", ".pgp"} {
		if strings.HasSuffix(name, x) {
			return true
		}
	}
	return false
}

// Finding is one file that holds private key material.
type Finding struct {
	Path string // relative to the scanned root, with a leading slash
	Kind string
}

func (f Finding) String() string { return f.Path + ": " + f.Kind }

// Tree scans every regular file below root, except the directories named
// in skip (relative to root, such as "proc"), and the files pristine
// reports as unchanged from a package (nil: none). It returns what it found
// and how many files it read.
func Tree(root string, skip []string, pristine func(rel string, md5sum func() string) bool) ([]Finding, int, error) {
	skipped := map[string]bool{}
	for _, s := range skip {
		skipped[filepath.Clean(s)] = true
	}
	var found []Finding
	files := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
				return nil
			}
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			if skipped[rel] {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		kind, data, err := scanFile(p, d.Name())
		if err != nil {
			return fmt.Errorf("scan %s: %w", p, err)
		}
		files++
		if kind != "" {
			slash := "/" + filepath.ToSlash(rel)
			sum := func() string { return md5Of(p, data) }
			if pristine == nil || !pristine(slash, sum) {
				found = append(found, Finding{Path: slash, Kind: kind})
			}
		}
		return nil
	})
	return found, files, err
}

// wholeFileLimit is the largest file read whole; larger ones (a sparse
// lastlog, a swap file) are streamed and searched for PEM blocks only.
const wholeFileLimit = 64 << 20

// scanFile runs Find over the file at p, reading it whole when it is small
// and in overlapping chunks otherwise. data is the file's content when it
// was read whole (for the pristine check), else nil.
func scanFile(p, name string) (kind string, data []byte, err error) {
	fi, err := os.Stat(p)
	if err != nil {
		return "", nil, err
	}
	if fi.Size() <= wholeFileLimit {
		data, err := os.ReadFile(p)
		if err != nil {
			return "", nil, err
		}
		return Find(name, data), data, nil
	}
	f, err := os.Open(p)
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	const chunk, overlap = 1 << 20, 256
	buf := make([]byte, chunk+overlap)
	for ext := range extents(f, fi.Size()) {
		if ext.err != nil {
			return "", nil, ext.err
		}
		// A hole reads as zeros, and no marker holds a zero byte, so a
		// match never spans two extents: each is searched on its own.
		keep := 0
		r := io.NewSectionReader(f, ext.off, ext.end-ext.off)
		for first := ext.off == 0; ; first = false {
			n, rerr := io.ReadFull(r, buf[keep:])
			window := buf[:keep+n]
			if first && bytes.HasPrefix(window, opensshMagic) {
				return "OpenSSH private key (binary)", nil, nil
			}
			if m := pemPrivate.Find(window); m != nil {
				return "PEM " + strings.Trim(string(m), "- "), nil, nil
			}
			if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
				break
			}
			if rerr != nil {
				return "", nil, rerr
			}
			keep = copy(buf, window[len(window)-overlap:])
		}
	}
	return "", nil, nil
}

// extent is a range of a file that may hold data, [off, end).
type extent struct {
	off, end int64
	err      error
}

// extents yields the data ranges of f, size bytes long, skipping its holes
// (SEEK_DATA, SEEK_HOLE): reading the holes of a sparse file of 20 GiB
// took 43 s. Where the file system cannot tell, the whole file is one
// range.
func extents(f *os.File, size int64) func(yield func(extent) bool) {
	return func(yield func(extent) bool) {
		fd := int(f.Fd())
		for off := int64(0); off < size; {
			data, err := unix.Seek(fd, off, unix.SEEK_DATA)
			if errors.Is(err, unix.ENXIO) {
				return // only a hole is left
			}
			if err != nil {
				if off == 0 && (errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP)) {
					yield(extent{off: 0, end: size})
					return
				}
				yield(extent{err: fmt.Errorf("seeking to data: %w", err)})
				return
			}
			hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
			if err != nil {
				yield(extent{err: fmt.Errorf("seeking to a hole: %w", err)})
				return
			}
			// The file may have grown or shrunk since its Stat.
			hole = min(hole, size)
			if hole <= data {
				return
			}
			if !yield(extent{off: data, end: hole}) {
				return
			}
			off = hole
		}
	}
}

// DpkgPristine returns a check for Tree that passes over files a package of
// the image at root installed and that still have the package's content
// (dpkg's md5sums): test keys and PEM headers in shipped files are the
// distribution's, not ours. A changed file is scanned like any other.
func DpkgPristine(root string) (func(rel string, md5sum func() string) bool, error) {
	sums := map[string]string{}
	lists, err := filepath.Glob(filepath.Join(root, "var/lib/dpkg/info/*.md5sums"))
	if err != nil {
		return nil, err
	}
	for _, l := range lists {
		b, err := os.ReadFile(l)
		if err != nil {
			return nil, err
		}
		for _, line := range strings.Split(string(b), "\n") {
			sum, file, ok := strings.Cut(line, "  ")
			if ok {
				sums["/"+strings.TrimPrefix(file, "/")] = sum
			}
		}
	}
	return func(rel string, md5sum func() string) bool {
		want, ok := sums[rel]
		if !ok {
			// usrmerge: dpkg may record /lib/... for /usr/lib/...
			want, ok = sums[strings.TrimPrefix(rel, "/usr")]
		}
		return ok && md5sum() == want
	}, nil
}

// md5Of is dpkg's checksum of a file: of data when the file was read
// whole, else streamed from p ("" when it cannot be read).
func md5Of(p string, data []byte) string {
	if data != nil {
		sum := md5.Sum(data)
		return hex.EncodeToString(sum[:])
	}
	f, err := os.Open(p)
	if err != nil {
		return ""
	}
	defer f.Close()
	h := md5.New()
	if _, err := io.Copy(h, f); err != nil {
		return ""
	}
	return hex.EncodeToString(h.Sum(nil))
}

// armoredSecret reports whether an armor block in data holds a secret-key
// packet.
func armoredSecret(data []byte) bool {
	const begin = "-----BEGIN PGP "
	for rest := data; ; {
		i := bytes.Index(rest, []byte(begin))
		if i < 0 {
			return false
		}
		rest = rest[i:]
		if block, err := armor.Decode(bytes.NewReader(rest)); err == nil {
			if body, err := io.ReadAll(block.Body); err == nil || len(body) > 0 {
				if secret, _ := secretPacket(body); secret {
					return true
				}
			}
		}
		rest = rest[len(begin):]
	}
}

// secretPacket walks the packet headers of a binary OpenPGP sequence (RFC
// 4880 section 4.2, old and new format). secret: a packet tagged 5
// (Secret-Key) or 7 (Secret-Subkey) was seen; whole: the walk ended exactly
// at the end of b, so b is a packet sequence and not some other binary.
func secretPacket(b []byte) (secret, whole bool) {
	for len(b) > 0 {
		h := b[0]
		if h&0x80 == 0 {
			return secret, false
		}
		var tag int
		var n int64 // body length; -1: to the end
		b = b[1:]
		if h&0x40 != 0 { // new format
			tag = int(h & 0x3f)
			for {
				l, partial, rest, ok := newLength(b)
				if !ok {
					return secret || tag == 5 || tag == 7, false
				}
				b = rest
				if !partial {
					n = l
					break
				}
				if int64(len(b)) < l {
					return secret || tag == 5 || tag == 7, false
				}
				b = b[l:]
			}
		} else { // old format
			tag = int(h>>2) & 0x0f
			switch h & 3 {
			case 0, 1, 2:
				size := []int{1, 2, 4}[h&3]
				if len(b) < size {
					return secret || tag == 5 || tag == 7, false
				}
				for _, c := range b[:size] {
					n = n<<8 | int64(c)
				}
				b = b[size:]
			case 3:
				n = -1
			}
		}
		if n >= 0 && int64(len(b)) < n {
			return secret, false
		}
		// A secret-key packet starts with a key version, 3 to 6.
		if (tag == 5 || tag == 7) && len(b) > 0 && b[0] >= 3 && b[0] <= 6 {
			secret = true
		}
		if n < 0 {
			// An indeterminate length runs to the end: any byte string
			// parses that way, so it proves no packet sequence.
			return secret, false
		}
		b = b[n:]
	}
	return secret, true
}

// newLength decodes a new-format packet length.
func newLength(b []byte) (n int64, partial bool, rest []byte, ok bool) {
	if len(b) < 1 {
		return 0, false, nil, false
	}
	switch c := b[0]; {
	case c < 192:
		return int64(c), false, b[1:], true
	case c < 224:
		if len(b) < 2 {
			return 0, false, nil, false
		}
		return (int64(c)-192)<<8 + int64(b[1]) + 192, false, b[2:], true
	case c < 255:
		return 1 << (c & 0x1f), true, b[1:], true
	default:
		if len(b) < 5 {
			return 0, false, nil, false
		}
		return int64(b[1])<<24 | int64(b[2])<<16 | int64(b[3])<<8 | int64(b[4]), false, b[5:], true
	}
}
