package mkosi

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/ProtonMail/go-crypto/openpgp/armor"
)

// keyFileExts are the key files CheckSecretKeys reads.
var keyFileExts = []string{".gpg", ".asc", ".key"}

// CheckSecretKeys looks in the key files (*.gpg, *.asc, *.key) below the
// directories dirs of the image at root for OpenPGP secret-key material:
// a Secret-Key or Secret-Subkey packet (tags 5 and 7), binary or inside
// any armor block. It returns the image paths of the files holding one.
// A directory the image lacks is skipped. Files that are not OpenPGP are
// passed over: the check walks packet headers only, without gpg, and does
// not look into compressed packets (key exports are never compressed).
func CheckSecretKeys(root string, dirs []string) ([]string, error) {
	var found []string
	seen := map[string]bool{}
	for _, d := range dirs {
		if !path.IsAbs(d) {
			return nil, fmt.Errorf("check-keys: %q is not an absolute path in the image", d)
		}
		top := filepath.Join(root, filepath.FromSlash(d))
		err := filepath.WalkDir(top, func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				if p == top && errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			if !e.Type().IsRegular() || seen[p] || !hasKeyExt(e.Name()) {
				return nil
			}
			seen[p] = true
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if HoldsSecretKey(data) {
				rel, _ := filepath.Rel(root, p)
				found = append(found, "/"+filepath.ToSlash(rel))
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("check-keys: %w", err)
		}
	}
	return found, nil
}

func hasKeyExt(name string) bool {
	for _, x := range keyFileExts {
		if strings.HasSuffix(name, x) {
			return true
		}
	}
	return false
}

// HoldsSecretKey reports whether data, a binary OpenPGP packet sequence or
// text with armor blocks, has a secret-key or secret-subkey packet.
func HoldsSecretKey(data []byte) bool {
	if secretPacket(data) {
		return true
	}
	const begin = "-----BEGIN PGP "
	for rest := data; ; {
		i := bytes.Index(rest, []byte(begin))
		if i < 0 {
			return false
		}
		rest = rest[i:]
		if block, err := armor.Decode(bytes.NewReader(rest)); err == nil {
			if body, err := io.ReadAll(block.Body); err == nil || len(body) > 0 {
				if secretPacket(body) {
					return true
				}
			}
		}
		rest = rest[len(begin):]
	}
}

// secretPacket walks the packet headers of a binary OpenPGP sequence (RFC
// 4880 section 4.2, old and new format) and reports a packet tagged 5
// (Secret-Key) or 7 (Secret-Subkey). It stops at the first byte that is no
// packet header.
func secretPacket(b []byte) bool {
	for len(b) > 0 {
		h := b[0]
		if h&0x80 == 0 {
			return false
		}
		var tag int
		var n int64 // body length; -1: to the end
		b = b[1:]
		if h&0x40 != 0 { // new format
			tag = int(h & 0x3f)
			if tag == 5 || tag == 7 {
				return true
			}
			for {
				l, partial, rest, ok := newLength(b)
				if !ok {
					return false
				}
				b = rest
				if !partial {
					n = l
					break
				}
				if int64(len(b)) < l {
					return false
				}
				b = b[l:]
			}
		} else { // old format
			tag = int(h>>2) & 0x0f
			if tag == 5 || tag == 7 {
				return true
			}
			switch h & 3 {
			case 0, 1, 2:
				size := []int{1, 2, 4}[h&3]
				if len(b) < size {
					return false
				}
				for _, c := range b[:size] {
					n = n<<8 | int64(c)
				}
				b = b[size:]
			case 3:
				n = -1
			}
		}
		if n < 0 || int64(len(b)) < n {
			return false
		}
		b = b[n:]
	}
	return false
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
