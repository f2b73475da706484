package aptrepo

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// aptRoot is a throwaway apt configuration: state, cache, sources, keys
// and preferences all live in a temporary directory, and nothing of the
// host's apt configuration is read, so the tests see what a node with only
// our source would see.
type aptRoot struct {
	t    *testing.T
	dir  string
	conf string
}

// newAptRoot makes an apt root whose only source is sources (a deb822
// file's text) and whose dpkg status holds status (may be empty).
func newAptRoot(t *testing.T, sources, status string) *aptRoot {
	t.Helper()
	need(t, "apt-get")
	dir := worldReadableTempDir(t)
	for _, d := range []string{"etc/apt.conf.d", "etc/preferences.d", "etc/sources.list.d", "etc/trusted.gpg.d",
		"state/lists/partial", "cache/archives/partial", "log"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		"etc/sources.list":                "",
		"etc/sources.list.d/test.sources": sources,
		"state/status":                    status,
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	conf := filepath.Join(dir, "apt.conf")
	// APT_CONFIG is read first; pointing Dir::Etc and its parts into the
	// temporary directory keeps /etc/apt out entirely. Downloads still run
	// sandboxed as _apt, as on a node, so the repository must be readable
	// by an unprivileged user.
	c := fmt.Sprintf(`Dir "/";
Dir::Etc "%[1]s/etc";
Dir::Etc::main "/dev/null";
Dir::Etc::Parts "%[1]s/etc/apt.conf.d";
Dir::State "%[1]s/state";
Dir::State::status "%[1]s/state/status";
Dir::Cache "%[1]s/cache";
Dir::Log "%[1]s/log";
Debug::NoLocking "true";
Acquire::Languages "none";
`, dir)
	if os.Geteuid() != 0 {
		// Without root there is no sandbox to drop into.
		c += "APT::Sandbox::User \"\";\n"
	}
	if err := os.WriteFile(conf, []byte(c), 0o644); err != nil {
		t.Fatal(err)
	}
	return &aptRoot{t: t, dir: dir, conf: conf}
}

// worldReadableTempDir returns t.TempDir() with it and its parent made
// traversable: testing creates them 0700, and apt's _apt sandbox could
// not read a repository or write partial downloads under them.
func worldReadableTempDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for d := dir; d != os.TempDir() && d != "/" && d != "."; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if filepath.Dir(d) == os.TempDir() {
			break
		}
	}
	return dir
}

// run runs an apt command in the root and returns its combined output and
// whether it succeeded.
func (a *aptRoot) run(name string, args ...string) (string, bool) {
	a.t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "APT_CONFIG="+a.conf, "LC_ALL=C.UTF-8", "DEBIAN_FRONTEND=noninteractive")
	out, err := cmd.CombinedOutput()
	if err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			a.t.Fatalf("%s: %v", name, err)
		}
	}
	return string(out), err == nil
}

// diagnostics are apt's warnings, errors and notices.
var diagnostics = regexp.MustCompile(`(?m)^(W|E|N|Err):.*$`)

// mustUpdate runs apt-get update and requires success without a single
// warning, error or notice.
func (a *aptRoot) mustUpdate() {
	a.t.Helper()
	out, ok := a.run("apt-get", "update")
	if !ok || diagnostics.MatchString(out) {
		a.t.Fatalf("apt-get update (ok=%v):\n%s", ok, out)
	}
}

type signedBy int

const (
	keyringPath signedBy = iota
	armoredKeyringPath
	inlineKey
)

func (s signedBy) String() string {
	return [...]string{"keyring.gpg", "keyring.asc", "inline"}[s]
}

// sourceFor returns a deb822 source for the flat repository in dir:
// Suites "./", no Components, and Signed-By as asked.
func sourceFor(dir string, by signedBy, armored []byte) string {
	var signed string
	switch by {
	case keyringPath:
		signed = " " + filepath.Join(dir, KeyringFile)
	case armoredKeyringPath:
		signed = " " + filepath.Join(dir, ArmoredKeyringFile)
	case inlineKey:
		// deb822 folds the key block: every line indented, blank lines
		// written as " .".
		for _, line := range strings.Split(strings.TrimSpace(string(armored)), "\n") {
			if line == "" {
				line = "."
			}
			signed += "\n " + line
		}
	}
	return "Types: deb\nURIs: file://" + dir + "\nSuites: ./\nSigned-By:" + signed + "\n"
}

// dpkgDebRepo builds, with the real dpkg-deb, a chain of packages whose
// dependencies all lie inside the repository: pkg-a -> pkg-b -> pkg-c,
// each member compression once, plus an unrelated pkg-d.
func dpkgDebRepo(t *testing.T, signer *Signer, date time.Time) (string, *Result) {
	return dpkgDebRepoPlaced(t, signer, date, Copy)
}

// dpkgDebRepoPlaced is dpkgDebRepo with a choice of placement; IndexOnly
// indexes the .debs in place.
func dpkgDebRepoPlaced(t *testing.T, signer *Signer, date time.Time, placement Placement) (string, *Result) {
	t.Helper()
	in := filepath.Join(worldReadableTempDir(t), "repo")
	if err := os.Mkdir(in, 0o755); err != nil {
		t.Fatal(err)
	}
	dpkgDeb(t, in, "pkg-a_1.0-1_amd64.deb", controlText("pkg-a", "1.0-1", "amd64", "pkg-b (>= 2), pkg-missing | pkg-d"), "xz")
	dpkgDeb(t, in, "pkg-b_2.0_all.deb", controlText("pkg-b", "2.0", "all", "pkg-c (= 1:3-1)"), "zstd")
	// Named as apt-get download names a version with an epoch.
	dpkgDeb(t, in, "pkg-c_1%3a3-1_all.deb", controlText("pkg-c", "1:3-1", "all", ""), "gzip")
	dpkgDeb(t, in, "pkg-d_4_all.deb", controlText("pkg-d", "4", "all", ""), "none")
	out := filepath.Join(worldReadableTempDir(t), "repo")
	if placement == IndexOnly {
		out = in
	}
	// A strict umask must not matter: apt's sandbox reads as _apt.
	old := setUmask(0o077)
	res, err := Build(context.Background(), Options{DebDir: in, Out: out, Placement: placement, Origin: "podvm", Label: "podvm test", Date: date, Signer: signer})
	setUmask(old)
	if err != nil {
		t.Fatal(err)
	}
	return out, res
}

// TestAptAcceptsRepo: real apt updates from the repository without a
// single warning, with Signed-By as a binary keyring, an armored keyring
// and an inline key, then downloads a package and its dependencies.
func TestAptAcceptsRepo(t *testing.T) {
	need(t, "apt-get", "dpkg-deb")
	signer := testSigner(t, testDate)
	repos := map[Placement]string{}
	for _, p := range []Placement{Copy, HardLink, IndexOnly} {
		repos[p], _ = dpkgDebRepoPlaced(t, signer, testDate, p)
	}
	for _, tc := range []struct {
		placement Placement
		by        signedBy
	}{
		{Copy, keyringPath}, {Copy, armoredKeyringPath}, {Copy, inlineKey},
		{HardLink, keyringPath}, {IndexOnly, inlineKey},
	} {
		repo, by := repos[tc.placement], tc.by
		t.Run(tc.placement.String()+"/"+by.String(), func(t *testing.T) {
			apt := newAptRoot(t, sourceFor(repo, by, signer.ArmoredPublicKey()), "")
			apt.mustUpdate()
			out, ok := apt.run("apt-get", "install", "-y", "--download-only", "--no-install-recommends", "pkg-a")
			if !ok || diagnostics.MatchString(out) {
				t.Fatalf("apt-get install --download-only pkg-a (ok=%v):\n%s", ok, out)
			}
			for _, want := range []string{"pkg-a 1.0-1", "pkg-b 2.0", "pkg-c 1:3-1", "pkg-d 4", "Download complete"} {
				if !strings.Contains(out, want) {
					t.Errorf("apt-get install output lacks %q:\n%s", want, out)
				}
			}
			// apt knows the repository by Origin and Label (for pinning).
			out, _ = apt.run("apt-cache", "policy")
			if !strings.Contains(out, "release o=podvm,l=podvm test") {
				t.Errorf("apt-cache policy:\n%s", out)
			}
		})
	}
}

// TestAptRefusesTampering changes a built repository the ways an attacker
// or a broken copy could, and requires real apt to refuse each one.
func TestAptRefusesTampering(t *testing.T) {
	need(t, "apt-get", "dpkg-deb")
	signer := testSigner(t, testDate)
	repo, res := dpkgDebRepo(t, signer, testDate)
	other := testSigner(t, testDate)
	otherKeyring := filepath.Join(t.TempDir(), "other.gpg")
	os.WriteFile(otherKeyring, other.PublicKeyring(), 0o644)
	os.Chmod(filepath.Dir(otherKeyring), 0o755)

	// resign replaces Release, InRelease and Release.gpg with ones made by
	// s from release, at signature time at.
	resign := func(t *testing.T, dir string, s *Signer, release []byte, at time.Time) {
		in, det := signBoth(t, s, release, at)
		write(t, dir, ReleaseFile, release)
		write(t, dir, InReleaseFile, in)
		write(t, dir, ReleaseGPGFile, det)
	}
	edit := func(t *testing.T, dir, name, old, new string) {
		b := readFile(t, filepath.Join(dir, name))
		if !bytes.Contains(b, []byte(old)) {
			t.Fatalf("%s lacks %q", name, old)
		}
		write(t, dir, name, bytes.Replace(b, []byte(old), []byte(new), 1))
	}

	tests := []struct {
		name     string
		tamper   func(t *testing.T, dir string)
		keyring  string // Signed-By instead of the repository's keyring
		install  bool   // apt-get update succeeds; the download must fail
		want     string // in apt's output
		sqvFails bool   // sqv must reject InRelease too
	}{
		{
			name: "edited Packages and Packages.gz",
			tamper: func(t *testing.T, dir string) {
				edit(t, dir, PackagesFile, "Version: 2.0", "Version: 2.1")
				gz, _ := gzipBytes(readFile(t, filepath.Join(dir, PackagesFile)))
				write(t, dir, PackagesGzFile, gz)
			},
			want: "Hash Sum mismatch",
		},
		{
			name: "edited Packages without Packages.gz",
			tamper: func(t *testing.T, dir string) {
				edit(t, dir, PackagesFile, "Depends: pkg-c", "Depends: evil, pkg-c")
				os.Remove(filepath.Join(dir, PackagesGzFile))
			},
			want: "Hash Sum mismatch",
		},
		{
			name:     "edited InRelease",
			tamper:   func(t *testing.T, dir string) { edit(t, dir, InReleaseFile, "Label: podvm test", "Label: podvm evil") },
			want:     "BADSIG",
			sqvFails: true,
		},
		{
			name: "edited Release without InRelease",
			tamper: func(t *testing.T, dir string) {
				os.Remove(filepath.Join(dir, InReleaseFile))
				edit(t, dir, ReleaseFile, "Label: podvm test", "Label: podvm evil")
			},
			want: "BADSIG",
		},
		{
			name: "InRelease re-signed by another key",
			tamper: func(t *testing.T, dir string) {
				resign(t, dir, other, readFile(t, filepath.Join(dir, ReleaseFile)), testDate)
			},
			want:     "NO_PUBKEY " + other.Fingerprint()[24:],
			sqvFails: true,
		},
		{
			name:     "wrong keyring in Signed-By",
			keyring:  otherKeyring,
			want:     "NO_PUBKEY " + signer.Fingerprint()[24:],
			sqvFails: true,
		},
		{
			name: "unsigned",
			tamper: func(t *testing.T, dir string) {
				os.Remove(filepath.Join(dir, InReleaseFile))
				os.Remove(filepath.Join(dir, ReleaseGPGFile))
			},
			want: "is not signed",
		},
		{
			name: "Date in the future",
			tamper: func(t *testing.T, dir string) {
				future := time.Now().Add(24 * time.Hour)
				files := []indexFile{
					{PackagesFile, readFile(t, filepath.Join(dir, PackagesFile))},
					{PackagesGzFile, readFile(t, filepath.Join(dir, PackagesGzFile))},
				}
				// Signed now, so only the Date is wrong.
				resign(t, dir, signer, releaseFile("podvm", "podvm test", future, []string{"all", "amd64"}, files, false), time.Now())
			},
			want: "not valid yet",
		},
		{
			name: "changed .deb",
			tamper: func(t *testing.T, dir string) {
				p := filepath.Join(dir, res.Packages[1].Filename) // pkg-b
				b := readFile(t, p)
				b[len(b)-1] ^= 1
				write(t, dir, filepath.Base(p), b)
			},
			install: true,
			want:    "Hash Sum mismatch",
		},
		{
			name: "replaced .deb",
			tamper: func(t *testing.T, dir string) {
				// pkg-c, rebuilt with an added dependency.
				b := dpkgDeb(t, t.TempDir(), "x.deb", controlText("pkg-c", "1:3-1", "all", "evil"), "gzip")
				write(t, dir, res.Packages[2].Filename, readFile(t, b))
			},
			install: true,
			want:    "Hash Sum mismatch",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(worldReadableTempDir(t), "repo")
			copyDir(t, repo, dir)
			if tt.tamper != nil {
				tt.tamper(t, dir)
			}
			source := sourceFor(dir, keyringPath, nil)
			if tt.keyring != "" {
				source = strings.Replace(source, filepath.Join(dir, KeyringFile), tt.keyring, 1)
			}
			apt := newAptRoot(t, source, "")
			out, ok := apt.run("apt-get", "update")
			if tt.install {
				if !ok {
					t.Fatalf("apt-get update failed:\n%s", out)
				}
				out, ok = apt.run("apt-get", "install", "-y", "--download-only", "pkg-a")
			}
			if ok {
				t.Fatalf("apt accepted the tampered repository:\n%s", out)
			}
			if !strings.Contains(out, tt.want) {
				t.Errorf("apt's output lacks %q:\n%s", tt.want, out)
			}
			if !tt.install {
				// Nothing from the repository may be usable.
				if out, _ := apt.run("apt-cache", "policy", "pkg-a"); strings.Contains(out, "1.0-1") {
					t.Errorf("pkg-a is known after a refused update:\n%s", out)
				}
			}
			if tt.sqvFails {
				keyring := filepath.Join(dir, KeyringFile)
				if tt.keyring != "" {
					keyring = tt.keyring
				}
				sqvRefuses(t, keyring, readFile(t, filepath.Join(dir, InReleaseFile)))
			}
		})
	}
}

// sqvRefuses requires sqv to reject InRelease, split as apt >= 2.9.19
// splits it before handing it to sqv.
func sqvRefuses(t *testing.T, keyring string, inRelease []byte) {
	t.Helper()
	if !have(t, "sqv") {
		return
	}
	dir := t.TempDir()
	msg, sig := splitClearsigned(t, inRelease)
	write(t, dir, "msg", msg)
	write(t, dir, "sig", sig)
	runFails(t, "sqv", "--keyring", keyring, filepath.Join(dir, "sig"), filepath.Join(dir, "msg"))
}

// TestSqvAcceptsRepo verifies a built repository's signatures with sqv,
// the verifier apt uses from 2.9.19 on (Debian 13, Ubuntu 25.04); apt 2.6
// on this host still runs gpgv, so sqv is run the way that apt runs it.
func TestSqvAcceptsRepo(t *testing.T) {
	need(t, "sqv", "dpkg-deb")
	signer := testSigner(t, testDate)
	repo, _ := dpkgDebRepo(t, signer, testDate)
	dir := t.TempDir()
	msg, sig := splitClearsigned(t, readFile(t, filepath.Join(repo, InReleaseFile)))
	write(t, dir, "msg", msg)
	write(t, dir, "sig", sig)
	for _, keyring := range []string{KeyringFile, ArmoredKeyringFile} {
		k := filepath.Join(repo, keyring)
		run(t, "sqv", "--keyring", k, filepath.Join(dir, "sig"), filepath.Join(dir, "msg"))
		run(t, "sqv", "--keyring", k, filepath.Join(repo, ReleaseGPGFile), filepath.Join(repo, ReleaseFile))
	}
	if !bytes.Equal(append(msg, '\n'), readFile(t, filepath.Join(repo, ReleaseFile))) {
		t.Error("InRelease's message differs from Release")
	}
}

// signBoth signs msg at at both ways: clearsigned (InRelease) and
// detached (Release.gpg).
func signBoth(t *testing.T, s *Signer, msg []byte, at time.Time) (inRelease, releaseGPG []byte) {
	t.Helper()
	in, err := s.clearsign(msg, at)
	if err != nil {
		t.Fatal(err)
	}
	det, err := s.detachSign(msg, at)
	if err != nil {
		t.Fatal(err)
	}
	return in, det
}

func write(t *testing.T, dir, name string, b []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	if err := os.CopyFS(to, os.DirFS(from)); err != nil {
		t.Fatal(err)
	}
	os.Chmod(to, 0o755)
	entries, _ := os.ReadDir(to)
	for _, e := range entries {
		os.Chmod(filepath.Join(to, e.Name()), 0o644)
	}
}
