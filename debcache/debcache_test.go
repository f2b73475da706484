package debcache

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func want(file string, data []byte) Want {
	sum := sha256.Sum256(data)
	return Want{URI: "http://mirror/pool/" + file, File: file, Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:])}
}

func TestParsePrintURIs(t *testing.T) {
	out := `'http://deb.example/debian/pool/main/h/hello/hello_2.10-3_amd64.deb' hello_2.10-3_amd64.deb 53000 MD5Sum:0123456789abcdef0123456789abcdef
'http://deb.example/debian/pool/main/a/attr/libattr1_2.5.2-3_amd64.deb' libattr1_1%3a2.5.2-3_amd64.deb 22000
'http://deb.example/debian/pool/main/o/odd/odd.tar' odd.tar 100
`
	ws, err := ParsePrintURIs(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 2 || ws[1].Name != "libattr1" || ws[1].Version != "1:2.5.2-3" || ws[0].Size != 53000 {
		t.Fatalf("got %+v", ws)
	}
	if args := strings.Join(ShowArgs(ws), " "); args != "hello=2.10-3 libattr1=1:2.5.2-3" {
		t.Errorf("show args %q", args)
	}
	show := "Package: hello\nVersion: 2.10-3\nFilename: pool/main/h/hello/hello_2.10-3_amd64.deb\nSize: 53000\nMD5sum: x\nSHA256: " + strings.Repeat("AB", 32) + "\n\n" +
		"Package: libattr1\nVersion: 1:2.5.2-3\nFilename: pool/main/a/attr/libattr1_2.5.2-3_amd64.deb\nSize: 999\nSHA256: " + strings.Repeat("cd", 32) + "\n"
	got := AddHashes(ws, show)
	// libattr1's record has another size: not the file apt fetches.
	if len(got) != 1 || got[0].Name != "hello" || got[0].SHA256 != strings.Repeat("ab", 32) {
		t.Errorf("AddHashes: %+v", got)
	}
	for _, bad := range []string{"Reading package lists...", "http://x a.deb 1"} {
		if _, err := ParsePrintURIs(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestAddHashesEscapedURI: apt writes a version's '+' as %2b (and ':' as
// %3a) in the URI, not in the index's Filename. The first line is real apt
// 2.6 output; missing it left every package of a Debian update uncached.
func TestAddHashesEscapedURI(t *testing.T) {
	out := `'http://deb.debian.org/debian/pool/main/g/glibc/libc6_2.36-9%2bdeb12u14_amd64.deb' libc6_2.36-9+deb12u14_amd64.deb 2759320 SHA256:ba4f88f73dbc3ae9055f3c20f4523bfdbaf1ad13ff95e258924f77d20b4fbedf
'http://deb.example/debian/pool/main/a/attr/libattr1_1%3a2.5.2-3_amd64.deb' libattr1_1%3a2.5.2-3_amd64.deb 22000
'http://deb.example/debian/pool/main/b/bad/bad_1%zz_amd64.deb' bad_1_amd64.deb 10
`
	ws, err := ParsePrintURIs(out)
	if err != nil {
		t.Fatal(err)
	}
	show := "Package: libc6\nVersion: 2.36-9+deb12u14\nFilename: pool/main/g/glibc/libc6_2.36-9+deb12u14_amd64.deb\nSize: 2759320\nSHA256: " + strings.Repeat("ab", 32) + "\n\n" +
		"Package: libattr1\nVersion: 1:2.5.2-3\nFilename: pool/main/a/attr/libattr1_1:2.5.2-3_amd64.deb\nSize: 22000\nSHA256: " + strings.Repeat("cd", 32) + "\n\n" +
		"Package: bad\nVersion: 1\nFilename: pool/main/b/bad/bad_1%zz_amd64.deb\nSize: 10\nSHA256: " + strings.Repeat("ef", 32) + "\n"
	got := AddHashes(ws, show)
	var names []string
	for _, w := range got {
		names = append(names, w.Name+"="+w.Version)
	}
	// bad's URI does not unescape: left to apt.
	if want := "libc6=2.36-9+deb12u14 libattr1=1:2.5.2-3"; strings.Join(names, " ") != want {
		t.Errorf("AddHashes kept %q, want %q", names, want)
	}
}

func TestSeedCollect(t *testing.T) {
	s := New(t.TempDir(), 0)
	archives := t.TempDir()
	a, b := []byte("package a"), []byte("package b, longer")
	wa, wb := want("a_1_amd64.deb", a), want("b_1_amd64.deb", b)
	wants := []Want{wa, wb}

	// Miss: nothing placed; apt downloads; both kept.
	if n, _, err := s.Seed(wants, archives); n != 0 || err != nil {
		t.Fatalf("empty store seeded %d, %v", n, err)
	}
	must(t, os.WriteFile(filepath.Join(archives, wa.File), a, 0o644))
	must(t, os.WriteFile(filepath.Join(archives, wb.File), b, 0o644))
	if n, err := s.Collect(wants, archives); n != 2 || err != nil {
		t.Fatalf("collect: %d, %v", n, err)
	}

	// Hit: a fresh archive directory gets both, byte for byte.
	fresh := t.TempDir()
	n, bytes, err := s.Seed(wants, fresh)
	if n != 2 || bytes != int64(len(a)+len(b)) || err != nil {
		t.Fatalf("seed: %d files, %d bytes, %v", n, bytes, err)
	}
	if got, _ := os.ReadFile(filepath.Join(fresh, wb.File)); string(got) != string(b) {
		t.Errorf("seeded %q", got)
	}

	// A damaged file in the store (same size, so apt would take it) is
	// never placed, and leaves the store.
	must(t, os.WriteFile(s.path(wa.SHA256), []byte("package A"), 0o644))
	other := t.TempDir()
	if n, _, err := s.Seed(wants, other); n != 1 || err != nil {
		t.Fatalf("seed with a damaged file: %d, %v", n, err)
	}
	if _, err := os.Stat(filepath.Join(other, wa.File)); !os.IsNotExist(err) {
		t.Errorf("the damaged file was placed: %v", err)
	}
	if _, err := os.Stat(s.path(wa.SHA256)); !os.IsNotExist(err) {
		t.Errorf("the damaged file is still in the store: %v", err)
	}

	// A download that is not what the index promised is not kept.
	must(t, os.WriteFile(filepath.Join(archives, wa.File), []byte("tampered"), 0o644))
	if n, err := s.Collect(wants, archives); n != 0 || err != nil {
		t.Errorf("collect of a tampered download: %d, %v", n, err)
	}
	// A file apt already has is left alone.
	must(t, os.WriteFile(filepath.Join(other, wa.File), a, 0o644))
	if n, _, _ := s.Seed([]Want{wa}, other); n != 0 {
		t.Errorf("seeded over apt's own file")
	}
	// Nothing but the store's own files.
	des, _ := os.ReadDir(s.Dir)
	for _, de := range des {
		if !strings.HasSuffix(de.Name(), ".deb") || strings.HasPrefix(de.Name(), ".") {
			t.Errorf("left in the store: %s", de.Name())
		}
	}
}

func TestPruneBound(t *testing.T) {
	s := New(t.TempDir(), 20)
	archives := t.TempDir()
	var wants []Want
	for i := 0; i < 4; i++ {
		data := []byte(fmt.Sprintf("package %d!", i)) // 10 bytes each
		w := want(fmt.Sprintf("p%d_1_all.deb", i), data)
		must(t, os.WriteFile(filepath.Join(archives, w.File), data, 0o644))
		wants = append(wants, w)
	}
	if _, err := s.Collect(wants, archives); err != nil {
		t.Fatal(err)
	}
	des, _ := os.ReadDir(s.Dir)
	if len(des) != 2 {
		t.Errorf("%d files kept under a 20-byte bound of 10-byte files; want 2", len(des))
	}
}

// TestConcurrentBuilds has builds collect and seed the same packages at
// once: every seeded file is whole and right.
func TestConcurrentBuilds(t *testing.T) {
	s := New(t.TempDir(), 0)
	var wants []Want
	var datas [][]byte
	for i := 0; i < 10; i++ {
		data := []byte(strings.Repeat(fmt.Sprint(i), 5000))
		wants = append(wants, want(fmt.Sprintf("p%d_1_all.deb", i), data))
		datas = append(datas, data)
	}
	var wg sync.WaitGroup
	for w := 0; w < 6; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dir := t.TempDir()
			if _, _, err := s.Seed(wants, dir); err != nil {
				t.Error(err)
				return
			}
			for i, w := range wants {
				p := filepath.Join(dir, w.File)
				if got, err := os.ReadFile(p); err == nil {
					if string(got) != string(datas[i]) {
						t.Errorf("seeded %s is torn or wrong", w.File)
					}
					continue
				}
				must(t, os.WriteFile(p, datas[i], 0o644)) // "apt downloads it"
			}
			if _, err := s.Collect(wants, dir); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
}

// TestRealAptPrintURIs checks the parser against the real apt-get: a
// package from a local file repository, with the hash apt will check.
func TestRealAptPrintURIs(t *testing.T) {
	for _, tool := range []string{"apt-get", "apt-cache", "dpkg-deb", "dpkg-scanpackages"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed (HOST_PACKAGES installs it): %v", tool, err)
		}
	}
	dir := t.TempDir()
	pkg := filepath.Join(dir, "src")
	must(t, os.MkdirAll(filepath.Join(pkg, "DEBIAN"), 0o755))
	must(t, os.WriteFile(filepath.Join(pkg, "DEBIAN", "control"), []byte("Package: podvm-probe\nVersion: 1:1.0-1\nArchitecture: all\nMaintainer: t <t@example.org>\nDescription: test\n"), 0o644))
	repo := filepath.Join(dir, "repo")
	must(t, os.MkdirAll(repo, 0o755))
	deb := filepath.Join(repo, "podvm-probe_1.0-1_all.deb")
	run(t, "", "dpkg-deb", "--root-owner-group", "--build", pkg, deb)
	packages := run(t, repo, "dpkg-scanpackages", "--multiversion", ".")
	must(t, os.WriteFile(filepath.Join(repo, "Packages"), []byte(packages), 0o644))
	root := filepath.Join(dir, "apt")
	for _, d := range []string{"etc/apt.conf.d", "etc/preferences.d", "state/lists/partial", "cache/archives/partial"} {
		must(t, os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	must(t, os.WriteFile(filepath.Join(root, "etc/sources.list"), []byte("deb [trusted=yes] file:"+repo+" ./\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(root, "state/status"), nil, 0o644))
	opts := []string{"-o", "Dir::Etc=" + root + "/etc", "-o", "Dir::Etc::main=/dev/null", "-o", "Dir::Etc::Parts=" + root + "/etc/apt.conf.d",
		"-o", "Dir::State=" + root + "/state", "-o", "Dir::State::status=" + root + "/state/status", "-o", "Dir::Cache=" + root + "/cache",
		"-o", "Debug::NoLocking=1", "-o", "APT::Sandbox::User=root"}
	run(t, "", "apt-get", append(opts, "update")...)
	out := run(t, "", "apt-get", append(opts, "install", "--print-uris", "-qq", "podvm-probe")...)
	ws, err := ParsePrintURIs(out)
	if err != nil {
		t.Fatal(err)
	}
	show := run(t, "", "apt-cache", append(opts, append([]string{"show"}, ShowArgs(ws)...)...)...)
	ws = AddHashes(ws, show)
	data, _ := os.ReadFile(deb)
	w := want("podvm-probe_1%3a1.0-1_all.deb", data)
	if len(ws) != 1 || ws[0].File != w.File || ws[0].SHA256 != w.SHA256 || ws[0].Size != w.Size {
		t.Errorf("apt-get --print-uris gave %+v from\n%s\nwant file %s, sha256 %s, size %d", ws, out, w.File, w.SHA256, w.Size)
	}
}

func run(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestLinksInTheImageAreNotFollowed: the archive directory is the image's,
// and links planted there must not reach files outside it.
func TestLinksInTheImageAreNotFollowed(t *testing.T) {
	s := New(t.TempDir(), 0)
	outside := filepath.Join(t.TempDir(), "host-file")
	must(t, os.WriteFile(outside, []byte("host data"), 0o600))
	data := []byte("package a")
	w := want("a_1_all.deb", data)
	src := t.TempDir()
	must(t, os.WriteFile(filepath.Join(src, w.File), data, 0o644))
	if n, err := s.Collect([]Want{w}, src); n != 1 || err != nil {
		t.Fatalf("collect: %d, %v", n, err)
	}

	archives := t.TempDir()
	must(t, os.Symlink(outside, filepath.Join(archives, w.File+".podvm-partial")))
	if n, _, err := s.Seed([]Want{w}, archives); n != 1 || err != nil {
		t.Fatalf("seed: %d, %v", n, err)
	}
	if got, _ := os.ReadFile(outside); string(got) != "host data" {
		t.Errorf("a planted link was followed: the host file now holds %q", got)
	}

	// A link where apt's download should be is not read into the cache,
	// even when its target has the wanted content.
	store := New(t.TempDir(), 0)
	link := t.TempDir()
	target := filepath.Join(t.TempDir(), "elsewhere")
	must(t, os.WriteFile(target, data, 0o644))
	must(t, os.Symlink(target, filepath.Join(link, w.File)))
	if n, err := store.Collect([]Want{w}, link); n != 0 || err != nil {
		t.Errorf("collect through a link: %d, %v", n, err)
	}
}

// TestSound: a .deb is remembered as sound only while the store holds it;
// Prune drops a marker with its .deb; a marker that is a link counts for
// nothing.
func TestSound(t *testing.T) {
	s := New(t.TempDir(), 0)
	archives := t.TempDir()
	a, b := []byte("package a"), []byte("package b")
	wa, wb := want("a_1_amd64.deb", a), want("b_1_amd64.deb", b)
	must(t, os.WriteFile(filepath.Join(archives, wa.File), a, 0o644))
	if _, err := s.Collect([]Want{wa}, archives); err != nil {
		t.Fatal(err)
	}
	v := s.Sound()
	if v.Has(wa.SHA256) {
		t.Fatal("sound before Add")
	}
	v.Add(wa.SHA256)
	v.Add(wb.SHA256) // not in the store: not recorded
	v.Add("../../x")
	if !v.Has(wa.SHA256) || v.Has(wb.SHA256) || v.Has("../../x") {
		t.Fatalf("Has: a %v, b %v", v.Has(wa.SHA256), v.Has(wb.SHA256))
	}
	if _, err := os.Lstat(filepath.Join(s.Dir, wb.SHA256+soundSuffix)); err == nil {
		t.Error("a marker was written for a .deb the store does not hold")
	}

	// The .deb goes (evicted, or removed by hand): so does its marker.
	must(t, os.Remove(filepath.Join(s.Dir, wa.SHA256+".deb")))
	if v.Has(wa.SHA256) {
		t.Error("sound without its .deb")
	}
	must(t, s.Prune())
	if _, err := os.Lstat(filepath.Join(s.Dir, wa.SHA256+soundSuffix)); err == nil {
		t.Error("Prune kept the marker of a .deb that is gone")
	}

	// A link in the marker's place is not a marker.
	must(t, os.WriteFile(filepath.Join(archives, wa.File), a, 0o644))
	if _, err := s.Collect([]Want{wa}, archives); err != nil {
		t.Fatal(err)
	}
	must(t, os.Symlink(filepath.Join(s.Dir, wa.SHA256+".deb"), filepath.Join(s.Dir, wa.SHA256+soundSuffix)))
	if v.Has(wa.SHA256) {
		t.Error("a link counted as a marker")
	}

	// Nor is a FIFO, and adding over one does not hang.
	must(t, os.Remove(filepath.Join(s.Dir, wa.SHA256+soundSuffix)))
	must(t, unix.Mkfifo(filepath.Join(s.Dir, wa.SHA256+soundSuffix), 0o644))
	done := make(chan struct{})
	go func() { v.Add(wa.SHA256); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Add hangs on a FIFO in the marker's place")
	}
	if v.Has(wa.SHA256) {
		t.Error("a FIFO counted as a marker")
	}
}
