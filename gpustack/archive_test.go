package gpustack

import "testing"

func TestLookupRelease(t *testing.T) {
	for _, rel := range []string{"13", "trixie"} {
		tg, err := LookupRelease("debian", rel, "amd64")
		if err != nil {
			t.Fatal(err)
		}
		if tg.Version != "13" || tg.Codename != "trixie" || tg.Arch != "amd64" {
			t.Errorf("LookupRelease(debian, %s) = %+v", rel, tg)
		}
	}
	if _, err := LookupRelease("ubuntu", "trixie", "amd64"); err == nil {
		t.Error("ubuntu trixie: want an error")
	}
}

func TestArchiveSources(t *testing.T) {
	tg, _ := LookupRelease("ubuntu", "noble", "arm64")
	srcs, err := ArchiveSources(tg, "", "")
	if err != nil {
		t.Fatal(err)
	}
	want := "Types: deb\nURIs: http://ports.ubuntu.com/ubuntu-ports\nSuites: noble noble-updates\nComponents: main\nSigned-By: /usr/share/keyrings/ubuntu-archive-keyring.gpg\n"
	if got := srcs[0].Deb822(); got != want {
		t.Errorf("ubuntu arm64 archive:\n%s\nwant:\n%s", got, want)
	}
	tg, _ = LookupRelease("debian", "13", "amd64")
	srcs, _ = ArchiveSources(tg, "http://mirror.example/debian/", "")
	if srcs[0].URI != "http://mirror.example/debian" || srcs[1].URI != "http://deb.debian.org/debian-security" || srcs[1].Suites[0] != "trixie-security" {
		t.Errorf("debian with mirror: %+v", srcs)
	}
}
