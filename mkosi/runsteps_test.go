package mkosi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
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

// fakeChroot stands in for mkosi-chroot: the command runs on this host in
// a private mount namespace that gives it the image's dpkg status and one
// kernel (/usr/lib/modules/<kernel> and /boot/vmlinuz-<kernel>), and
// leaves the host as it was.
const fakeChroot = `#!/bin/sh
exec unshare -m --propagation private sh -c '
set -e
` + chroottest.KernelTreeMounts + `mkdir -p "/usr/lib/modules/$PODVM_TEST_KERNEL"
: >"/boot/vmlinuz-$PODVM_TEST_KERNEL"
mount --bind "$PODVM_TEST_STATUS" /var/lib/dpkg/status
exec "$@"' podvm-test-chroot "$@"
`

// TestRunStepsVerifyRepo runs the mkosi back end's run-steps, as the
// finalize script calls it, on a plan file with the repository's
// self-test, with the real apt: the image's kernel comes from the image,
// the package template is bound to it, and the self-test is the one the
// provisioner runs (TestVerifyRepoWithRealApt in provisioner/gpu). The
// image has the headers installed, so with local_repo_closure=none only
// the repository's own copy can pass: a repository that lacks them fails.
func TestRunStepsVerifyRepo(t *testing.T) {
	chroottest.RequireRoot(t)
	chroottest.RequireTools(t, "apt-get", "dpkg-deb", "unshare")
	const (
		kernel  = "6.12.57+deb13-amd64"
		headers = "linux-headers-" + kernel
		common  = "linux-headers-6.12.57+deb13-common"
	)
	bin := t.TempDir()
	writeFile(t, filepath.Join(bin, "mkosi-chroot"), fakeChroot)
	if err := os.Chmod(filepath.Join(bin, "mkosi-chroot"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	t.Setenv("DISTRIBUTION", "debian")
	t.Setenv("RELEASE", "trixie")
	t.Setenv("PODVM_TEST_KERNEL", kernel)
	for _, tc := range []struct {
		name    string
		repo    [][2]string // name, depends
		closure bool
		fail    string
	}{
		{"none: repository holds the headers", [][2]string{{headers, common}}, false, ""},
		{"none: repository lacks the installed headers", [][2]string{{"linux-image-" + kernel, ""}}, false, "would not take " + headers},
		{"full: repository holds the closure", [][2]string{{headers, common}, {common, ""}}, true, ""},
		{"full: repository lacks a dependency", [][2]string{{headers, common}}, true, "cannot install " + headers},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var status strings.Builder
			for _, p := range []string{headers, common} {
				fmt.Fprintf(&status, "Package: %s\nStatus: install ok installed\nVersion: 1\nArchitecture: amd64\nMaintainer: t <t@example.org>\nDescription: t\n\n", p)
			}
			writeFile(t, filepath.Join(dir, "status"), status.String())
			t.Setenv("PODVM_TEST_STATUS", filepath.Join(dir, "status"))
			scratch := filepath.Join(dir, "scratch")
			if err := os.Mkdir(scratch, 0o700); err != nil {
				t.Fatal(err)
			}
			t.Setenv("PODVM_TEST_SCRATCH", scratch)
			repo := filepath.Join(dir, "repo")
			buildRepo(t, repo, tc.repo)
			pf := planFile{Distribution: "debian", Release: "trixie", Kernels: "newest", Steps: []gpustack.Step{{
				ID: "verify", Title: "Verifying the image",
				Actions: []gpustack.Action{gpustack.VerifyRepo{Dir: repo, Keyring: filepath.Join(repo, "keyring.gpg"),
					Packages: []string{"linux-headers-" + gpustack.KernelPlaceholder}, Closure: tc.closure}},
			}}}
			data, err := json.Marshal(pf)
			if err != nil {
				t.Fatal(err)
			}
			plan := filepath.Join(dir, planFileName)
			writeFile(t, plan, string(data))
			var out, errb bytes.Buffer
			rc := RunCommand(context.Background(), []string{"run-steps", "--plan", plan, "--phase", phaseCheck, "--root", "/"}, &out, &errb)
			log := out.String() + errb.String()
			if !strings.Contains(log, "image kernels: "+kernel) || !strings.Contains(log, "[1/1] Verifying the image") {
				t.Errorf("run-steps did not find the image's kernel or announce the step:\n%s", log)
			}
			switch {
			case tc.fail == "" && rc != 0:
				t.Fatalf("run-steps: exit %d\n%s", rc, log)
			case tc.fail != "" && rc == 0:
				t.Fatalf("run-steps passed, want it to fail with %q\n%s", tc.fail, log)
			case tc.fail != "" && (!strings.Contains(log, tc.fail) || !strings.Contains(log, "step [1/1] verify (Verifying the image) failed")):
				t.Fatalf("run-steps' failure lacks %q or the step:\n%s", tc.fail, log)
			}
		})
	}
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

// TestBakeRefusesAFilledDirectory: the mkosi path downloads into the
// repository's own directory in the image, which it empties first; a
// directory that holds anything, or a file, is refused before anything is
// removed, also when a link in the image leads to it.
func TestBakeRefusesAFilledDirectory(t *testing.T) {
	for _, tc := range []struct {
		name string
		fill func(t *testing.T, root string)
		want string // "" for accepted
	}{
		{"absent", func(t *testing.T, root string) {}, ""},
		{"empty", func(t *testing.T, root string) { mkdir(t, root, "opt/local-packages") }, ""},
		{"filled by a package", func(t *testing.T, root string) {
			mkdir(t, root, "opt/local-packages")
			write(t, root, "opt/local-packages/vendor.conf")
		}, "holds vendor.conf already"},
		{"a file", func(t *testing.T, root string) { mkdir(t, root, "opt"); write(t, root, "opt/local-packages") }, "not a directory"},
		{"through a link in the image", func(t *testing.T, root string) {
			// /opt -> /srv in the image, not the build host's /srv.
			mkdir(t, root, "srv/local-packages")
			write(t, root, "srv/local-packages/keep")
			if err := os.Symlink("/srv", filepath.Join(root, "opt")); err != nil {
				t.Fatal(err)
			}
		}, "holds keep already"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			tc.fill(t, root)
			r := &stepRun{root: root, spec: filepath.Join(t.TempDir(), "absent.json"), stdout: io.Discard, stderr: io.Discard}
			// No mkosi sandbox here: past the check, the download fails
			// at once (no shell on PATH), which is not what this test is
			// about.
			t.Setenv("PATH", t.TempDir())
			err := r.bake(context.Background(), gpustack.BakeRepo{Dir: "/opt/local-packages", Packages: []string{"x"}})
			switch {
			case tc.want == "" && err != nil && strings.Contains(err.Error(), "local_repo_path"):
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
			if tc.name == "through a link in the image" {
				if _, serr := os.Stat(filepath.Join(root, "srv/local-packages/keep")); serr != nil {
					t.Errorf("the linked directory lost its file: %v", serr)
				}
			}
		})
	}
}

func mkdir(t *testing.T, root, p string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(root, p), 0o755); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, root, p string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(root, p), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
}
