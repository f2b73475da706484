package imagestep

import (
	"strings"
	"testing"

	"github.com/podvm-gpu/packer-plugin-podvm/aptsource"
	"github.com/podvm-gpu/packer-plugin-podvm/gpustack"
)

func TestSourcesParsingAndComponents(t *testing.T) {
	out := SourceMarker + "/etc/apt/sources.list\n" +
		"# comment\n" +
		"deb http://mirror.example/debian trixie main # trailing\n" +
		"deb-src http://mirror.example/debian trixie main\n" +
		"deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://mirror.example/debian trixie-updates main contrib\n" +
		"deb [ arch=amd64 ] https://download.docker.com/linux/debian trixie stable\n" +
		"deb http://other.example/repo stable main\n\n" +
		SourceMarker + "/etc/apt/sources.list.d/debian.sources\n" +
		"Types: deb deb-src\nURIs: http://mirror.example/debian\nSuites: trixie-backports\nComponents: main non-free-firmware\n" +
		"Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n" +
		"Types: deb\nURIs: http://disabled.example/debian\nSuites: trixie\nComponents: main\nEnabled: no\n" +
		"Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n" +
		SourceMarker + "/etc/apt/sources.list.d/podvm-archive-components.sources\n" +
		"Types: deb\nURIs: http://mirror.example/debian\nSuites: trixie\nComponents: contrib\n\n"
	entries, err := parseSourceFiles(out)
	if err != nil {
		t.Fatal(err)
	}
	archive := aptsource.ArchiveOf(entries, "/usr/share/keyrings/debian-archive-keyring.gpg", "trixie")
	got := componentsFile(archive, []string{"contrib", "non-free", "non-free-firmware"})
	want := `# Written by podvm-gpu: components of the image's archive the GPU stack needs.

Types: deb
URIs: http://mirror.example/debian
Suites: trixie-updates
Components: non-free non-free-firmware
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.example/debian
Suites: trixie-backports
Components: contrib non-free
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
`
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}

	// Without entries signed by the archive keyring (debootstrap), unsigned
	// entries of the codename with "main" are the archive; Docker's
	// "stable" and other suites are not.
	var unsigned []aptsource.Source
	for _, e := range entries {
		if e.SignedBy == "" {
			unsigned = append(unsigned, e)
		}
	}
	archive = aptsource.ArchiveOf(unsigned, "/usr/share/keyrings/debian-archive-keyring.gpg", "trixie")
	if len(archive) != 1 || archive[0].URIs[0] != "http://mirror.example/debian" || archive[0].Suites[0] != "trixie" {
		t.Errorf("unsigned archive entries %+v", archive)
	}
}

func TestComponentsAlreadyEnabled(t *testing.T) {
	archive := []aptsource.Source{{URIs: []string{"http://ubuntu.mirror.example/ubuntu"}, Suites: []string{"noble"}, Components: []string{"main", "restricted"}}}
	if got := componentsFile(archive, []string{"restricted"}); got != "" {
		t.Errorf("got %q, want nothing", got)
	}
}

func TestSourceFilesErrors(t *testing.T) {
	if _, err := parseSourceFiles(SourceMarker + "/etc/apt/sources.list.d/x.sources\n continuation first\n"); err == nil {
		t.Error("continuation without a field accepted")
	}
}

func TestVerifyRepoStatus(t *testing.T) {
	for _, tc := range []struct {
		closure   bool
		want, not string
	}{
		{true, `: > "$d/status"`, "/var/lib/dpkg/status"},
		{false, `cp /var/lib/dpkg/status "$d/status"`, `: > "$d/status"`},
	} {
		cmd := VerifyRepoCommand(gpustack.VerifyRepo{Dir: "/opt/r", Keyring: "/k.gpg", Packages: []string{"linux-headers-x"}, Closure: tc.closure}, "/var/lib/dpkg/status")
		if !strings.Contains(cmd, tc.want) || strings.Contains(cmd, tc.not) {
			t.Errorf("closure %v: command %s\nwant %q and not %q", tc.closure, cmd, tc.want, tc.not)
		}
	}
}
