package mkosi

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podvm-gpu/packer-plugin-podvm/artifact"
)

// TestBakeManifest bakes a one-package repository into a fake image and
// checks the manifest: created in RFC 3339 from SOURCE_DATE_EPOCH, the
// installed GPU packages, the baked packages.
func TestBakeManifest(t *testing.T) {
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		t.Skip("no dpkg-deb to build a test package")
	}
	t.Setenv("SOURCE_DATE_EPOCH", "1700000000")
	root, work := t.TempDir(), t.TempDir()
	repo := filepath.Join(root, "opt/local-packages")
	pkg := filepath.Join(work, "pkg")
	if err := os.MkdirAll(filepath.Join(pkg, "DEBIAN"), 0o755); err != nil {
		t.Fatal(err)
	}
	control := "Package: podvm-test\nVersion: 1.0\nArchitecture: amd64\nMaintainer: t <t@podvm.invalid>\nDescription: test\n"
	if err := os.WriteFile(filepath.Join(pkg, "DEBIAN/control"), []byte(control), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("dpkg-deb", "--root-owner-group", "-b", pkg, filepath.Join(repo, "podvm-test_1.0_amd64.deb")).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb: %v\n%s", err, out)
	}
	status := "Package: nvidia-open-kernel-dkms\nStatus: install ok installed\nVersion: 570.1-1\nArchitecture: amd64\n\n" +
		"Package: nvidia-removed\nStatus: deinstall ok config-files\nVersion: 1\nArchitecture: amd64\n\n" +
		"Package: bash\nStatus: install ok installed\nVersion: 5.2\nArchitecture: amd64\n"
	if err := os.MkdirAll(filepath.Join(root, "var/lib/dpkg"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "var/lib/dpkg/status"), []byte(status), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := bakeSpec{Dir: "/opt/local-packages", Keyring: "/usr/share/keyrings/podvm-local-packages.gpg",
		Installed: []string{"nvidia-open-kernel-dkms", "nvidia-removed"},
		Manifest:  artifact.Manifest{Generator: "test", Kernels: []string{"{kernel}"}, GPU: &artifact.GPU{DriverBranch: "570"}}}
	data, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	specPath := filepath.Join(work, "podvm-bake.json")
	if err := os.WriteFile(specPath, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := (Bake{Root: root, Spec: specPath, SrcDir: work, Kernels: []string{"6.12.57+deb13-amd64"}}).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(repo, artifact.ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	var m artifact.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	if m.Created != "2023-11-14T22:13:20Z" {
		t.Errorf("created %q, want 2023-11-14T22:13:20Z", m.Created)
	}
	// The spec holds the plan's kernel template; the manifest, the image's kernels.
	if len(m.Kernels) != 1 || m.Kernels[0] != "6.12.57+deb13-amd64" {
		t.Errorf("kernels %q, want the image's [6.12.57+deb13-amd64]", m.Kernels)
	}
	if m.GPU == nil || len(m.GPU.Packages) != 1 || m.GPU.Packages[0].Name != "nvidia-open-kernel-dkms" || m.GPU.Packages[0].Version != "570.1-1" {
		t.Errorf("gpu packages: %+v", m.GPU)
	}
	if m.Repo == nil || len(m.Repo.Packages) != 1 || m.Repo.Packages[0].Name != "podvm-test" {
		t.Errorf("repo: %+v", m.Repo)
	}
	filepath.Walk(root, func(p string, _ os.FileInfo, _ error) error {
		if strings.HasSuffix(p, ".podvm-tmp") {
			t.Errorf("temporary file left in the image: %s", p)
		}
		return nil
	})
}
