package aptrepo

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func readDebBytes(b []byte) (*debInfo, error) {
	return readDeb(context.Background(), bytes.NewReader(b), nil)
}

func checkInfo(t *testing.T, deb []byte, info *debInfo, wantPackage string) {
	t.Helper()
	if got := info.control.Value("Package"); got != wantPackage {
		t.Errorf("Package = %q, want %q", got, wantPackage)
	}
	if info.size != int64(len(deb)) {
		t.Errorf("size = %d, want %d", info.size, len(deb))
	}
	s256 := sha256.Sum256(deb)
	s512 := sha512.Sum512(deb)
	if info.sha256 != hex.EncodeToString(s256[:]) || info.sha512 != hex.EncodeToString(s512[:]) {
		t.Errorf("digests do not match the file")
	}
	if len(info.md5) != 32 || len(info.sha1) != 40 {
		t.Errorf("md5 %q, sha1 %q: wrong lengths", info.md5, info.sha1)
	}
}

func TestReadDebCompressions(t *testing.T) {
	for _, comp := range []string{"", "gz", "xz", "zst"} {
		t.Run("go/"+comp, func(t *testing.T) {
			deb := debSpec{control: controlText("pkg-"+comp+"x", "1.0", "amd64", ""), comp: comp}.bytes(t)
			var copied bytes.Buffer
			info, err := readDeb(context.Background(), bytes.NewReader(deb), &copied)
			if err != nil {
				t.Fatal(err)
			}
			checkInfo(t, deb, info, "pkg-"+comp+"x")
			if !bytes.Equal(copied.Bytes(), deb) {
				t.Errorf("copy differs from the input")
			}
		})
	}
	// The same through the real dpkg-deb, in every compression it offers.
	for _, comp := range []string{"none", "gzip", "xz", "zstd"} {
		t.Run("dpkg-deb/"+comp, func(t *testing.T) {
			p := dpkgDeb(t, t.TempDir(), "x.deb", controlText("pkg-"+comp, "2:1.0-1", "all", "libc6 (>= 2.36)"), comp)
			deb := readFile(t, p)
			info, err := readDebBytes(deb)
			if err != nil {
				t.Fatal(err)
			}
			checkInfo(t, deb, info, "pkg-"+comp)
			if got := info.control.Value("Depends"); got != "libc6 (>= 2.36)" {
				t.Errorf("Depends = %q", got)
			}
		})
	}
}

// TestReadDebTruncated cuts a .deb at every length: each prefix must be
// refused as truncated (or, when too short for the ar signature, as not a
// .deb), never accepted and never panicking.
func TestReadDebTruncated(t *testing.T) {
	for _, comp := range []string{"", "gz", "xz", "zst"} {
		deb := debSpec{control: controlText("cut", "1", "all", ""), comp: comp}.bytes(t)
		for n := 0; n < len(deb); n++ {
			_, err := readDebBytes(deb[:n])
			if err == nil {
				t.Fatalf("%s: prefix of %d/%d bytes accepted", comp, n, len(deb))
			}
			if !errors.Is(err, ErrTruncated) && !(n < len(arMagic)+1 && errors.Is(err, ErrNotDeb)) {
				t.Fatalf("%s: prefix of %d/%d bytes: %v, want ErrTruncated", comp, n, len(deb), err)
			}
		}
	}
}

// xzWithDict returns an xz stream of data whose block header claims the
// given LZMA2 dictionary size code (40 is 4 GiB), CRC fixed up.
func xzWithDict(t *testing.T, data []byte, code byte) []byte {
	t.Helper()
	b := bytes.Clone(compress(t, "xz", data))
	hdrLen := (int(b[12]) + 1) * 4
	hdr := b[12 : 12+hdrLen]
	// Single LZMA2 filter with no optional sizes: flags, id 0x21, size 1, props.
	if hdr[1]&0xc3 != 0 || hdr[2] != 0x21 || hdr[3] != 1 {
		t.Fatalf("unexpected xz block header % x", hdr)
	}
	hdr[4] = code
	binary.LittleEndian.PutUint32(hdr[hdrLen-4:], crc32.ChecksumIEEE(hdr[:hdrLen-4]))
	return b
}

func TestReadDebHostile(t *testing.T) {
	good := controlText("hostile", "1", "all", "")
	ctlTar := tarBytes(t, "./control", good)
	dataMember := arMember{"data.tar.xz", []byte("not really xz, never read")}
	binary := arMember{"debian-binary", []byte("2.0\n")}
	bigHeader := func(name string, size string) []byte {
		b := arBytes(binary)
		h := []byte(strings.Repeat(" ", arHeaderSize))
		copy(h, name)
		copy(h[48:], size)
		copy(h[58:], "`\n")
		return append(b, h...)
	}
	bomb := func(comp string) []byte {
		// 70 MiB of zeros before the control file: tiny compressed.
		zeros := string(make([]byte, 70<<20))
		return arBytes(binary, arMember{"control.tar." + comp, compress(t, comp, tarBytes(t, "./zeros", zeros, "./control", good))}, dataMember)
	}

	tests := []struct {
		name    string
		deb     []byte
		wantErr string
		is      error
	}{
		{"empty", nil, "too short", ErrNotDeb},
		{"text", []byte("Package: foo\nVersion: 1\n"), "no ar archive signature", ErrNotDeb},
		{"ar without members", []byte(arMagic), "empty ar archive", ErrNotDeb},
		{"ar of something else", arBytes(arMember{"hello.o", []byte("x")}), "not debian-binary", ErrNotDeb},
		{"garbage header", append([]byte(arMagic), bytes.Repeat([]byte("x"), 60)...), "bad ar member header", ErrNotDeb},
		{"format 3.0", arBytes(arMember{"debian-binary", []byte("3.0\n")}), "unsupported .deb format version", nil},
		{"bad size", bigHeader("control.tar", "12ab"), "bad size", nil},
		{"negative size", bigHeader("control.tar", "-5"), "bad size", nil},
		{"control member claims 9 GB", bigHeader("control.tar.gz", "9000000000"), "more than the", nil},
		{"data member claims 9 GB", append(arBytes(binary, arMember{"control.tar", ctlTar}), bigHeader("data.tar", "9000000000")[len(arMagic)+60+4:]...), "", ErrTruncated},
		{"no control member", arBytes(binary, dataMember), "comes before the control member", nil},
		{"no data member", arBytes(binary, arMember{"control.tar", ctlTar}), "no data member", ErrTruncated},
		{"two control members", arBytes(binary, arMember{"control.tar", ctlTar}, arMember{"control.tar", ctlTar}, dataMember), "second control member", nil},
		{"unknown member", arBytes(binary, arMember{"evil", nil}, arMember{"control.tar", ctlTar}, dataMember), "unexpected ar member", nil},
		{"bzip2 control", arBytes(binary, arMember{"control.tar.bz2", []byte("BZh9")}, dataMember), "unsupported control member compression", nil},
		{"control.tar without control", arBytes(binary, arMember{"control.tar", tarBytes(t, "./md5sums", "")}, dataMember), "no control file", nil},
		{"control is a symlink", arBytes(binary, arMember{"control.tar", symlinkTar(t)}, dataMember), "not a regular file", nil},
		{"control file of 5 MiB", arBytes(binary, arMember{"control.tar", tarBytes(t, "./control", good+" "+strings.Repeat("x", 5<<20)+"\n")}, dataMember), "more than the", errTooLarge},
		{"two paragraphs", arBytes(binary, arMember{"control.tar", tarBytes(t, "./control", good+"\nPackage: other\n")}, dataMember), "more than one paragraph", errControl},
		{"gzip bomb", bomb("gz"), "decompresses to more than", errTooLarge},
		{"zstd bomb", bomb("zst"), "decompresses to more than", errTooLarge},
		{"xz bomb", bomb("xz"), "decompresses to more than", errTooLarge},
		{"not gzip", arBytes(binary, arMember{"control.tar.gz", []byte("plain text")}, dataMember), "gzip", nil},
		{"not xz", arBytes(binary, arMember{"control.tar.xz", []byte("plain text, long enough")}, dataMember), "not an xz stream", nil},
		{"zstd window of 2 GiB", arBytes(binary, arMember{"control.tar.zst", []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, 0xa8, 0x01, 0x00, 0x00}}, dataMember), "window", nil},
		{"bad padding", badPadding(), "bad padding", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			info, err := readDebBytes(tt.deb)
			if err == nil {
				t.Fatalf("accepted: %q", info.control)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %q is not %q", err, tt.is)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %q does not contain %q", err, tt.wantErr)
			}
		})
	}
}

func symlinkTar(t *testing.T) []byte {
	var buf bytes.Buffer
	tw := newTarWriter(&buf)
	tw.symlink(t, "./control", "/etc/passwd")
	return buf.Bytes()
}

// TestReadDebXZDictionary feeds a control.tar.xz whose header asks for a
// 4 GiB dictionary. The stream is small, so it must decode, and without
// allocating anything like the dictionary it claims.
func TestReadDebXZDictionary(t *testing.T) {
	ctl := tarBytes(t, "./control", controlText("bigdict", "1", "all", ""))
	deb := arBytes(arMember{"debian-binary", []byte("2.0\n")},
		arMember{"control.tar.xz", xzWithDict(t, ctl, 40)},
		arMember{"data.tar", nil})
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	info, err := readDebBytes(deb)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if info.control.Value("Package") != "bigdict" {
		t.Errorf("control = %q", info.control)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > xzFirstDict+4<<20 {
		t.Errorf("allocated %d MiB for a tiny control member", alloc>>20)
	}
}

// TestReadDebMembers checks the ar variants real tools write: GNU names
// ending in "/", "_"-prefixed members, members after data.tar, and an odd
// last member without its padding byte.
func TestReadDebMembers(t *testing.T) {
	ctl := arMember{"control.tar", tarBytes(t, "./control", controlText("members", "1", "all", ""))}
	data := tarBytes(t, "./usr/share/doc/members/README", "hello\n")
	// The data member is decompressed in full, so it must be real; one
	// of odd size, for the missing padding byte.
	var odd []byte
	for i := 0; len(odd)%2 == 0; i++ {
		odd = compress(t, "gz", tarBytes(t, "./usr/share/doc/members/README", strings.Repeat("x", i)))
	}
	tests := map[string][]byte{
		"gnu names": arBytes(arMember{"debian-binary/", []byte("2.0\n")},
			arMember{"control.tar/", ctl.data}, arMember{"data.tar.gz/", compress(t, "gz", data)}),
		"signature members": arBytes(arMember{"debian-binary", []byte("2.0\n")},
			arMember{"_gpgbuilder", []byte("sig")}, ctl, arMember{"data.tar", data}, arMember{"_gpgorigin", []byte("sig")}),
		"members after data": arBytes(arMember{"debian-binary", []byte("2.0\n")},
			ctl, arMember{"data.tar", data}, arMember{"future", []byte("y")}),
		"no final padding": bytes.TrimSuffix(arBytes(arMember{"debian-binary", []byte("2.0\n")},
			ctl, arMember{"data.tar.gz", odd}), []byte("\n")),
	}
	for name, deb := range tests {
		t.Run(name, func(t *testing.T) {
			info, err := readDebBytes(deb)
			if err != nil {
				t.Fatal(err)
			}
			checkInfo(t, deb, info, "members")
		})
	}
}

func TestReadDebCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	deb := debSpec{control: controlText("cancel", "1", "all", "")}.bytes(t)
	if _, err := readDeb(ctx, bytes.NewReader(deb), nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("readDeb with a cancelled context: %v", err)
	}
}

func TestFindDebs(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"b.deb", "a.deb", ".hidden.deb", "c.txt"} {
		os.WriteFile(filepath.Join(dir, n), nil, 0o644)
	}
	os.Mkdir(filepath.Join(dir, "d.deb"), 0o755)
	os.Symlink("a.deb", filepath.Join(dir, "e.deb"))
	got, err := FindDebs(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range got {
		names = append(names, filepath.Base(p))
	}
	if strings.Join(names, " ") != "a.deb b.deb e.deb" {
		t.Errorf("FindDebs = %q", names)
	}
}

func badPadding() []byte {
	b := arBytes(arMember{"debian-binary", []byte("2.0")})
	b[len(b)-1] = 'x'
	return b
}

// TestReadDebXZFarMatch: a control.tar.xz whose control file can only be
// reached through a match 1.5 MiB back, beyond the first dictionary tried,
// still reads.
func TestReadDebXZFarMatch(t *testing.T) {
	block := make([]byte, 3<<19)
	rand.NewChaCha8([32]byte{1}).Read(block)
	ctl := tarBytes(t, "./a", string(block), "./b", string(block), "./control", controlText("far", "1", "all", ""))
	xzData := compress(t, "xz", ctl)
	if len(xzData) > xzBufferMax || len(xzData) > 2<<20 {
		t.Fatalf("compressed to %d bytes; the test wants the second copy to be a match", len(xzData))
	}
	deb := arBytes(arMember{"debian-binary", []byte("2.0\n")}, arMember{"control.tar.xz", xzData}, arMember{"data.tar", nil})
	info, err := readDebBytes(deb)
	if err != nil {
		t.Fatal(err)
	}
	checkInfo(t, deb, info, "far")
	// And the first attempt alone does fail: the retry is what reads it.
	xr, err := newXZReader(bytes.NewReader(xzData), xzFirstDict)
	if err == nil {
		_, err = parseControlTar(xr)
	}
	if err == nil {
		t.Error("a 1 MiB dictionary decoded a match 1.5 MiB back")
	}
}
