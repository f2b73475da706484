package hostapt

import (
	"strings"
	"testing"
)

func TestArchiveMirror(t *testing.T) {
	tests := []struct {
		dir, suite string
		want       string
		origin     string
	}{
		{"plain", "trixie", "http://mirror.example/debian", "testdata/apt/plain/sources.list"},
		// A vendor repository (suite "nodistro") and a disabled file come
		// first in name order; the security archive is skipped.
		{"deb822", "trixie", "http://deb822.example/debian", "debian.sources"},
		{"options", "trixie", "https://options.example/debian", "sources.list"},
		{"ubuntu", "trixie", "", ""},
		{"none", "trixie", "", ""},
		{"missing-directory", "trixie", "", ""},
		// A source listing the wanted suite wins over an earlier one.
		{"twosuites", "trixie", "http://trixie.example/debian", "trixie.sources"},
		{"twosuites", "bookworm", "http://bookworm.example/debian", "sources.list"},
		{"twosuites", "sid", "http://bookworm.example/debian", "sources.list"},
		{"disabled", "trixie", "http://on.example/debian", "a.sources"},
		// Transports debootstrap cannot use, and a source without main.
		{"transports", "trixie", "http://fine.example/debian", "sources.list"},
	}
	for _, tt := range tests {
		got, origin := ArchiveMirror(Read("testdata/apt/"+tt.dir), "debian", tt.suite)
		if got != tt.want {
			t.Errorf("%s (%s): mirror %q, want %q", tt.dir, tt.suite, got, tt.want)
		}
		if !strings.Contains(origin, tt.origin) || (tt.origin == "") != (origin == "") {
			t.Errorf("%s (%s): origin %q lacks %q", tt.dir, tt.suite, origin, tt.origin)
		}
	}
}

func TestArchiveMirrorUbuntu(t *testing.T) {
	srcs := Read("testdata/apt/ubuntu")
	if got, origin := ArchiveMirror(srcs, "ubuntu", "noble"); got != "http://archive.example/ubuntu" || !strings.Contains(origin, "sources.list") {
		t.Errorf("ubuntu archive: %q (%s)", got, origin)
	}
	if got, _ := SecurityMirror(srcs, "ubuntu", "noble"); got != "http://security.example/ubuntu" {
		t.Errorf("ubuntu security: %q", got)
	}
	if got, _ := ArchiveMirror(srcs, "fedora", "42"); got != "" {
		t.Errorf("unknown distro: %q", got)
	}
	// A Debian host has no Ubuntu archive.
	if got, _ := ArchiveMirror(Read("testdata/apt/deb822"), "ubuntu", "noble"); got != "" {
		t.Errorf("ubuntu archive on a Debian host: %q", got)
	}
}

func TestSecurityMirror(t *testing.T) {
	tests := []struct {
		dir, distro, suite string
		want, origin       string
	}{
		{"deb822", "debian", "trixie", "http://deb822.example/debian-security", "debian.sources"},
		{"plain", "debian", "bookworm", "http://security.example/debian-security", "sources.list"},
		// The wanted release's security suite wins; a disabled source, one
		// without main, another distro's and a vendor's "stable-security"
		// are skipped.
		{"security", "debian", "trixie", "http://trixie.example/debian-security", "trixie.sources"},
		{"security", "debian", "bookworm", "http://bookworm.example/debian-security", "sources.list"},
		{"security", "ubuntu", "noble", "http://ubuntu-security.example/ubuntu", "sources.list"},
		// Another release's security suite still names the security archive.
		{"plain", "debian", "trixie", "http://security.example/debian-security", "sources.list"},
		// Before bullseye the security suite is <release>/updates.
		{"legacy", "debian", "buster", "http://archive.example/debian-security", "sources.list"},
		{"twosuites", "debian", "trixie", "", ""},
		{"none", "debian", "trixie", "", ""},
	}
	for _, tt := range tests {
		got, origin := SecurityMirror(Read("testdata/apt/"+tt.dir), tt.distro, tt.suite)
		if got != tt.want {
			t.Errorf("%s (%s %s): security mirror %q, want %q", tt.dir, tt.distro, tt.suite, got, tt.want)
		}
		if !strings.Contains(origin, tt.origin) || (tt.origin == "") != (origin == "") {
			t.Errorf("%s (%s %s): origin %q lacks %q", tt.dir, tt.distro, tt.suite, origin, tt.origin)
		}
	}
}

func TestSuites(t *testing.T) {
	for release, want := range map[string]string{
		"trixie": "trixie-security", "bookworm": "bookworm-security", "stable": "stable-security",
		"oldstable": "oldstable-security", "buster": "buster/updates", "noble": "noble-security",
		"sid": "", "unstable": "", "testing": "", "experimental": "", "": "",
	} {
		if got := SecuritySuite(release); got != want {
			t.Errorf("SecuritySuite(%q) = %q, want %q", release, got, want)
		}
	}
	for release, want := range map[string]string{
		"trixie": "trixie trixie-updates", "buster": "buster buster-updates", "sid": "sid", "testing": "testing",
	} {
		if got := strings.Join(UpdatesSuites(release), " "); got != want {
			t.Errorf("UpdatesSuites(%q) = %q, want %q", release, got, want)
		}
	}
}

func TestParseOneLine(t *testing.T) {
	in := `deb [ arch=amd64,i386 signed-by=/k.gpg ] http://a.example/debian trixie main contrib
deb-src http://a.example/debian trixie main
# deb http://commented.example/debian trixie main
deb http://short.example/debian
deb [arch=amd64] http://b.example/debian sid
`
	got := parseOneLine(strings.NewReader(in), "x")
	if len(got) != 3 {
		t.Fatalf("got %d sources: %+v", len(got), got)
	}
	if got[0].URIs[0] != "http://a.example/debian" || got[0].Suites[0] != "trixie" || strings.Join(got[0].Components, " ") != "main contrib" {
		t.Errorf("first: %+v", got[0])
	}
	if got[1].Types[0] != "deb-src" {
		t.Errorf("second: %+v", got[1])
	}
	if got[2].URIs[0] != "http://b.example/debian" || len(got[2].Components) != 0 {
		t.Errorf("third: %+v", got[2])
	}
}

func TestParseDeb822(t *testing.T) {
	in := `# leading comment

Types: deb deb-src
URIs: http://a.example/debian
  http://b.example/debian
Suites: trixie
Components: main
Signed-By:
 -----BEGIN PGP PUBLIC KEY BLOCK-----
 .
 -----END PGP PUBLIC KEY BLOCK-----


Enabled: No
Types: deb
URIs: http://c.example/debian
Suites: sid
Components: main
`
	got := parseDeb822(strings.NewReader(in), "x")
	if len(got) != 2 {
		t.Fatalf("got %d stanzas: %+v", len(got), got)
	}
	if strings.Join(got[0].URIs, " ") != "http://a.example/debian http://b.example/debian" {
		t.Errorf("continued URIs: %q", got[0].URIs)
	}
	if !got[0].Enabled || got[1].Enabled {
		t.Errorf("enabled: %v %v", got[0].Enabled, got[1].Enabled)
	}
}
