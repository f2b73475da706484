package aptrepo

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
