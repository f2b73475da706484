package aptrepo

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// TestReadDebCorruptData: a .deb whose data member does not decompress
// to its end, or fails its compression's check, is refused, naming the
// member; Build names the file. dpkg would fail on it only on the node.
func TestReadDebCorruptData(t *testing.T) {
	payload := tarBytes(t, "./usr/share/doc/x/README", strings.Repeat("hello, corrupt world\n", 4000))
	ctl := compress(t, "gz", tarBytes(t, "./control", controlText("x", "1", "all", "")))
	deb := func(name string, data []byte) []byte {
		return arBytes(arMember{"debian-binary", []byte("2.0\n")}, arMember{"control.tar.gz", ctl}, arMember{name, data})
	}
	flip := func(b []byte, at int) []byte {
		c := slices.Clone(b)
		c[at] ^= 0x55
		return c
	}
	for _, comp := range []string{"", "gz", "xz", "zst"} {
		name := "data.tar"
		if comp != "" {
			name += "." + comp
		}
		good := compress(t, comp, payload)
		if _, err := readDebBytes(deb(name, good)); err != nil {
			t.Fatalf("%s: a good member refused: %v", name, err)
		}
		bad := map[string][]byte{
			"cut in half":      good[:len(good)/2],
			"garbage":          bytes.Repeat([]byte("garbage!"), 64),
			"last bytes wrong": flip(good, len(good)-6),
		}
		if comp == "" {
			// A plain tar has checksums in its headers only.
			bad["last bytes wrong"] = flip(good, 148)
		} else {
			bad["middle byte wrong"] = flip(good, len(good)/2)
		}
		for what, data := range bad {
			_, err := readDebBytes(deb(name, data))
			if err == nil || !strings.Contains(err.Error(), name) {
				t.Errorf("%s, %s: got %v, want it refused naming %s", name, what, err, name)
			}
		}
	}
	// The control member is read to its end as well.
	for _, comp := range []string{"gz", "zst"} {
		good := compress(t, comp, tarBytes(t, "./control", controlText("x", "1", "all", ""), "./md5sums", strings.Repeat("0", 5000)))
		data := arMember{"data.tar", payload}
		for what, member := range map[string][]byte{"cut short": good[:len(good)-8], "last bytes wrong": flip(good, len(good)-3)} {
			_, err := readDebBytes(arBytes(arMember{"debian-binary", []byte("2.0\n")}, arMember{"control.tar." + comp, member}, data))
			if err == nil {
				t.Errorf("control.tar.%s, %s: accepted", comp, what)
			}
		}
	}
	// An xz block asking for a 1.5 GiB dictionary is refused, not allocated.
	huge := xzWithDict(t, payload, 38)
	if _, err := readDebBytes(deb("data.tar.xz", huge)); err == nil || !strings.Contains(err.Error(), "dictionary") {
		t.Errorf("xz dictionary of 1.5 GiB: %v", err)
	}

	// Build names the file.
	dir := t.TempDir()
	smallRepoDebs(t, dir)
	p := filepath.Join(dir, "broken_1_all.deb")
	if err := os.WriteFile(p, deb("data.tar.xz", flip(compress(t, "xz", payload), 100)), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Build(context.Background(), Options{DebDir: dir, Out: filepath.Join(t.TempDir(), "r"), Date: testDate, Signer: testSigner(t, testDate)})
	if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "data.tar.xz is corrupt") {
		t.Errorf("Build with a corrupt data member: %v", err)
	}
}

// memo is an in-memory Checked.
type memo struct {
	mu  sync.Mutex
	set map[string]bool
}

func (m *memo) Has(s string) bool { m.mu.Lock(); defer m.mu.Unlock(); return m.set[s] }
func (m *memo) Add(s string)      { m.mu.Lock(); defer m.mu.Unlock(); m.set[s] = true }

// TestBuildChecked: with Options.Checked, a .deb's data member is
// decompressed once; the files that passed are remembered by SHA256, a
// corrupt one is not, and a remembered digest skips the decompression
// (shown with a corrupt member that is indexed once its digest is known).
func TestBuildChecked(t *testing.T) {
	dir := t.TempDir()
	smallRepoDebs(t, dir)
	good, err := FindDebs(dir)
	if err != nil || len(good) == 0 {
		t.Fatalf("FindDebs: %v, %v", good, err)
	}
	payload := tarBytes(t, "./usr/share/doc/x/README", strings.Repeat("hello\n", 4000))
	data := compress(t, "xz", payload)
	data[len(data)/2] ^= 0x55
	ctl := compress(t, "gz", tarBytes(t, "./control", controlText("broken", "1", "all", "")))
	broken := filepath.Join(dir, "broken_1_all.deb")
	if err := os.WriteFile(broken, arBytes(arMember{"debian-binary", []byte("2.0\n")}, arMember{"control.tar.gz", ctl}, arMember{"data.tar.xz", data}), 0o644); err != nil {
		t.Fatal(err)
	}
	sum := func(p string) string {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		s, err := fileSHA256(f)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	var res *Result
	build := func(m *memo) error {
		var err error
		res, err = Build(context.Background(), Options{DebDir: dir, Out: filepath.Join(t.TempDir(), "r"), Date: testDate, Signer: testSigner(t, testDate), Checked: m})
		return err
	}
	m := &memo{set: map[string]bool{}}
	if err := build(m); err == nil || !strings.Contains(err.Error(), "data.tar.xz is corrupt") {
		t.Fatalf("Build with a corrupt member and an empty memo: %v", err)
	}
	for _, p := range good {
		if !m.Has(sum(p)) {
			t.Errorf("%s checked but not remembered", p)
		}
	}
	if m.Has(sum(broken)) {
		t.Error("the corrupt .deb was remembered as sound")
	}
	m.Add(sum(broken))
	if err := build(m); err != nil {
		t.Fatalf("a remembered digest was decompressed again: %v", err)
	}
	if res.KnownSound != len(good)+1 {
		t.Errorf("KnownSound %d, want %d", res.KnownSound, len(good)+1)
	}
}
