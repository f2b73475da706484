package distro

import "testing"

func TestParseOSRelease(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       OSRelease
	}{
		{"debian", "PRETTY_NAME=\"Debian GNU/Linux 13 (trixie)\"\nNAME=\"Debian GNU/Linux\"\nVERSION_ID=\"13\"\nVERSION_CODENAME=trixie\nID=debian\n",
			OSRelease{ID: "debian", VersionID: "13", Codename: "trixie", PrettyName: "Debian GNU/Linux 13 (trixie)"}},
		{"single quotes, comment, escapes", "# ID=nope\nID='ubuntu'\nPRETTY_NAME=\"Ubuntu \\\"26.04\\\"\"\n",
			OSRelease{ID: "ubuntu", PrettyName: `Ubuntu "26.04"`}},
		{"testing has no VERSION_ID", "ID=debian\nVERSION_CODENAME=forky\n", OSRelease{ID: "debian", Codename: "forky"}},
		{"empty", "", OSRelease{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ParseOSRelease(tc.text); got != tc.want {
				t.Errorf("ParseOSRelease = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestLookup(t *testing.T) {
	for _, tc := range []struct {
		id, rel string
		want    string // Name(); "" for none
		suites  string
	}{
		{"debian", "13", "debian 13", "trixie trixie-updates trixie-security"},
		{"debian", "bookworm", "debian 12", "bookworm bookworm-updates bookworm-security"},
		{"ubuntu", "resolute", "ubuntu 26.04", "resolute resolute-updates resolute-security"},
		{"ubuntu", "13", "", ""},
		{"fedora", "41", "", ""},
	} {
		r, ok := Lookup(tc.id, tc.rel)
		if ok != (tc.want != "") || (ok && r.Name() != tc.want) {
			t.Errorf("Lookup(%s, %s) = %v %v, want %q", tc.id, tc.rel, r, ok, tc.want)
			continue
		}
		if ok {
			if got := r.Suites()[0] + " " + r.Suites()[1] + " " + r.SecuritySuite(); got != tc.suites {
				t.Errorf("%s: suites %q, want %q", r.Name(), got, tc.suites)
			}
		}
	}
	if r, _ := Lookup("ubuntu", "24.04"); r.ArchiveKeyring() != UbuntuArchiveKeyring {
		t.Errorf("ubuntu's archive keyring: %s", r.ArchiveKeyring())
	}
	if r, _ := Lookup("debian", "12"); r.ArchiveKeyring() != DebianArchiveKeyring {
		t.Errorf("debian's archive keyring: %s", r.ArchiveKeyring())
	}
}
