package gpustack

import (
	"strings"
	"testing"
)

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
	srcs, err := ArchiveSources(tg, "http://mirror.example/ubuntu-ports/", "http://security.example/ubuntu-ports")
	if err != nil {
		t.Fatal(err)
	}
	want := "Types: deb\nURIs: http://mirror.example/ubuntu-ports\nSuites: noble noble-updates\nComponents: main\nSigned-By: /usr/share/keyrings/ubuntu-archive-keyring.gpg\n"
	if got := srcs[0].Deb822(); got != want {
		t.Errorf("ubuntu arm64 archive:\n%s\nwant:\n%s", got, want)
	}
	if len(srcs) != 2 || srcs[1].URI != "http://security.example/ubuntu-ports" || srcs[1].Suites[0] != "noble-security" {
		t.Errorf("ubuntu security: %+v", srcs)
	}

	// Without a security mirror the security suite is left out.
	tg, _ = LookupRelease("debian", "13", "amd64")
	srcs, err = ArchiveSources(tg, "http://mirror.example/debian/", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(srcs) != 1 || srcs[0].URI != "http://mirror.example/debian" || strings.Join(srcs[0].Suites, " ") != "trixie trixie-updates" {
		t.Errorf("debian without a security mirror: %+v", srcs)
	}

	// No archive is built in: the mirror is required.
	if _, err := ArchiveSources(tg, "", "http://security.example/debian-security"); err == nil ||
		!strings.HasPrefix(err.Error(), "mirror: required") || !strings.Contains(err.Error(), "trixie") {
		t.Errorf("no mirror: got %v, want a \"mirror: required\" error naming the release", err)
	}
}
