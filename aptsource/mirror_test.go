package aptsource

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
