package debcache

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// image is what a hostile image answers to the two apt queries Around
// makes.
type image struct {
	printURIs, show string
}

func (im image) query(cmd string) (string, error) {
	if strings.HasPrefix(cmd, "apt-cache show") {
		return im.show, nil
	}
	return im.printURIs, nil
}

// traversal is a SHA256 field of the right length that climbs from the
// store (<root>/debs/v1) to <root>/../victim.deb: slashes pad it to 64.
func traversal(t *testing.T) string {
	t.Helper()
	s := strings.Repeat("/", 64-len("../../../victim")) + "../../../victim"
	if len(s) != 64 {
		t.Fatalf("traversal of %d characters", len(s))
	}
	return s
}

// TestImageValuesNeverNameHostFiles: every value read from the image (the
// SHA256, file name, size and version apt prints) is checked before it
// becomes part of a host path, so a crafted one can neither read nor
// delete a host file outside the store.
func TestImageValuesNeverNameHostFiles(t *testing.T) {
	victimData := []byte("host file, not a package") // not what any hash promises
	good := []byte("package a")
	goodSum := sha256.Sum256(good)
	tests := []struct {
		name       string
		printURIs  string
		show       string
		wantSeeded int
	}{
		{
			name:      "SHA256 that climbs out of the store",
			printURIs: fmt.Sprintf("'http://m/pool/a_1_all.deb' a_1_all.deb %d\n", len(victimData)),
			show:      fmt.Sprintf("Package: a\nFilename: pool/a_1_all.deb\nSize: %d\nSHA256: %s\n", len(victimData), traversal(t)),
		},
		{
			name:      "SHA256 of 64 characters that are not hex",
			printURIs: fmt.Sprintf("'http://m/pool/a_1_all.deb' a_1_all.deb %d\n", len(victimData)),
			show:      fmt.Sprintf("Package: a\nFilename: pool/a_1_all.deb\nSize: %d\nSHA256: %s\n", len(victimData), strings.Repeat("zz", 32)),
		},
		{
			name:       "upper-case SHA256 of a stored package",
			printURIs:  fmt.Sprintf("'http://m/pool/a_1_all.deb' a_1_all.deb %d\n", len(good)),
			show:       fmt.Sprintf("Package: a\nFilename: pool/a_1_all.deb\nSize: %d\nSHA256: %s\n", len(good), strings.ToUpper(hex.EncodeToString(goodSum[:]))),
			wantSeeded: 1,
		},
		{
			name:      "file name that is a dot-dot",
			printURIs: fmt.Sprintf("'http://m/pool/a_1_all.deb' .._1_all.deb %d\n", len(good)),
			show:      fmt.Sprintf("Package: a\nFilename: pool/a_1_all.deb\nSize: %d\nSHA256: %x\n", len(good), goodSum),
		},
		{
			name:      "size that overflows",
			printURIs: "'http://m/pool/a_1_all.deb' a_1_all.deb 99999999999999999999999\n",
			show:      fmt.Sprintf("Package: a\nFilename: pool/a_1_all.deb\nSize: 99999999999999999999999\nSHA256: %x\n", goodSum),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := t.TempDir()
			root := filepath.Join(base, "cache")
			victim := filepath.Join(base, "victim.deb")
			must(t, os.WriteFile(victim, victimData, 0o644))
			s := New(root, 0)
			// The store holds the good package, so a hit is possible.
			src := t.TempDir()
			w := want("a_1_all.deb", good)
			must(t, os.WriteFile(filepath.Join(src, w.File), good, 0o644))
			if n, err := s.Collect([]Want{w}, src); n != 1 || err != nil {
				t.Fatalf("collect: %d, %v", n, err)
			}

			archives := t.TempDir()
			var said []string
			im := image{tt.printURIs, tt.show}
			err := s.Around(im.query, "apt-get install a", func() (string, error) { return archives, nil },
				func() error { return nil }, func(s string) { said = append(said, s) })
			if err != nil {
				t.Fatal(err)
			}
			if got, err := os.ReadFile(victim); err != nil || string(got) != string(victimData) {
				t.Fatalf("the host file outside the cache was removed or changed: %q, %v (said %q)", got, err, said)
			}
			des, err := os.ReadDir(archives)
			must(t, err)
			if len(des) != tt.wantSeeded {
				t.Errorf("seeded %d files into the image, want %d (said %q)", len(des), tt.wantSeeded, said)
			}
			for _, de := range des {
				if got, _ := os.ReadFile(filepath.Join(archives, de.Name())); string(got) != string(good) {
					t.Errorf("seeded %s with %q", de.Name(), got)
				}
			}
		})
	}
}

// TestSeedCollectRefuseBadWants: Seed and Collect are exported, so they
// check what they are given themselves.
func TestSeedCollectRefuseBadWants(t *testing.T) {
	base := t.TempDir()
	victim := filepath.Join(base, "victim.deb")
	victimData := []byte("host file")
	must(t, os.WriteFile(victim, victimData, 0o644))
	s := New(filepath.Join(base, "cache"), 0)
	bad := []Want{
		{URI: "http://m/a_1_all.deb", File: "a_1_all.deb", Size: int64(len(victimData)), SHA256: traversal(t)},
		{URI: "http://m/a_1_all.deb", File: "../victim.deb", Size: int64(len(victimData)), SHA256: strings.Repeat("a", 64)},
		{URI: "http://m/a_1_all.deb", File: "a_1_all.deb", Size: -1, SHA256: strings.Repeat("a", 64)},
	}
	archives := t.TempDir()
	must(t, os.WriteFile(filepath.Join(archives, "a_1_all.deb"), victimData, 0o644))
	if _, err := s.Collect(bad, archives); err != nil {
		t.Fatal(err)
	}
	if n, _, err := s.Seed(bad, t.TempDir()); n != 0 || err != nil {
		t.Errorf("seeded %d, %v", n, err)
	}
	if got, err := os.ReadFile(victim); err != nil || string(got) != string(victimData) {
		t.Fatalf("the host file was removed or changed: %q, %v", got, err)
	}
	des, _ := os.ReadDir(s.Dir)
	if len(des) != 0 {
		t.Errorf("the store kept %d files for bad wants", len(des))
	}
}

// TestCollectDoesNotWaitOnAFIFO: a FIFO where apt's download should be
// must not hang the build.
func TestCollectDoesNotWaitOnAFIFO(t *testing.T) {
	s := New(t.TempDir(), 0)
	w := want("a_1_all.deb", []byte("package a"))
	archives := t.TempDir()
	must(t, syscall.Mkfifo(filepath.Join(archives, w.File), 0o644))
	done := make(chan error, 1)
	go func() {
		_, err := s.Collect([]Want{w}, archives)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("collect: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Collect waits on a FIFO in the image")
	}
}

// TestUntrustedStoreLevels: the store shares the module cache's rules:
// every level from the cache root down is checked, and nothing is read
// from or written to a store another user could change.
func TestUntrustedStoreLevels(t *testing.T) {
	for _, level := range []string{".", "debs", "debs/" + layout} {
		t.Run(level, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "cache")
			s := New(root, 0)
			data := []byte("package a")
			w := want("a_1_all.deb", data)
			src := t.TempDir()
			must(t, os.WriteFile(filepath.Join(src, w.File), data, 0o644))
			if n, err := s.Collect([]Want{w}, src); n != 1 || err != nil {
				t.Fatalf("collect: %d, %v", n, err)
			}
			must(t, os.Chmod(filepath.Join(root, level), 0o777))
			archives := t.TempDir()
			if n, _, err := s.Seed([]Want{w}, archives); n != 0 || err == nil || !strings.Contains(err.Error(), "writable by group or others") {
				t.Errorf("seed from a store others can write: %d, %v", n, err)
			}
			if _, err := os.Lstat(filepath.Join(archives, w.File)); err == nil {
				t.Errorf("a file from an untrusted store reached the image")
			}
			if _, err := s.Collect([]Want{w}, src); err == nil {
				t.Errorf("collect into a store others can write: no error")
			}
		})
	}
}

// TestStoreLinkIsNotFollowed: a stored file that is a link is refused and
// removed as a link; its target stays.
func TestStoreLinkIsNotFollowed(t *testing.T) {
	base := t.TempDir()
	s := New(filepath.Join(base, "cache"), 0)
	data := []byte("package a")
	w := want("a_1_all.deb", data)
	target := filepath.Join(base, "elsewhere.deb")
	must(t, os.WriteFile(target, data, 0o644))
	must(t, os.MkdirAll(s.Dir, 0o755))
	must(t, os.Symlink(target, s.path(w.SHA256)))
	archives := t.TempDir()
	if n, _, _ := s.Seed([]Want{w}, archives); n != 0 {
		t.Errorf("seeded through a link in the store")
	}
	if _, err := os.Lstat(s.path(w.SHA256)); err == nil {
		t.Errorf("the link stayed in the store")
	}
	if got, err := os.ReadFile(target); err != nil || string(got) != string(data) {
		t.Errorf("the link's target was touched: %q, %v", got, err)
	}
}
