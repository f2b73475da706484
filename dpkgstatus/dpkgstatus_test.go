package dpkgstatus

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	status := `Package: libattr1
Status: install ok installed
Priority: required
Architecture: amd64
Multi-Arch: same
Source: attr (1:2.5.2-3)
Version: 1:2.5.2-3+b1
Description: extended attribute handling
 a continuation line: Source: not-this

Package: nvidia-kernel-dkms
Status: hold ok installed
Architecture: amd64
Source: nvidia-graphics-drivers
Version: 550.163.01-2

Package: old-thing
Status: deinstall ok config-files
Architecture: all
Version: 1.0

Package: bash
Status: install ok installed
Architecture: amd64
Version: 5.2.37-2
`
	got, err := Parse([]byte(status))
	if err != nil {
		t.Fatal(err)
	}
	want := []Package{
		{Name: "libattr1", Version: "1:2.5.2-3+b1", Arch: "amd64", Source: "attr", SourceVersion: "1:2.5.2-3", Installed: true},
		{Name: "nvidia-kernel-dkms", Version: "550.163.01-2", Arch: "amd64", Source: "nvidia-graphics-drivers", SourceVersion: "550.163.01-2", Installed: true, Held: true},
		{Name: "old-thing", Version: "1.0", Arch: "all", Source: "old-thing", SourceVersion: "1.0"},
		{Name: "bash", Version: "5.2.37-2", Arch: "amd64", Source: "bash", SourceVersion: "5.2.37-2", Installed: true},
	}
	if !slices.Equal(got, want) {
		t.Errorf("Parse:\n got %+v\nwant %+v", got, want)
	}
	if n := len(Installed(got)); n != 3 {
		t.Errorf("Installed: %d packages, want 3", n)
	}
}

func TestParseRefuses(t *testing.T) {
	for _, status := range []string{
		"Package: a\nVersion: 1\n",
		"Package: a\nStatus: installed\nVersion: 1\n",
	} {
		if _, err := Parse([]byte(status)); err == nil || !strings.Contains(err.Error(), "package a") {
			t.Errorf("Parse(%q) = %v, want an error naming the package", status, err)
		}
	}
}

// TestParseHost reads this machine's own database and agrees with
// dpkg-query on what is installed, at which version and from which source.
func TestParseHost(t *testing.T) {
	data, err := os.ReadFile(Path)
	if err != nil {
		// make check runs on Debian, where this must run.
		if os.Getenv("PODVM_REQUIRE_ROOT") == "1" {
			t.Fatalf("no dpkg database here, and PODVM_REQUIRE_ROOT=1 says this test must run: %v", err)
		}
		t.Skipf("no dpkg database here: %v", err)
	}
	pkgs, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("dpkg-query", "-W", "-f", "${db:Status-Status} ${Package}:${Architecture} ${Version} ${source:Package} ${source:Version}\n").Output()
	if err != nil {
		t.Fatalf("dpkg-query: %v", err)
	}
	var want []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if rest, ok := strings.CutPrefix(l, "installed "); ok {
			want = append(want, rest)
		}
	}
	var got []string
	for _, p := range Installed(pkgs) {
		got = append(got, p.Name+":"+p.Arch+" "+p.Version+" "+p.Source+" "+p.SourceVersion)
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("installed packages differ from dpkg-query's: %d parsed, %d from dpkg-query", len(got), len(want))
		for _, g := range got {
			if !slices.Contains(want, g) {
				t.Logf("parsed only: %s", g)
			}
		}
	}
	if len(got) == 0 {
		t.Error("no installed package on a machine with dpkg")
	}
}
