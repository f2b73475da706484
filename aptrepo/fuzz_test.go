package aptrepo

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// fuzzSeedDebs returns seed .debs: Go-made ones in every control
// compression, dpkg-deb-made ones if dpkg-deb is installed, and the
// control members of the real Debian .debs in the test cache (see
// debianDebs), if any. Nothing is downloaded here.
func fuzzSeedDebs(f *testing.F) [][]byte {
	var seeds [][]byte
	for _, comp := range []string{"", "gz", "xz", "zst"} {
		seeds = append(seeds, debSpec{control: controlText("seed", "1:2.3-4", "amd64", "libc6 (>= 2.36), a | b"), comp: comp}.bytes(f))
	}
	if _, err := exec.LookPath("dpkg-deb"); err == nil {
		dir := f.TempDir()
		for _, comp := range []string{"none", "gzip", "xz", "zstd"} {
			p := dpkgDeb(f, dir, comp+".deb", controlText("seed-"+comp, "1", "all", ""), comp)
			seeds = append(seeds, readFile(f, p))
		}
	}
	// Real Debian control members, in small .debs around them: the
	// fuzzer mutates small inputs far more effectively than whole debs.
	real, _ := filepath.Glob(filepath.Join(cacheDir(f), "debs", "*", "*.deb"))
	for _, p := range real {
		fh, err := os.Open(p)
		if err != nil {
			continue
		}
		head := make([]byte, 256<<10)
		n, _ := io.ReadFull(fh, head)
		fh.Close()
		for name, data := range arMembers(head[:n]) {
			if strings.HasPrefix(name, "control.tar") && len(data) <= 32<<10 {
				seeds = append(seeds, arBytes(arMember{"debian-binary", []byte("2.0\n")},
					arMember{name, data}, arMember{"data.tar.xz", nil}))
			}
		}
	}
	return seeds
}

// FuzzReadDeb feeds arbitrary bytes to the .deb reader: it must never
// panic or allocate without bound, and whatever it accepts must be
// consistent with the input.
func FuzzReadDeb(f *testing.F) {
	for _, s := range fuzzSeedDebs(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		info, err := readDeb(context.Background(), bytes.NewReader(b), nil)
		if err != nil {
			return
		}
		sum := sha256.Sum256(b)
		if info.size != int64(len(b)) || info.sha256 != hex.EncodeToString(sum[:]) {
			t.Fatalf("accepted input of %d bytes, reported size %d, sha256 %s", len(b), info.size, info.sha256)
		}
		if len(info.control) == 0 {
			t.Fatal("accepted a .deb with an empty control paragraph")
		}
	})
}

// arMembers splits a well-formed ar archive, for seeding.
func arMembers(b []byte) map[string][]byte {
	m := make(map[string][]byte)
	b = bytes.TrimPrefix(b, []byte(arMagic))
	for len(b) >= arHeaderSize {
		name := strings.TrimSuffix(strings.TrimSpace(string(b[:16])), "/")
		size, err := strconv.Atoi(strings.TrimSpace(string(b[48:58])))
		if err != nil || size > len(b)-arHeaderSize {
			break
		}
		m[name] = b[arHeaderSize : arHeaderSize+size]
		b = b[arHeaderSize+size+size%2:]
	}
	return m
}

var controlMemberNames = []string{"control.tar", "control.tar.gz", "control.tar.xz", "control.tar.zst"}

// FuzzControlMember fuzzes the decompressors and the tar reader directly,
// without ar framing around them, so mutations reach deeper.
func FuzzControlMember(f *testing.F) {
	for _, deb := range fuzzSeedDebs(f) {
		for name, data := range arMembers(deb) {
			for i, n := range controlMemberNames {
				if n == name {
					f.Add(uint8(i), data)
				}
			}
		}
	}
	f.Fuzz(func(t *testing.T, kind uint8, data []byte) {
		name := controlMemberNames[int(kind)%len(controlMemberNames)]
		p, err := readControlMember(name, bytes.NewReader(data), int64(len(data)))
		if err == nil && len(p) == 0 {
			t.Fatal("accepted an empty control paragraph")
		}
	})
}

// FuzzParseControl: whatever parses must render back to text that parses
// to the same paragraph, and must not let a field smuggle in a line that
// starts a new field or paragraph.
func FuzzParseControl(f *testing.F) {
	f.Add([]byte(controlText("a1", "1", "all", "b (>= 1) | c")))
	f.Add([]byte("Package: a\nDescription:\n .\n x\n\n\n"))
	f.Add([]byte("# c\nA: b\n\tc\n"))
	for _, deb := range fuzzSeedDebs(f) {
		if info, err := readDeb(context.Background(), bytes.NewReader(deb), nil); err == nil {
			f.Add(info.control.appendTo(nil))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParseControl(b)
		if err != nil {
			return
		}
		text := p.appendTo(nil)
		q, err := ParseControl(text)
		if err != nil {
			t.Fatalf("rendered paragraph %q does not parse: %v", text, err)
		}
		if len(q) != len(p) {
			t.Fatalf("round trip: %d fields, then %d", len(p), len(q))
		}
		for i := range p {
			if p[i] != q[i] {
				t.Fatalf("round trip: %q became %q", p[i], q[i])
			}
		}
		if bytes.Contains(text, []byte("\n\n")) {
			t.Fatalf("rendered paragraph %q holds a blank line", text)
		}
	})
}
