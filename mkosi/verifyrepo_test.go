package mkosi

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podvm-gpu/packer-plugin-podvm/aptrepo"
	"github.com/podvm-gpu/packer-plugin-podvm/chroot/chroottest"
	"github.com/podvm-gpu/packer-plugin-podvm/gpustack"
)

// TestVerifyRepoSharesTheProvisionersApt checks that the finalize script
// runs the self-test's apt through gpustack.VerifyRepoShell, the function
// the provisioner runs too, rather than an apt command line of its own.
func TestVerifyRepoSharesTheProvisionersApt(t *testing.T) {
	p := plan(t, "debian", "13", map[string]string{"enable_nvidia_gpu": "no", "local_repo": "yes"})
	files, err := Render(context.Background(), Config{Plan: p, Bin: goldenBin, HTTPClient: noNetwork})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range files {
		s := string(f.Data)
		if !strings.Contains(s, "\nverify_repo '") {
			continue
		}
		found = true
		if !strings.Contains(s, gpustack.VerifyRepoShell) {
			t.Errorf("%s calls verify_repo but lacks gpustack.VerifyRepoShell", f.Path)
		}
	}
	if !found {
		t.Fatal("no script runs verify_repo")
	}
	fn := shellFunction(t, "verify_repo")
	if !strings.Contains(fn, `verify_repo_apt "$apt" "$d"`) || strings.Contains(fn, "install") {
		t.Errorf("verify_repo runs apt on its own instead of through verify_repo_apt:\n%s", fn)
	}
}

// TestVerifyRepoWithRealApt runs the finalize script's verify_repo with the
// build host's apt (the image has none) against real signed repositories.
// The image has the headers installed, so with local_repo_closure=none a
// repository that lacks them must still fail the self-test.
func TestVerifyRepoWithRealApt(t *testing.T) {
	chroottest.RequireTools(t, "apt-get", "dpkg-deb")
	const (
		kernel  = "6.12.57+deb13-amd64"
		headers = "linux-headers-" + kernel
		common  = "linux-headers-6.12.57+deb13-common"
	)
	for _, tc := range []struct {
		name    string
		repo    [][2]string // name, depends
		closure string
		fail    bool
	}{
		{"none: repository holds the headers", [][2]string{{headers, common}}, "partial", false},
		{"none: repository lacks the installed headers", [][2]string{{"linux-image-" + kernel, ""}}, "partial", true},
		{"full: repository holds the closure", [][2]string{{headers, common}, {common, ""}}, "full", false},
		{"full: repository lacks a dependency", [][2]string{{headers, common}}, "full", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			var status strings.Builder
			for _, p := range []string{headers, common} {
				fmt.Fprintf(&status, "Package: %s\nStatus: install ok installed\nVersion: 1\nArchitecture: amd64\nMaintainer: t <t@example.org>\nDescription: t\n\n", p)
			}
			writeFile(t, filepath.Join(root, "var/lib/dpkg/status"), status.String())
			buildRepo(t, filepath.Join(root, "opt/local-packages"), tc.repo)
			script := "die() { echo \"podvm: $*\" >&2; exit 1; }\nkernels='" + kernel + "'\n" +
				shellFunction(t, "verify_repo") + gpustack.VerifyRepoShell +
				"verify_repo /opt/local-packages /opt/local-packages/keyring.gpg " + tc.closure + " 'linux-headers-{kernel}'\n"
			cmd := exec.Command("sh", "-eu", "-c", script)
			cmd.Env = append(os.Environ(), "BUILDROOT="+root)
			out, err := cmd.CombinedOutput()
			if tc.fail != (err != nil) {
				t.Fatalf("self-test: %v, want failure %v\n%s", err, tc.fail, out)
			}
			if tc.fail && !strings.Contains(string(out), "failed its self-test") {
				t.Errorf("failure does not say so:\n%s", out)
			}
		})
	}
}

// shellFunction returns the definition of the prelude's function name.
func shellFunction(t *testing.T, name string) string {
	t.Helper()
	start := strings.Index(prelude, "\n"+name+"() {\n")
	if start < 0 {
		t.Fatalf("prelude defines no %s", name)
	}
	end := strings.Index(prelude[start:], "\n}\n")
	return prelude[start+1 : start+end+3]
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// buildRepo writes a flat repository of tiny packages into out, signed by
// a fresh key whose public half is out/keyring.gpg.
func buildRepo(t *testing.T, out string, pkgs [][2]string) {
	t.Helper()
	debs := t.TempDir()
	for _, p := range pkgs {
		dir := filepath.Join(t.TempDir(), p[0])
		control := "Package: " + p[0] + "\nVersion: 1\nArchitecture: amd64\nMaintainer: t <t@example.org>\nDescription: t\n"
		if p[1] != "" {
			control += "Depends: " + p[1] + "\n"
		}
		writeFile(t, filepath.Join(dir, "DEBIAN/control"), control)
		if b, err := exec.Command("dpkg-deb", "--root-owner-group", "-Zgzip", "--build", dir, filepath.Join(debs, p[0]+"_1_amd64.deb")).CombinedOutput(); err != nil {
			t.Fatalf("dpkg-deb: %v\n%s", err, b)
		}
	}
	date := time.Now().Add(-time.Minute)
	signer, err := aptrepo.NewEphemeralSigner("podvm test", date)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := aptrepo.Build(context.Background(), aptrepo.Options{DebDir: debs, Out: out, Date: date, Signer: signer}); err != nil {
		t.Fatal(err)
	}
}
