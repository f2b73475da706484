// Package diskrecord reads what binds a build's record to its disk: the
// disk's size and SHA256 and, for a root or /usr under dm-verity, the
// root hash that a measured boot compares with a reference value.
//
// The root hash is read from the partition table, as systemd-repart
// writes it (and systemd-gpt-auto-generator reads it): the data
// partition's UUID is the hash's first 128 bits, its verity partition's
// UUID the last 128. Nothing is mounted or decompressed.
package diskrecord

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Disk is the record of one disk image.
type Disk struct {
	File   string `json:"file"` // base name
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// RootHash and UsrHash are the dm-verity root hashes of a verity
	// protected root or /usr partition (hex), as the kernel command line
	// passes them (roothash=, usrhash=); empty without one.
	RootHash string `json:"root_hash,omitempty"`
	UsrHash  string `json:"usr_hash,omitempty"`
}

// Read records the disk at path. A file with no GUID partition table
// (a compressed disk, a raw file system) gets its digest only.
func Read(path string) (Disk, error) {
	f, err := os.Open(path)
	if err != nil {
		return Disk{}, fmt.Errorf("record disk: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return Disk{}, fmt.Errorf("record disk: %s: %w", path, err)
	}
	d := Disk{File: filepath.Base(path), Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}
	parts, err := ReadGPT(f)
	switch {
	case errors.Is(err, ErrNoGPT):
		return d, nil
	case err != nil:
		return Disk{}, fmt.Errorf("record disk: %s: %w", path, err)
	}
	if d.RootHash, err = verityHash(parts, rootTypes); err != nil {
		return Disk{}, fmt.Errorf("record disk: %s: %w", path, err)
	}
	if d.UsrHash, err = verityHash(parts, usrTypes); err != nil {
		return Disk{}, fmt.Errorf("record disk: %s: %w", path, err)
	}
	return d, nil
}

// Partition is one used entry of a GUID partition table; UUIDs are
// lower-case hex without dashes, in the byte order of their text form.
type Partition struct {
	Type, UUID string
	Name       string
	// Offset and Size are in bytes from the start of the disk.
	Offset, Size int64
}

// ErrNoGPT says a file has no GUID partition table.
var ErrNoGPT = errors.New("no GUID partition table")

// ReadGPT reads the primary GUID partition table, with 512- or
// 4096-byte sectors.
func ReadGPT(r io.ReaderAt) ([]Partition, error) {
	for _, sector := range []int64{512, 4096} {
		hdr := make([]byte, 92)
		if _, err := r.ReadAt(hdr, sector); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, err
		}
		if string(hdr[:8]) != "EFI PART" {
			continue
		}
		lba := int64(binary.LittleEndian.Uint64(hdr[72:]))
		count := binary.LittleEndian.Uint32(hdr[80:])
		size := binary.LittleEndian.Uint32(hdr[84:])
		// The specification's bounds: entries of at least 128 bytes, a
		// multiple of 128, and no table a sane disk would not have.
		if size < 128 || size%128 != 0 || size > 4096 || count > 4096 {
			return nil, fmt.Errorf("GUID partition table: %d entries of %d bytes", count, size)
		}
		table := make([]byte, int64(count)*int64(size))
		if _, err := r.ReadAt(table, lba*sector); err != nil {
			return nil, fmt.Errorf("GUID partition table entries: %w", err)
		}
		var parts []Partition
		for i := range int(count) {
			e := table[i*int(size):]
			typ := guid(e[0:16])
			if typ == "00000000000000000000000000000000" {
				continue
			}
			first, last := int64(binary.LittleEndian.Uint64(e[32:])), int64(binary.LittleEndian.Uint64(e[40:]))
			parts = append(parts, Partition{Type: typ, UUID: guid(e[16:32]), Name: utf16Name(e[56:128]),
				Offset: first * sector, Size: (last - first + 1) * sector})
		}
		return parts, nil
	}
	return nil, ErrNoGPT
}

// guid turns a GUID as GPT stores it (the first three fields little
// endian) into the hex of its text form.
func guid(b []byte) string {
	t := make([]byte, 16)
	t[0], t[1], t[2], t[3] = b[3], b[2], b[1], b[0]
	t[4], t[5] = b[5], b[4]
	t[6], t[7] = b[7], b[6]
	copy(t[8:], b[8:16])
	return hex.EncodeToString(t)
}

func utf16Name(b []byte) string {
	var s strings.Builder
	for i := 0; i+1 < len(b); i += 2 {
		c := binary.LittleEndian.Uint16(b[i:])
		if c == 0 {
			break
		}
		s.WriteRune(rune(c))
	}
	return s.String()
}

// The Discoverable Partitions Specification's types of data partitions
// and their verity partitions, by architecture (systemd-id128 show).
var (
	// RootType is an x86-64 root partition's type.
	RootType  = "4f68bce3e8cd4db196e7fbcaf984b709"
	rootTypes = map[string]string{
		"4f68bce3e8cd4db196e7fbcaf984b709": "2c7357edebd246d9aec123d437ec2bf5", // x86-64
		"b921b0451df041c3af444c6f280d3fae": "df3300ced69f4c92978c9bfb0f38d820", // arm64
	}
	usrTypes = map[string]string{
		"8484680c952148c69c11b0720656f69e": "77ff5f63e7b64633acf41565b864c0e6", // x86-64
		"b0e01050ee5f4390949a9101b17104e9": "6e11a4e7fbca4dedb9e9e1a512bb664e", // arm64
	}
)

// verityHash is the root hash of the one data partition of types that has
// its verity partition: the two UUIDs joined. A disk with such partitions
// but no unambiguous pair gets an error, not a guess.
func verityHash(parts []Partition, types map[string]string) (string, error) {
	var hash string
	for _, data := range parts {
		vtype, ok := types[data.Type]
		if !ok {
			continue
		}
		var pairs []string
		for _, v := range parts {
			// systemd-repart gives the pair UUIDs from one hash.
			if v.Type == vtype {
				pairs = append(pairs, data.UUID+v.UUID)
			}
		}
		switch {
		case len(pairs) == 0:
			continue
		case len(pairs) > 1 || hash != "":
			return "", fmt.Errorf("more than one verity partition for a %s partition: the root hash is ambiguous", data.Type)
		}
		hash = pairs[0]
	}
	return hash, nil
}
