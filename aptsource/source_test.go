package aptsource

import (
	"strings"
	"testing"
)

func TestParseOneLine(t *testing.T) {
	in := `deb [ arch=amd64,i386 signed-by=/k.gpg ] http://a.example/debian trixie main contrib
deb-src http://a.example/debian trixie main
# deb http://commented.example/debian trixie main
deb http://short.example/debian
deb [arch=amd64] http://b.example/debian sid
deb [broken http://c.example/debian sid main
`
	got := ParseOneLine("x", in)
	if len(got) != 3 {
		t.Fatalf("got %d sources: %+v", len(got), got)
	}
	a := got[0]
	if a.URIs[0] != "http://a.example/debian" || a.Suites[0] != "trixie" || strings.Join(a.Components, " ") != "main contrib" ||
		a.SignedBy != "/k.gpg" || strings.Join(a.Architectures, " ") != "amd64 i386" || a.Origin != "x" {
		t.Errorf("first: %+v", a)
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
	got, err := ParseDeb822("x", in)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("got %d stanzas: %+v", len(got), got)
	}
	if strings.Join(got[0].URIs, " ") != "http://a.example/debian http://b.example/debian" {
		t.Errorf("continued URIs: %q", got[0].URIs)
	}
	if !strings.HasPrefix(got[0].SignedBy, "-----BEGIN PGP PUBLIC KEY BLOCK-----") {
		t.Errorf("inline key: %q", got[0].SignedBy)
	}
	if got[0].Disabled || !got[1].Disabled {
		t.Errorf("disabled: %v %v", got[0].Disabled, got[1].Disabled)
	}
}

func TestParseDeb822Errors(t *testing.T) {
	for name, in := range map[string]string{
		"continuation first": " dangling\nTypes: deb\n",
		"not a field":        "Types: deb\nthis is no field\n",
	} {
		got, err := ParseDeb822("f.sources", in)
		if err == nil || !strings.HasPrefix(err.Error(), "f.sources:") {
			t.Errorf("%s: error %v, want one naming the file and line", name, err)
		}
		if len(got) != 1 {
			t.Errorf("%s: %d stanzas, want the one that parses", name, len(got))
		}
	}
}

// TestDeb822RoundTrip renders sources and parses them back.
func TestDeb822RoundTrip(t *testing.T) {
	key := "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nabc\n-----END PGP PUBLIC KEY BLOCK-----\n"
	srcs := []Source{
		{URIs: []string{"http://a.example/debian"}, Suites: []string{"trixie", "trixie-updates"}, Components: []string{"main"}, SignedBy: "/k.gpg"},
		{URIs: []string{"file:///opt/local-packages"}, Suites: []string{"./"}, SignedBy: key, Architectures: []string{"amd64"}},
	}
	text := Render("header line", srcs)
	if !strings.HasPrefix(text, "# header line\n\nTypes: deb\n") || !strings.Contains(text, "Signed-By:\n -----BEGIN PGP PUBLIC KEY BLOCK-----\n .\n abc\n") {
		t.Errorf("rendered:\n%s", text)
	}
	got, err := ParseDeb822("r.sources", text)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].SignedBy != "/k.gpg" || strings.Join(got[0].Suites, " ") != "trixie trixie-updates" ||
		got[1].SignedBy != strings.TrimSuffix(strings.Replace(key, "\n\n", "\n.\n", 1), "\n") || len(got[1].Components) != 0 {
		t.Errorf("parsed back: %+v", got)
	}
}

func TestArchiveOfAndMissingComponents(t *testing.T) {
	const kr = "/usr/share/keyrings/debian-archive-keyring.gpg"
	sources := []Source{
		{Types: []string{"deb"}, URIs: []string{"http://deb.example/debian"}, Suites: []string{"trixie", "trixie-updates"}, Components: []string{"main"}, SignedBy: kr, Origin: "/etc/apt/sources.list.d/debian.sources"},
		{Types: []string{"deb"}, URIs: []string{"http://sec.example/debian-security"}, Suites: []string{"trixie-security"}, Components: []string{"main", "contrib"}, SignedBy: kr, Origin: "/etc/apt/sources.list.d/debian.sources"},
		{Types: []string{"deb"}, URIs: []string{"http://own.example"}, Suites: []string{"trixie"}, Components: []string{"main"}, SignedBy: kr, Origin: "/etc/apt/sources.list.d/podvm-archive-components.sources"},
		{Types: []string{"deb"}, URIs: []string{"http://docker.example"}, Suites: []string{"trixie"}, Components: []string{"stable"}, Origin: "/etc/apt/sources.list.d/docker.list"},
		{Types: []string{"deb"}, URIs: []string{"http://off.example"}, Suites: []string{"trixie"}, Components: []string{"main"}, SignedBy: kr, Disabled: true},
	}
	archive := ArchiveOf(sources, kr, "trixie")
	if len(archive) != 2 {
		t.Fatalf("archive: %+v", archive)
	}
	missing := MissingComponents(archive, []string{"contrib", "non-free"})
	if len(missing) != 2 || strings.Join(missing[0].Components, " ") != "contrib non-free" || strings.Join(missing[1].Components, " ") != "non-free" ||
		strings.Join(missing[0].Suites, " ") != "trixie trixie-updates" || missing[1].SignedBy != kr {
		t.Errorf("missing: %+v", missing)
	}
	// Unsigned entries count only without signed ones, and only the distro's.
	unsigned := []Source{sources[3], {Types: []string{"deb"}, URIs: []string{"http://deb.example/debian"}, Suites: []string{"trixie"}, Components: []string{"main"}}}
	if got := ArchiveOf(unsigned, kr, "trixie"); len(got) != 1 || got[0].URIs[0] != "http://deb.example/debian" {
		t.Errorf("unsigned archive: %+v", got)
	}
	if got := MissingComponents(archive, []string{"main"}); len(got) != 0 {
		t.Errorf("nothing missing, yet %+v", got)
	}
}
