package aptrepo

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/bzip2"
	"compress/gzip"
	"context"
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"hash/crc64"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz/lzma"
)

// Limits on what one .deb can make us read or allocate before its payload.
// Real packages stay far below them: Debian's largest control members
// (md5sums of packages with tens of thousands of files) are a few MiB.
const (
	maxControlMember = 64 << 20 // compressed control.tar.* member
	maxControlTar    = 64 << 20 // bytes decompressed from it
	maxControlFile   = 4 << 20  // the control file itself
	maxDebianBinary  = 64       // the "2.0\n" member
	// maxXZDict bounds the LZMA2 dictionary allocated for control.tar.xz.
	// dpkg compresses with xz -6, whose dictionary is 8 MiB; a stream made
	// with a larger one still decodes unless it refers back further than
	// 8 MiB before the control file, which comes first in the member.
	maxXZDict = 8 << 20
)

var (
	// ErrNotDeb is returned for input that is not a Debian binary package.
	ErrNotDeb = errors.New("not a Debian binary package")
	// ErrTruncated is returned for a .deb that ends before its last member.
	ErrTruncated = errors.New("truncated .deb")
)

// debInfo is what reading a .deb yields: its control paragraph, and the
// size and digests of the whole file.
type debInfo struct {
	control Paragraph
	size    int64
	md5     string
	sha1    string
	sha256  string
	sha512  string
}

// hashingReader feeds everything read through it to the digests (and to an
// optional copy), so one pass over the file parses, hashes and copies it.
type hashingReader struct {
	ctx  context.Context
	r    io.Reader
	w    io.Writer // the hashes, and the copy if any
	n    int64
	hash map[string]hash.Hash
}

func newHashingReader(ctx context.Context, r io.Reader, copyTo io.Writer, all bool) *hashingReader {
	h := &hashingReader{ctx: ctx, r: r, hash: map[string]hash.Hash{"sha256": sha256.New()}}
	if all {
		h.hash["md5"], h.hash["sha1"], h.hash["sha512"] = md5.New(), sha1.New(), sha512.New()
	}
	var ws []io.Writer
	for _, d := range h.hash {
		ws = append(ws, d)
	}
	if copyTo != nil {
		ws = append(ws, copyTo)
	}
	h.w = io.MultiWriter(ws...)
	return h
}

// sum is the hex digest named d, or "" when it was not computed.
func (h *hashingReader) sum(d string) string {
	if x, ok := h.hash[d]; ok {
		return hex.EncodeToString(x.Sum(nil))
	}
	return ""
}

func (h *hashingReader) Read(p []byte) (int, error) {
	if err := h.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := h.r.Read(p)
	if n > 0 {
		h.n += int64(n)
		if _, werr := h.w.Write(p[:n]); werr != nil {
			return n, &copyError{werr}
		}
	}
	return n, err
}

// copyError marks a failure to write the copy, so it is not reported as a
// problem with the .deb.
type copyError struct{ err error }

func (e *copyError) Error() string { return "copy: " + e.err.Error() }
func (e *copyError) Unwrap() error { return e.err }

// readBufferSize is large enough that reading a .deb costs few system calls
// and small enough to keep one per worker.
const readBufferSize = 256 << 10

var readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, readBufferSize) }}

// readDeb reads a .deb from r to its end: it checks the ar structure, parses
// the control file and digests every byte. The whole file is never held in
// memory. If copyTo is not nil, every byte read is written to it as well.
func readDeb(ctx context.Context, r io.Reader, copyTo io.Writer) (*debInfo, error) {
	return readDebDigests(ctx, r, copyTo, true, true)
}

// readDebDigests is readDeb computing SHA256 only, or with all also MD5,
// SHA1 and SHA512; without verifyData the data member is hashed but not
// decompressed (the caller knows these very bytes decompress).
func readDebDigests(ctx context.Context, r io.Reader, copyTo io.Writer, all, verifyData bool) (*debInfo, error) {
	hr := newHashingReader(ctx, r, copyTo, all)
	br := readerPool.Get().(*bufio.Reader)
	br.Reset(hr)
	defer func() {
		br.Reset(nil)
		readerPool.Put(br)
	}()
	control, err := parseAr(br, verifyData)
	if err != nil {
		return nil, err
	}
	// Anything after the members was read (and hashed) by parseAr, which
	// insists on a clean end of file; bufio may not have handed it all on.
	return &debInfo{
		control: control,
		size:    hr.n,
		md5:     hr.sum("md5"),
		sha1:    hr.sum("sha1"),
		sha256:  hr.sum("sha256"),
		sha512:  hr.sum("sha512"),
	}, nil
}

const (
	arMagic      = "!<arch>\n"
	arHeaderSize = 60
)

// parseAr walks the ar members of a .deb (deb(5)): debian-binary first,
// then control.tar[.gz|.xz|.zst], then data.tar*; members named "_..." are
// reserved for local use and skipped, as are members after data.tar.
func parseAr(br *bufio.Reader, verifyData bool) (Paragraph, error) {
	if err := readArMagic(br); err != nil {
		return nil, err
	}
	w := debWalk{verifyData: verifyData}
	var previous string
	index := 0
	for ; ; index++ {
		name, size, end, err := readArMember(br, index, previous)
		if err != nil {
			return nil, err
		}
		if end {
			break
		}
		previous = name
		body := &memberReader{r: br, n: size}
		if err := w.member(index, name, size, body); err != nil {
			return nil, err
		}
		if err := skipRest(br, body, name, size); err != nil {
			return nil, err
		}
	}
	switch {
	case index == 0:
		return nil, fmt.Errorf("%w: empty ar archive", ErrNotDeb)
	case w.control == nil:
		return nil, fmt.Errorf("%w: no control member", ErrTruncated)
	case !w.sawData:
		return nil, fmt.Errorf("%w: no data member", ErrTruncated)
	}
	return w.control, nil
}

func readArMagic(br *bufio.Reader) error {
	var magic [len(arMagic)]byte
	if _, err := io.ReadFull(br, magic[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("%w: too short for an ar archive", ErrNotDeb)
		}
		return err
	}
	if string(magic[:]) != arMagic {
		return fmt.Errorf("%w: no ar archive signature", ErrNotDeb)
	}
	return nil
}

// readArMember reads the header of member index (0-based), after the one
// named previous; end is true at the end of the archive.
func readArMember(br *bufio.Reader, index int, previous string) (name string, size int64, end bool, err error) {
	var hdr [arHeaderSize]byte
	n, err := io.ReadFull(br, hdr[:])
	if errors.Is(err, io.EOF) {
		return "", 0, true, nil
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		// A lone newline is the padding of an odd-sized last member.
		if n == 1 && hdr[0] == '\n' {
			return "", 0, true, nil
		}
		return "", 0, false, fmt.Errorf("%w: partial ar member header after %s", ErrTruncated, previous)
	}
	if err != nil {
		return "", 0, false, err
	}
	name, size, err = parseArHeader(hdr[:])
	if err != nil {
		if index == 0 {
			return "", 0, false, fmt.Errorf("%w: %v", ErrNotDeb, err)
		}
		return "", 0, false, fmt.Errorf("ar member %d: %w", index+1, err)
	}
	return name, size, false, nil
}

// debWalk is what parseAr has seen of a .deb's members so far.
type debWalk struct {
	verifyData bool
	control    Paragraph
	sawData    bool
}

// member reads member index, as far as it needs to.
func (w *debWalk) member(index int, name string, size int64, body *memberReader) error {
	switch {
	case index == 0:
		return readDebianBinary(name, size, body)
	case strings.HasPrefix(name, "_"), w.sawData:
		// Reserved for local use, or after data.tar: ignored by dpkg too.
	case strings.HasPrefix(name, "control.tar"):
		if w.control != nil {
			return fmt.Errorf("second control member %q", name)
		}
		if size > maxControlMember {
			return fmt.Errorf("control member %s is %d bytes, more than the %d allowed", name, size, maxControlMember)
		}
		control, err := readControlMember(name, body, size)
		if err != nil {
			// Decompressors report a short input in their own words;
			// what matters is that the file ended inside the member.
			if body.truncated {
				return fmt.Errorf("%w: in %s", ErrTruncated, name)
			}
			return fmt.Errorf("%s: %w", name, err)
		}
		w.control = control
	case strings.HasPrefix(name, "data.tar"):
		if w.control == nil {
			return fmt.Errorf("%s comes before the control member", name)
		}
		w.sawData = true
		if !w.verifyData {
			return nil
		}
		// apt checks only the whole file's digest, which a corrupt
		// member passes: dpkg would fail at install time, on the node.
		if err := verifyDataMember(name, body); err != nil {
			if body.truncated {
				return fmt.Errorf("%w: in %s", ErrTruncated, name)
			}
			return fmt.Errorf("%s is corrupt: %w", name, err)
		}
	default:
		return fmt.Errorf("unexpected ar member %q", name)
	}
	return nil
}

func readDebianBinary(name string, size int64, body *memberReader) error {
	if name != "debian-binary" {
		return fmt.Errorf("%w: first member is %q, not debian-binary", ErrNotDeb, name)
	}
	if size > maxDebianBinary {
		return fmt.Errorf("%w: debian-binary member of %d bytes", ErrNotDeb, size)
	}
	b, err := io.ReadAll(body)
	if body.truncated {
		return fmt.Errorf("%w: in debian-binary", ErrTruncated)
	}
	if err != nil {
		return err
	}
	if !strings.HasPrefix(string(b), "2.") {
		return fmt.Errorf("unsupported .deb format version %q", strings.TrimSpace(string(b)))
	}
	return nil
}

// skipRest skips what the member's reader left, and the padding to an even
// offset. Skipped bytes are still hashed on their way through.
func skipRest(br *bufio.Reader, body *memberReader, name string, size int64) error {
	if err := discard(br, body.n); err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("%w: in %s (%d of %d bytes missing)", ErrTruncated, name, body.n, size)
		}
		return err
	}
	if size%2 == 1 {
		if b, err := br.ReadByte(); err == nil && b != '\n' {
			return fmt.Errorf("bad padding after %s", name)
		} else if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
	}
	return nil
}

// parseArHeader returns the member name and size of a common-format ar
// header. Other header fields (times, owners, mode) do not matter here.
func parseArHeader(h []byte) (string, int64, error) {
	if string(h[58:60]) != "`\n" {
		return "", 0, errors.New("bad ar member header")
	}
	name := strings.TrimRight(string(h[0:16]), " ")
	// GNU ar ends names with a slash; dpkg accepts that too.
	name = strings.TrimSuffix(name, "/")
	if name == "" {
		return "", 0, errors.New("ar member without a name")
	}
	sizeField := strings.TrimRight(string(h[48:58]), " ")
	size, err := strconv.ParseInt(sizeField, 10, 64)
	if err != nil || size < 0 || sizeField == "" || sizeField[0] == '+' {
		return "", 0, fmt.Errorf("bad size %q in ar member header of %q", sizeField, name)
	}
	return name, size, nil
}

// discard reads and drops n bytes, which still pass through the hashes.
func discard(br *bufio.Reader, n int64) error {
	for n > 0 {
		chunk := n
		if chunk > 1<<30 {
			chunk = 1 << 30
		}
		k, err := br.Discard(int(chunk))
		n -= int64(k)
		if err != nil {
			return err
		}
	}
	return nil
}

// memberReader yields the n bytes of one ar member and notes whether the
// file ended before them.
type memberReader struct {
	r         io.Reader
	n         int64
	truncated bool
}

func (m *memberReader) Read(p []byte) (int, error) {
	if m.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > m.n {
		p = p[:m.n]
	}
	n, err := m.r.Read(p)
	m.n -= int64(n)
	if errors.Is(err, io.EOF) && m.n > 0 {
		m.truncated = true
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// errTooLarge marks input past one of the limits above.
var errTooLarge = errors.New("too large")

// cappedReader fails, rather than silently stopping, once more than n bytes
// have been read: a decompression bomb is an error, not a short file.
type cappedReader struct {
	r io.Reader
	n int64
}

func (c *cappedReader) Read(p []byte) (int, error) {
	if c.n <= 0 {
		return 0, fmt.Errorf("control member decompresses to more than %d bytes: %w", maxControlTar, errTooLarge)
	}
	if int64(len(p)) > c.n {
		p = p[:c.n]
	}
	n, err := c.r.Read(p)
	c.n -= int64(n)
	return n, err
}

// readControlMember decompresses a control.tar member of size bytes and
// parses the control file in it. r yields exactly the member's bytes.
func readControlMember(name string, r io.Reader, size int64) (Paragraph, error) {
	var tarStream io.Reader
	switch strings.TrimPrefix(name, "control.tar") {
	case "":
		tarStream = r
	case ".gz":
		zr, err := gzip.NewReader(r)
		if err != nil {
			return nil, err
		}
		defer zr.Close()
		tarStream = zr
	case ".xz":
		return readXZControl(r, size)
	case ".zst":
		zr, err := zstd.NewReader(r,
			zstd.WithDecoderConcurrency(1),
			zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxMemory(maxControlTar),
			zstd.WithDecoderMaxWindow(maxZstdWindow))
		if err != nil {
			return nil, err
		}
		defer zr.Close()
		tarStream = zr
	default:
		return nil, fmt.Errorf("unsupported control member compression %q", name)
	}
	return parseControlTar(tarStream)
}

// Dictionaries for control.tar.xz. Allocating (and zeroing) the 8 MiB that
// dpkg's xz -6 announces, for a member that is mostly a few KiB, was the
// largest cost of indexing after hashing. So a member small enough to keep
// in memory is first decoded with a 1 MiB dictionary, which suffices unless
// a match reaches back further than that, and decoded again with the full
// one if that attempt fails.
const (
	xzFirstDict = 1 << 20
	xzBufferMax = 4 << 20
)

func readXZControl(r io.Reader, size int64) (Paragraph, error) {
	decode := func(r io.Reader, dict int64) (Paragraph, error) {
		xr, err := newXZReader(r, dict)
		if err != nil {
			return nil, err
		}
		return parseControlTar(xr)
	}
	if size > xzBufferMax {
		return decode(r, maxXZDict)
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	p, err := decode(bytes.NewReader(data), xzFirstDict)
	if err == nil || errors.Is(err, errTooLarge) || errors.Is(err, errControl) {
		return p, err
	}
	return decode(bytes.NewReader(data), maxXZDict)
}

// parseControlTar reads a control.tar stream up to its control file and
// parses that.
func parseControlTar(r io.Reader) (Paragraph, error) {
	capped := &cappedReader{r: r, n: maxControlTar}
	tr := tar.NewReader(capped)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, errors.New("no control file in control member")
		}
		if err != nil {
			return nil, err
		}
		if strings.TrimPrefix(hdr.Name, "./") != "control" {
			continue
		}
		if hdr.Typeflag != tar.TypeReg {
			return nil, fmt.Errorf("control is not a regular file (tar type %q)", hdr.Typeflag)
		}
		if hdr.Size > maxControlFile {
			return nil, fmt.Errorf("control file of %d bytes, more than the %d allowed: %w", hdr.Size, maxControlFile, errTooLarge)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, err
		}
		p, err := ParseControl(b)
		if err != nil {
			return nil, err
		}
		// The rest of the member must decompress too (dpkg unpacks all
		// of it), up to the compression's own check at its end.
		for {
			if _, err := tr.Next(); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return nil, err
			}
		}
		if _, err := io.Copy(io.Discard, capped); err != nil {
			return nil, err
		}
		return p, nil
	}
}

// Bounds on what decompressing a data member may allocate. xz -9 and
// zstd --ultra -22 (without --long) stay within them.
const (
	maxDataXZDict     = 64 << 20
	maxDataZstdWindow = 128 << 20
)

// verifyDataMember decompresses a data.tar member to its end and walks
// its tar headers, so that a member dpkg could not unpack is refused here,
// not on the node. The compressed formats' own checks (gzip's CRC, xz's
// block checks, zstd's checksum when present) are verified on the way.
func verifyDataMember(name string, r io.Reader) error {
	var stream io.Reader
	switch strings.TrimPrefix(name, "data.tar") {
	case "":
		stream = r
	case ".gz":
		zr, err := gzip.NewReader(r)
		if err != nil {
			return err
		}
		defer zr.Close()
		stream = zr
	case ".xz":
		stream = &xzStreamReader{br: bufio.NewReader(r), dictLimit: maxDataXZDict}
	case ".zst":
		zr, err := zstd.NewReader(r,
			zstd.WithDecoderConcurrency(1),
			zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxWindow(maxDataZstdWindow))
		if err != nil {
			return err
		}
		defer zr.Close()
		stream = zr
	case ".bz2":
		stream = bzip2.NewReader(r)
	default:
		return fmt.Errorf("unsupported data member compression %q", name)
	}
	tr := tar.NewReader(stream)
	for {
		_, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("tar: %w", err)
		}
	}
	// The tar end marker may come before the end of the compressed
	// stream, whose checks come last.
	if _, err := io.Copy(io.Discard, stream); err != nil {
		return err
	}
	return nil
}

// xzStreamReader decompresses every block of one xz stream, verifying
// each block's check and the footer's magic. Unlike github.com/ulikunitz/
// xz's reader, it refuses a dictionary above dictLimit instead of
// allocating what a hostile block header asks for.
type xzStreamReader struct {
	br        *bufio.Reader
	dictLimit int64
	started   bool
	checkID   byte
	block     io.Reader      // the current block's LZMA2 stream
	counted   *countingBytes // its compressed bytes
	headerLen int64
	check     hash.Hash
	done      bool
}

// countingBytes counts the bytes read through it, for the block padding.
type countingBytes struct {
	r *bufio.Reader
	n int64
}

func (c *countingBytes) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func (c *countingBytes) ReadByte() (byte, error) {
	b, err := c.r.ReadByte()
	if err == nil {
		c.n++
	}
	return b, err
}

func (x *xzStreamReader) Read(p []byte) (int, error) {
	for {
		if x.done {
			return 0, io.EOF
		}
		if x.block == nil {
			if err := x.next(); err != nil {
				return 0, err
			}
			continue
		}
		n, err := x.block.Read(p)
		x.check.Write(p[:n])
		if errors.Is(err, io.EOF) {
			if err := x.endBlock(); err != nil {
				return n, err
			}
			err = nil
		}
		if n > 0 || err != nil {
			return n, unexpectedEOF(err)
		}
	}
}

func unexpectedEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// next reads the stream header if not yet read, then a block header (or
// the index, which ends the stream).
func (x *xzStreamReader) next() error {
	if !x.started {
		var sh [12]byte
		if _, err := io.ReadFull(x.br, sh[:]); err != nil {
			return fmt.Errorf("xz stream header: %w", unexpectedEOF(err))
		}
		if !bytes.Equal(sh[:6], []byte{0xfd, '7', 'z', 'X', 'Z', 0}) {
			return errors.New("not an xz stream")
		}
		if crc32.ChecksumIEEE(sh[6:8]) != binary.LittleEndian.Uint32(sh[8:12]) {
			return errors.New("xz stream header: bad CRC")
		}
		if sh[6] != 0 || sh[7] > 0x0f {
			return errors.New("xz stream header: reserved flags set")
		}
		switch sh[7] {
		case 0x00, 0x01, 0x04, 0x0a:
		default:
			return fmt.Errorf("xz: unsupported check type %#x", sh[7])
		}
		x.checkID, x.started = sh[7], true
	}
	first, err := x.br.ReadByte()
	if err != nil {
		return fmt.Errorf("xz block header: %w", unexpectedEOF(err))
	}
	if first == 0 {
		return x.end()
	}
	bh := make([]byte, (int(first)+1)*4)
	bh[0] = first
	if _, err := io.ReadFull(x.br, bh[1:]); err != nil {
		return fmt.Errorf("xz block header: %w", unexpectedEOF(err))
	}
	body, crc := bh[:len(bh)-4], bh[len(bh)-4:]
	if crc32.ChecksumIEEE(body) != binary.LittleEndian.Uint32(crc) {
		return errors.New("xz block header: bad CRC")
	}
	dict, err := parseXZBlockHeader(body)
	if err != nil {
		return err
	}
	if dict > x.dictLimit {
		return fmt.Errorf("xz: dictionary of %d bytes, more than the %d allowed", dict, x.dictLimit)
	}
	x.counted = &countingBytes{r: x.br}
	lr, err := lzma.Reader2Config{DictCap: int(max(dict, lzma.MinDictCap))}.NewReader2(x.counted)
	if err != nil {
		return fmt.Errorf("xz: %w", err)
	}
	x.block, x.headerLen = lr, int64(len(bh))
	switch x.checkID {
	case 0x01:
		x.check = crc32.NewIEEE()
	case 0x04:
		x.check = crc64.New(crc64.MakeTable(crc64.ECMA))
	case 0x0a:
		x.check = sha256.New()
	default:
		x.check = nopHash{}
	}
	return nil
}

// endBlock reads the block padding and verifies the block's check.
func (x *xzStreamReader) endBlock() error {
	pad := (4 - (x.headerLen+x.counted.n)%4) % 4
	var buf [32]byte
	if _, err := io.ReadFull(x.br, buf[:pad]); err != nil {
		return fmt.Errorf("xz block padding: %w", unexpectedEOF(err))
	}
	if !bytes.Equal(buf[:pad], make([]byte, pad)) {
		return errors.New("xz block padding: not zero")
	}
	sum := x.check.Sum(nil)
	if x.checkID == 0x04 || x.checkID == 0x01 {
		// CRC32 and CRC64 are stored little-endian; Sum is big-endian.
		slices.Reverse(sum)
	}
	got := buf[:len(sum)]
	if _, err := io.ReadFull(x.br, got); err != nil {
		return fmt.Errorf("xz block check: %w", unexpectedEOF(err))
	}
	if !bytes.Equal(got, sum) {
		return errors.New("xz block check does not match: the data is corrupt")
	}
	x.block = nil
	return nil
}

// end reads the index and the stream footer, and checks the footer: its
// CRC, its flags (the header's) and the index size it records. The
// index's records are not compared with the blocks, which were verified
// one by one.
func (x *xzStreamReader) end() error {
	rest, err := io.ReadAll(io.LimitReader(x.br, 64<<20))
	if err != nil {
		return err
	}
	rest = bytes.TrimRight(rest, "\x00") // stream padding, if any
	if len(rest) < 12 {
		return errors.New("xz: no stream footer")
	}
	f := rest[len(rest)-12:]
	switch {
	case string(f[10:]) != "YZ":
		return errors.New("xz: no stream footer")
	case crc32.ChecksumIEEE(f[4:10]) != binary.LittleEndian.Uint32(f[:4]):
		return errors.New("xz stream footer: bad CRC")
	case f[8] != 0 || f[9] != x.checkID:
		return errors.New("xz stream footer: flags differ from the header's")
	}
	// The index, with the indicator byte next already read.
	if index := int64(len(rest)-12) + 1; (int64(binary.LittleEndian.Uint32(f[4:8]))+1)*4 != index {
		return errors.New("xz stream footer: index size does not match")
	}
	x.done = true
	return nil
}

// nopHash is the check of an xz stream that has none.
type nopHash struct{}

func (nopHash) Write(p []byte) (int, error) { return len(p), nil }
func (nopHash) Sum(b []byte) []byte         { return b }
func (nopHash) Reset()                      {}
func (nopHash) Size() int                   { return 0 }
func (nopHash) BlockSize() int              { return 1 }

// maxZstdWindow bounds the history a zstd frame can make us allocate. The
// zstd format asks decoders to support 8 MiB; dpkg's default level needs 2.
const maxZstdWindow = 16 << 20
