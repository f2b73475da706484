package aptrepo

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// smallRepoDebs writes a set of Go-made .debs into dir: a depends on b,
// in every control.tar compression.
func smallRepoDebs(t *testing.T, dir string) []string {
	t.Helper()
	return []string{
		writeDeb(t, dir, "pkg-a_1.0_amd64.deb", debSpec{control: controlText("pkg-a", "1.0", "amd64", "pkg-b (>= 1.0)"), comp: "xz"}),
		writeDeb(t, dir, "pkg-b_1.0_all.deb", debSpec{control: controlText("pkg-b", "1.0", "all", ""), comp: "zst"}),
		writeDeb(t, dir, "pkg-c_2:3.1-1_amd64.deb", debSpec{control: controlText("pkg-c", "2:3.1-1", "amd64", ""), comp: "gz"}),
		writeDeb(t, dir, "pkg-d_0.1_all.deb", debSpec{control: controlText("pkg-d", "0.1", "all", ""), comp: ""}),
	}
}

var indexNames = []string{PackagesFile, PackagesGzFile, ReleaseFile, InReleaseFile, ReleaseGPGFile, KeyringFile, ArmoredKeyringFile}

// checkRepo checks the files of a built repository and its consistency:
// every index listed in Release with matching sizes and digests, every
// package in Packages present with matching size and SHA256.
func checkRepo(t *testing.T, dir string, res *Result, wantDebs bool) {
	t.Helper()
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != dirMode {
		t.Errorf("%s: mode %v, want %v", dir, fi.Mode().Perm(), os.FileMode(dirMode))
	}
	for _, n := range indexNames {
		fi, err := os.Stat(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != fileMode {
			t.Errorf("%s: mode %v, want 0644", n, fi.Mode().Perm())
		}
	}
	release := string(readFile(t, filepath.Join(dir, ReleaseFile)))
	for _, bad := range []string{"Valid-Until", "Components", "Suite", "Codename"} {
		if strings.Contains(release, bad+":") {
			t.Errorf("Release has %s:\n%s", bad, release)
		}
	}
	if !regexp.MustCompile(`(?m)^Date: (Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d\d (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{4} \d\d:\d\d:\d\d UTC$`).MatchString(release) {
		t.Errorf("Release Date is not RFC 2822 in UTC:\n%s", release)
	}
	for _, n := range []string{PackagesFile, PackagesGzFile} {
		b := readFile(t, filepath.Join(dir, n))
		sum := sha256.Sum256(b)
		line := fmt.Sprintf(" %s %d %s\n", hex.EncodeToString(sum[:]), len(b), n)
		if !strings.Contains(release, "SHA256:\n") || !strings.Contains(release, line) {
			t.Errorf("Release lacks %q", line)
		}
	}
	packages := readFile(t, filepath.Join(dir, PackagesFile))
	zr, err := gzip.NewReader(bytes.NewReader(readFile(t, filepath.Join(dir, PackagesGzFile))))
	if err != nil {
		t.Fatal(err)
	}
	unz, _ := io.ReadAll(zr)
	if !bytes.Equal(unz, packages) {
		t.Error("Packages.gz does not hold Packages")
	}
	if zr.Header.Name != "" || !zr.Header.ModTime.IsZero() {
		t.Errorf("Packages.gz header has name %q, time %v", zr.Header.Name, zr.Header.ModTime)
	}
	stanzas := strings.Split(strings.TrimSuffix(string(packages), "\n"), "\n\n")
	if len(stanzas) != len(res.Packages) {
		t.Fatalf("Packages has %d stanzas, result %d packages", len(stanzas), len(res.Packages))
	}
	for i, st := range stanzas {
		p, err := ParseControl([]byte(st))
		if err != nil {
			t.Fatalf("stanza %d: %v", i, err)
		}
		want := res.Packages[i]
		if p[0].Name != "Package" || p.Value("Package") != want.Name || p.Value("Version") != want.Version ||
			p.Value("Filename") != want.Filename || p.Value("SHA256") != want.SHA256 || p.Value("Size") != fmt.Sprint(want.Size) {
			t.Errorf("stanza %d = %q, want %+v", i, st, want)
		}
		if !wantDebs {
			continue
		}
		deb := filepath.Join(dir, want.Filename)
		b := readFile(t, deb)
		sum := sha256.Sum256(b)
		if hex.EncodeToString(sum[:]) != want.SHA256 || int64(len(b)) != want.Size {
			t.Errorf("%s does not match Packages", deb)
		}
		if fi, _ := os.Stat(deb); fi.Mode().Perm() != fileMode {
			t.Errorf("%s: mode %v", deb, fi.Mode().Perm())
		}
	}
	if !sort.SliceIsSorted(res.Packages, func(i, j int) bool { return res.Packages[i].Name < res.Packages[j].Name }) {
		t.Error("packages not sorted")
	}
}

// leftovers lists hidden entries in dir: staging directories that a build
// failed to remove.
func leftovers(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var hidden []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			hidden = append(hidden, e.Name())
		}
	}
	return hidden
}

func TestBuildPlacements(t *testing.T) {
	// Whatever the umask, the repository is world-readable.
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)

	for _, placement := range []Placement{Copy, HardLink, IndexOnly} {
		t.Run(placement.String(), func(t *testing.T) {
			in := t.TempDir()
			debs := smallRepoDebs(t, in)
			for _, p := range debs {
				os.Chmod(p, 0o644)
			}
			// One source that may not be linked as it is: mode 0600.
			os.Chmod(debs[0], 0o600)
			// One that is a symbolic link to a .deb elsewhere.
			elsewhere := writeDeb(t, t.TempDir(), "x.deb", debSpec{control: controlText("pkg-link", "1", "all", "")})
			os.Chmod(elsewhere, 0o644)
			link := filepath.Join(in, "pkg-link_1_all.deb")
			if err := os.Symlink(elsewhere, link); err != nil {
				t.Fatal(err)
			}
			debs = append(debs, link)
			parent := t.TempDir()
			out := filepath.Join(parent, "repo")
			res, err := Build(context.Background(), Options{
				DebDir: in, Out: out, Placement: placement,
				Origin: "podvm", Label: "test", Date: testDate, Signer: testSigner(t, testDate),
			})
			if err != nil {
				t.Fatal(err)
			}
			checkRepo(t, out, res, placement != IndexOnly)
			if got := leftovers(t, parent); len(got) > 0 {
				t.Errorf("left behind: %v", got)
			}
			if placement != IndexOnly {
				fi, err := os.Lstat(filepath.Join(out, filepath.Base(link)))
				if err != nil || !fi.Mode().IsRegular() {
					t.Errorf("symbolic link input: %v, %v", fi.Mode(), err)
				}
			}
			if len(res.Packages) != 5 || res.TotalBytes == 0 || res.Fingerprint == "" || res.Dir != out {
				t.Errorf("result %+v", res)
			}
			a := res.Packages[0]
			if a.Name != "pkg-a" || a.Depends != "pkg-b (>= 1.0)" || a.Architecture != "amd64" || a.Source != debs[0] {
				t.Errorf("first package %+v", a)
			}
			release := string(readFile(t, filepath.Join(out, ReleaseFile)))
			if !strings.Contains(release, "Origin: podvm\nLabel: test\nDate: Wed, 01 May 2024 12:00:00 UTC\nArchitectures: all amd64\n") {
				t.Errorf("Release head:\n%s", release)
			}
			for i, src := range debs {
				dst := filepath.Join(out, filepath.Base(src))
				if i == len(debs)-1 {
					continue // the symbolic link, checked below
				}
				fi, err := os.Stat(dst)
				switch {
				case placement == IndexOnly:
					if err == nil {
						t.Errorf("index-only build wrote %s", dst)
					}
				case err != nil:
					t.Error(err)
				default:
					sfi, _ := os.Stat(src)
					linked := os.SameFile(fi, sfi)
					if want := placement == HardLink && i != 0; linked != want {
						t.Errorf("%s: linked %v, want %v", dst, linked, want)
					}
				}
			}
		})
	}
}

func TestBuildInPlace(t *testing.T) {
	dir := t.TempDir()
	debs := smallRepoDebs(t, dir)
	debBytes := readFile(t, debs[0])
	signer := testSigner(t, testDate)
	opts := Options{DebDir: dir, Out: dir, Placement: IndexOnly, Date: testDate, Signer: signer}
	res, err := Build(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	checkRepo(t, dir, res, true)
	if !bytes.Equal(readFile(t, debs[0]), debBytes) {
		t.Error("in-place build changed a .deb")
	}
	before := snapshot(t, dir)

	// A failing rebuild leaves every file as it was.
	os.WriteFile(filepath.Join(dir, "broken.deb"), []byte("!<arch>\nnot really"), 0o644)
	if _, err := Build(context.Background(), opts); err == nil || !strings.Contains(err.Error(), "broken.deb") {
		t.Fatalf("build with a broken .deb: %v", err)
	}
	os.Remove(filepath.Join(dir, "broken.deb"))
	if after := snapshot(t, dir); !equalSnapshots(before, after) {
		t.Error("failed in-place build changed the directory")
	}

	// A successful rebuild replaces the index, with one more package.
	writeDeb(t, dir, "pkg-e_1_all.deb", debSpec{control: controlText("pkg-e", "1", "all", "")})
	res, err = Build(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	checkRepo(t, dir, res, true)
	if len(res.Packages) != 5 {
		t.Errorf("rebuild indexed %d packages", len(res.Packages))
	}
}

// snapshot maps every file under dir to its contents.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := make(map[string]string)
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if fi.IsDir() {
			m[rel+"/"] = fi.Mode().String()
			return nil
		}
		b, err := os.ReadFile(p)
		m[rel] = fi.Mode().String() + " " + string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func equalSnapshots(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestBuildBadInput: each bad input fails with an error naming the file,
// writes nothing, and leaves an existing repository as it was.
func TestBuildBadInput(t *testing.T) {
	good := debSpec{control: controlText("good", "1", "all", "")}
	tests := []struct {
		name  string
		write func(t *testing.T, dir string) []string // returns the bad paths the error must name
		want  string
	}{
		{"not a deb", func(t *testing.T, dir string) []string {
			p := filepath.Join(dir, "text.deb")
			os.WriteFile(p, []byte("hello\n"), 0o644)
			return []string{p}
		}, "not a Debian binary package"},
		{"truncated", func(t *testing.T, dir string) []string {
			b := good.bytes(t)
			p := filepath.Join(dir, "cut.deb")
			os.WriteFile(p, b[:len(b)-10], 0o644)
			return []string{p}
		}, "truncated"},
		{"missing Package", func(t *testing.T, dir string) []string {
			return []string{writeDeb(t, dir, "nopkg.deb", debSpec{control: "Version: 1\nArchitecture: all\n"})}
		}, "missing Package field"},
		{"missing Version", func(t *testing.T, dir string) []string {
			return []string{writeDeb(t, dir, "nover.deb", debSpec{control: "Package: nover\nArchitecture: all\n"})}
		}, "missing Version field"},
		{"missing Architecture", func(t *testing.T, dir string) []string {
			return []string{writeDeb(t, dir, "noarch.deb", debSpec{control: "Package: noarch\nVersion: 1\n"})}
		}, "missing Architecture field"},
		{"same package twice", func(t *testing.T, dir string) []string {
			a := writeDeb(t, dir, "dup-1.deb", debSpec{control: controlText("dup", "1", "all", "")})
			b := writeDeb(t, dir, "dup-2.deb", debSpec{control: controlText("dup", "1", "all", "") + "Homepage: https://example.org\n"})
			return []string{a, b}
		}, "both are dup 1 (all)"},
		{"two broken files", func(t *testing.T, dir string) []string {
			a := filepath.Join(dir, "x1.deb")
			b := filepath.Join(dir, "x2.deb")
			os.WriteFile(a, nil, 0o644)
			os.WriteFile(b, []byte("!<arch>\n"), 0o644)
			return []string{a, b}
		}, "not a Debian binary package"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := t.TempDir()
			writeDeb(t, in, "good_1_all.deb", good)
			bad := tt.write(t, in)
			parent := t.TempDir()

			// Into a new directory: nothing appears.
			out := filepath.Join(parent, "repo")
			_, err := Build(context.Background(), Options{DebDir: in, Out: out, Date: testDate, Signer: testSigner(t, testDate)})
			if err == nil {
				t.Fatal("build succeeded")
			}
			for _, p := range bad {
				if !strings.Contains(err.Error(), p) {
					t.Errorf("error %q does not name %s", err, p)
				}
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not say %q", err, tt.want)
			}
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Errorf("output exists after a failed build: %v", err)
			}
			if got := leftovers(t, parent); len(got) > 0 {
				t.Errorf("left behind: %v", got)
			}

			// Over an existing repository: it stays as it was.
			old := t.TempDir()
			writeDeb(t, old, "good_1_all.deb", good)
			if _, err := Build(context.Background(), Options{DebDir: old, Out: out, Date: testDate, Signer: testSigner(t, testDate)}); err != nil {
				t.Fatal(err)
			}
			before := snapshot(t, out)
			for _, placement := range []Placement{Copy, HardLink, IndexOnly} {
				if _, err := Build(context.Background(), Options{DebDir: in, Out: out, Placement: placement, Date: testDate, Signer: testSigner(t, testDate)}); err == nil {
					t.Fatalf("%v build succeeded", placement)
				}
				if !equalSnapshots(before, snapshot(t, out)) {
					t.Errorf("failed %v build changed the existing repository", placement)
				}
				if got := leftovers(t, parent); len(got) > 0 {
					t.Errorf("left behind: %v", got)
				}
			}
		})
	}
}

func TestBuildOptions(t *testing.T) {
	in := t.TempDir()
	debs := smallRepoDebs(t, in)
	other := t.TempDir()
	sameName := writeDeb(t, other, filepath.Base(debs[1]), debSpec{control: controlText("pkg-z", "1", "all", "")})
	spaced := writeDeb(t, other, "with space.deb", debSpec{control: controlText("pkg-y", "1", "all", "")})
	signer := testSigner(t, testDate)
	notRepo := t.TempDir()
	os.WriteFile(filepath.Join(notRepo, "precious"), []byte("x"), 0o644)
	file := filepath.Join(other, "file")
	os.WriteFile(file, nil, 0o644)

	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"no debs", Options{DebDir: t.TempDir()}, "no .deb files"},
		{"no such dir", Options{DebDir: filepath.Join(in, "nope")}, "no such file"},
		{"same base name", Options{Debs: []string{debs[1], sameName}}, "same file name"},
		{"blank in name", Options{Debs: []string{spaced}}, "contains ' '"},
		{"not a .deb name", Options{Debs: []string{file}}, "must end in .deb"},
		{"no signer", Options{Debs: debs, Signer: nil}, "no signer"},
		{"no date", Options{Debs: debs, Date: time.Time{}}, "no Date"},
		{"future date", Options{Debs: debs, Date: time.Now().Add(time.Hour)}, "in the future"},
		{"origin with newline", Options{Debs: debs, Origin: "a\nSHA256: x"}, "control characters"},
		{"label with blank", Options{Debs: debs, Label: " x"}, "blanks"},
		{"non-repository output", Options{Debs: debs, Out: notRepo}, "refusing to replace"},
		{"output is a file", Options{Debs: debs, Out: file}, "not a directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.opts
			if o.Out == "" {
				o.Out = filepath.Join(t.TempDir(), "repo")
			}
			if o.Signer == nil && tt.name != "no signer" {
				o.Signer = signer
			}
			if o.Date.IsZero() && tt.name != "no date" {
				o.Date = testDate
			}
			_, err := Build(context.Background(), o)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Build: %v; want %q", err, tt.want)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(notRepo, "precious")); err != nil {
		t.Error("refused build still touched the directory")
	}

	// The same path twice counts once.
	res, err := Build(context.Background(), Options{Debs: append(debs, debs[0]), DebDir: in, Out: filepath.Join(t.TempDir(), "r"), Date: testDate, Signer: signer})
	if err != nil || len(res.Packages) != len(debs) {
		t.Errorf("duplicate paths: %v", err)
	}
}

func TestBuildCancel(t *testing.T) {
	in := t.TempDir()
	smallRepoDebs(t, in)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	parent := t.TempDir()
	_, err := Build(ctx, Options{DebDir: in, Out: filepath.Join(parent, "repo"), Date: testDate, Signer: testSigner(t, testDate)})
	if err == nil {
		t.Fatal("cancelled build succeeded")
	}
	if got, _ := os.ReadDir(parent); len(got) != 0 {
		t.Errorf("cancelled build left %v", got)
	}
}

// TestReproducible builds twice from copies of the same .debs in different
// places, with the same key loaded twice and the same Date, and compares
// every file byte for byte.
func TestReproducible(t *testing.T) {
	var date time.Time
	build := func(signer *Signer, placement Placement) map[string]string {
		in := t.TempDir()
		smallRepoDebs(t, in)
		if have(t, "dpkg-deb") {
			dpkgDeb(t, in, "real_1_all.deb", controlText("real", "1", "all", ""), "xz")
		}
		out := filepath.Join(t.TempDir(), "repo")
		if placement == IndexOnly {
			out = in
		}
		if _, err := Build(context.Background(), Options{DebDir: in, Out: out, Placement: placement, Origin: "o", Label: "l", Date: date, Signer: signer}); err != nil {
			t.Fatal(err)
		}
		return snapshot(t, out)
	}
	signer := testSigner(t, testDate)
	loaded := func() *Signer { return signer }
	if have(t, "gpg") {
		key := gpgFixtures(t)["rsa3072-passphrase"]
		t.Setenv("APTREPO_TEST_PASS", "correct horse")
		loaded = func() *Signer {
			s, err := LoadSigner(key, "APTREPO_TEST_PASS", time.Now())
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
	}
	// Not before the GnuPG key's creation, which is during this run.
	date = time.Now().Truncate(time.Second)
	for _, placement := range []Placement{Copy, HardLink, IndexOnly} {
		for name, s := range map[string]func() *Signer{"ephemeral": func() *Signer { return signer }, "loaded": loaded} {
			a := build(s(), placement)
			b := build(s(), placement)
			if len(a) < len(indexNames) {
				t.Fatalf("%v/%s: only %d files", placement, name, len(a))
			}
			for f, content := range a {
				if b[f] != content {
					t.Errorf("%v/%s: %s differs between two builds", placement, name, f)
				}
			}
		}
	}
}

func TestDateFromEnvironment(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "1714564800")
	d, err := DateFromEnvironment()
	if err != nil || !d.Equal(testDate) || d.Location() != time.UTC {
		t.Errorf("DateFromEnvironment = %v, %v; want %v", d, err, testDate)
	}
	for _, bad := range []string{"x", "-1", "1.5"} {
		t.Setenv("SOURCE_DATE_EPOCH", bad)
		if _, err := DateFromEnvironment(); err == nil {
			t.Errorf("SOURCE_DATE_EPOCH=%q accepted", bad)
		}
	}
	t.Setenv("SOURCE_DATE_EPOCH", "")
	d, err = DateFromEnvironment()
	if err != nil || time.Since(d) > time.Minute || d.Nanosecond() != 0 {
		t.Errorf("DateFromEnvironment without SOURCE_DATE_EPOCH = %v, %v", d, err)
	}
}

// TestBuildDigests: by default Packages and Release carry SHA256 only,
// which apt requires and verifies; AllDigests adds MD5, SHA1 and SHA512
// for older consumers. (The apt tests run real apt against the default.)
func TestBuildDigests(t *testing.T) {
	in := t.TempDir()
	debs := smallRepoDebs(t, in)
	signer := testSigner(t, testDate)
	for _, tc := range []struct {
		all        bool
		want, none []string
	}{
		{false, []string{"SHA256"}, []string{"MD5", "SHA1", "SHA512"}},
		{true, []string{"MD5", "SHA1", "SHA256", "SHA512"}, nil},
	} {
		out := filepath.Join(t.TempDir(), "repo")
		res, err := Build(context.Background(), Options{Debs: debs, Out: out, Date: testDate, Signer: signer, AllDigests: tc.all})
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"Packages", "Release"} {
			data, err := os.ReadFile(filepath.Join(out, f))
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(data), "\n"+w) {
					t.Errorf("all=%v: %s lacks %s", tc.all, f, w)
				}
			}
			for _, n := range tc.none {
				if strings.Contains(string(data), "\n"+n) {
					t.Errorf("all=%v: %s has %s", tc.all, f, n)
				}
			}
		}
		if p := res.Packages[0]; p.SHA256 == "" || (p.MD5sum != "") != tc.all || (p.SHA512 != "") != tc.all {
			t.Errorf("all=%v: package digests %+v", tc.all, p)
		}
	}
}
