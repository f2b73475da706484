package rootfs

import (
	"strings"
	"testing"
)

func TestHostMirror(t *testing.T) {
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
		{"ubuntu", "trixie", "", "debootstrap's default"},
		{"none", "trixie", "", "debootstrap's default"},
		{"missing-directory", "trixie", "", "debootstrap's default"},
		// A source listing the wanted suite wins over an earlier one.
		{"twosuites", "trixie", "http://trixie.example/debian", "trixie.sources"},
		{"twosuites", "bookworm", "http://bookworm.example/debian", "sources.list"},
		{"twosuites", "sid", "http://bookworm.example/debian", "sources.list"},
		{"disabled", "trixie", "http://on.example/debian", "a.sources"},
		// Transports debootstrap cannot use, and a source without main.
		{"transports", "trixie", "http://fine.example/debian", "sources.list"},
	}
	for _, tt := range tests {
		got, origin := hostMirror("testdata/apt/"+tt.dir, tt.suite)
		if got != tt.want {
			t.Errorf("%s (%s): mirror %q, want %q", tt.dir, tt.suite, got, tt.want)
		}
		if !strings.Contains(origin, tt.origin) {
			t.Errorf("%s (%s): origin %q lacks %q", tt.dir, tt.suite, origin, tt.origin)
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
	if got[0].uris[0] != "http://a.example/debian" || got[0].suites[0] != "trixie" || strings.Join(got[0].components, " ") != "main contrib" {
		t.Errorf("first: %+v", got[0])
	}
	if got[1].types[0] != "deb-src" {
		t.Errorf("second: %+v", got[1])
	}
	if got[2].uris[0] != "http://b.example/debian" || len(got[2].components) != 0 {
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
	if strings.Join(got[0].uris, " ") != "http://a.example/debian http://b.example/debian" {
		t.Errorf("continued URIs: %q", got[0].uris)
	}
	if !got[0].enabled || got[1].enabled {
		t.Errorf("enabled: %v %v", got[0].enabled, got[1].enabled)
	}
}
