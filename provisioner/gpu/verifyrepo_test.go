package gpu

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podvm-gpu/packer-plugin-podvm/aptrepo"
	"github.com/podvm-gpu/packer-plugin-podvm/chroot/chroottest"
	"github.com/podvm-gpu/packer-plugin-podvm/gpustack"
	"github.com/podvm-gpu/packer-plugin-podvm/imagestep"
)

// TestVerifyRepoWithRealApt runs the self-test with the host's apt against
// real signed repositories. The image has the headers installed, so with
// local_repo_closure=none only the repository's own copy can make the
// check pass: a repository that lacks the headers must fail it even
// though apt would consider them installed already.
func TestVerifyRepoWithRealApt(t *testing.T) {
	chroottest.RequireTools(t, "apt-get", "dpkg-deb")
	const (
		headers = "linux-headers-6.12.57+deb13-amd64"
		common  = "linux-headers-6.12.57+deb13-common"
		image   = "linux-image-6.12.57+deb13-amd64"
	)
	status := filepath.Join(t.TempDir(), "status")
	var installed strings.Builder
	for _, p := range []string{headers, common, image} {
		installed.WriteString("Package: " + p + "\nStatus: install ok installed\nVersion: 6.12.57-1\nArchitecture: amd64\nMaintainer: test <t@example.org>\nDescription: test package\n\n")
	}
	if err := os.WriteFile(status, []byte(installed.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		repo    [][3]string // name, version, depends
		closure bool
		fail    string // what the failure says; "" for success
	}{
		{"none: repository holds the headers", [][3]string{{headers, "6.12.57-1", common}}, false, ""},
		{"none: repository lacks the installed headers", [][3]string{{image, "6.12.57-1", ""}}, false, "would not take " + headers},
		{"full: repository holds the closure", [][3]string{{headers, "6.12.57-1", common}, {common, "6.12.57-1", ""}}, true, ""},
		{"full: repository lacks a dependency", [][3]string{{headers, "6.12.57-1", common}}, true, "cannot install " + headers},
	} {
		t.Run(tc.name, func(t *testing.T) {
			repo := signedRepo(t, tc.repo)
			a := gpustack.VerifyRepo{Dir: repo, Keyring: filepath.Join(repo, "keyring.gpg"), Packages: []string{headers}, Closure: tc.closure}
			out, err := exec.Command("sh", "-c", imagestep.VerifyRepoCommand(a, status)).CombinedOutput()
			switch {
			case tc.fail == "" && err != nil:
				t.Fatalf("self-test failed: %v\n%s", err, out)
			case tc.fail != "" && err == nil:
				t.Fatalf("self-test passed, want it to fail with %q\n%s", tc.fail, out)
			case tc.fail != "" && !strings.Contains(string(out), tc.fail):
				t.Fatalf("self-test output lacks %q:\n%s", tc.fail, out)
			}
		})
	}
}

// signedRepo builds a flat repository of the given packages, signed by a
// fresh key whose public half is its keyring.gpg.
func signedRepo(t *testing.T, pkgs [][3]string) string {
	t.Helper()
	debs := t.TempDir()
	for _, p := range pkgs {
		makeDeb(t, debs, p[0], p[1], p[2])
	}
	date := time.Now().Add(-time.Minute)
	signer, err := aptrepo.NewEphemeralSigner("podvm test", date)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "repo")
	if _, err := aptrepo.Build(context.Background(), aptrepo.Options{DebDir: debs, Out: out, Date: date, Signer: signer}); err != nil {
		t.Fatal(err)
	}
	return out
}
