package aptrepo

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/ulikunitz/xz/lzma"
)

// newXZReader returns the decompressed first block of an xz stream (the
// .xz container format), decoding LZMA2 with a dictionary of at most
// dictLimit bytes.
//
// github.com/ulikunitz/xz's own reader allocates whatever dictionary the
// block header asks for, up to 4 GiB, which a hostile .deb could use to
// exhaust memory. A smaller dictionary still decodes any stream whose
// matches reach back no further than dictLimit bytes, and a control
// member's control file comes before anything large; a stream that
// reaches further fails to decode rather than costing memory.
//
// Only the first block is decoded: dpkg writes control members as a single
// block, and the control file comes first in them. The block's check field
// is not verified; the whole .deb's SHA256 is what apt relies on.
func newXZReader(r io.Reader, dictLimit int64) (io.Reader, error) {
	br := bufio.NewReader(r)

	var sh [12]byte // magic, stream flags, CRC32 of the flags
	if _, err := io.ReadFull(br, sh[:]); err != nil {
		return nil, fmt.Errorf("xz stream header: %w", err)
	}
	if !bytes.Equal(sh[:6], []byte{0xfd, '7', 'z', 'X', 'Z', 0}) {
		return nil, errors.New("not an xz stream")
	}
	if crc32.ChecksumIEEE(sh[6:8]) != binary.LittleEndian.Uint32(sh[8:12]) {
		return nil, errors.New("xz stream header: bad CRC")
	}
	if sh[6] != 0 || sh[7] > 0x0f {
		return nil, errors.New("xz stream header: reserved flags set")
	}

	first, err := br.ReadByte()
	if err != nil {
		return nil, fmt.Errorf("xz block header: %w", err)
	}
	if first == 0 { // the index: a stream without blocks
		return bytes.NewReader(nil), nil
	}
	bh := make([]byte, (int(first)+1)*4) // at most 1024 bytes
	bh[0] = first
	if _, err := io.ReadFull(br, bh[1:]); err != nil {
		return nil, fmt.Errorf("xz block header: %w", err)
	}
	body, crc := bh[:len(bh)-4], bh[len(bh)-4:]
	if crc32.ChecksumIEEE(body) != binary.LittleEndian.Uint32(crc) {
		return nil, errors.New("xz block header: bad CRC")
	}
	dictSize, err := parseXZBlockHeader(body)
	if err != nil {
		return nil, err
	}

	dictCap := min(dictSize, dictLimit)
	dictCap = max(dictCap, lzma.MinDictCap)
	lr, err := lzma.Reader2Config{DictCap: int(dictCap)}.NewReader2(br)
	if err != nil {
		return nil, fmt.Errorf("xz: %w", err)
	}
	return lr, nil
}

// parseXZBlockHeader checks a block header (without its CRC) for the one
// layout dpkg produces, a single LZMA2 filter, and returns the dictionary
// size the encoder used.
func parseXZBlockHeader(h []byte) (int64, error) {
	flags := h[1]
	if flags&0x3c != 0 {
		return 0, errors.New("xz block header: reserved flags set")
	}
	if flags&0x03 != 0 {
		return 0, errors.New("xz: filter chains other than plain LZMA2 are not supported in control members")
	}
	p := h[2:]
	next := func() (uint64, error) {
		v, n := binary.Uvarint(p)
		if n <= 0 || n > 9 {
			return 0, errors.New("xz block header: bad number")
		}
		p = p[n:]
		return v, nil
	}
	if flags&0x40 != 0 { // compressed size
		if _, err := next(); err != nil {
			return 0, err
		}
	}
	if flags&0x80 != 0 { // uncompressed size
		if _, err := next(); err != nil {
			return 0, err
		}
	}
	id, err := next()
	if err != nil {
		return 0, err
	}
	propSize, err := next()
	if err != nil {
		return 0, err
	}
	const lzma2FilterID = 0x21
	if id != lzma2FilterID || propSize != 1 || len(p) < 1 {
		return 0, fmt.Errorf("xz: filter %#x is not supported in control members", id)
	}
	for _, b := range p[1:] { // header padding
		if b != 0 {
			return 0, errors.New("xz block header: non-zero padding")
		}
	}
	return lzma2DictSize(p[0])
}

// lzma2DictSize decodes the LZMA2 dictionary size property (xz format
// specification, 5.3.1).
func lzma2DictSize(b byte) (int64, error) {
	switch {
	case b > 40:
		return 0, fmt.Errorf("xz: bad LZMA2 dictionary size %d", b)
	case b == 40:
		return 1<<32 - 1, nil
	}
	return int64(2|(b&1)) << (b/2 + 11), nil
}
