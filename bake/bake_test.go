package bake

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/podvm-gpu/packer-plugin-podvm/gpustack"
	"github.com/podvm-gpu/packer-plugin-podvm/sbom"
	"github.com/podvm-gpu/packer-plugin-podvm/settings"
)

const testStatus = "Package: nvidia-kernel-dkms\nStatus: hold ok installed\nVersion: 550.163.01-2\nArchitecture: amd64\nDescription: x\n multi-line: not a field\n\n" +
	"Package: nvidia-removed\nStatus: deinstall ok config-files\nVersion: 1\nArchitecture: amd64\n\n" +
	"Package: libcuda1\nStatus: install ok installed\nVersion: 550.163.01-2\nArchitecture: amd64\n\n" +
	"Package: linux-image-6.12.57+deb13-amd64\nStatus: hold ok installed\nVersion: 6.12.57-1\nArchitecture: amd64\n\n" +
	"Package: bash\nStatus: install ok installed\nVersion: 5.2\nArchitecture: amd64\n"

func testPlan(t *testing.T, gpu bool) *gpustack.Plan {
	t.Helper()
	env := map[string]string{"SOURCE_DATE_EPOCH": "1700000000"}
	if !gpu {
		env["ENABLE_NVIDIA_GPU"] = "no"
		env["LOCAL_REPO"] = "yes"
	}
	res, err := settings.Resolve(settings.Input{LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if err != nil {
		t.Fatal(err)
	}
	p, err := gpustack.NewPlan(res.Options, gpustack.Target{Distro: "debian", Version: "13", Codename: "trixie", Arch: "amd64", Kernels: []string{"6.12.57+deb13-amd64"}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSpecManifest checks the manifest both back ends write, from the
// plan's named data and the image's dpkg status.
func TestSpecManifest(t *testing.T) {
	date := time.Unix(1700000000, 0).In(time.FixedZone("x", 3600))
	for _, tc := range []struct {
		name    string
		gpu     bool
		held    []string
		gpuPkgs []string
	}{
		{"gpu", true, []string{"linux-image-6.12.57+deb13-amd64", "nvidia-kernel-dkms"}, []string{"libcuda1", "nvidia-kernel-dkms"}},
		{"node profile", false, []string{"linux-image-6.12.57+deb13-amd64", "nvidia-kernel-dkms"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := SpecFor(testPlan(t, tc.gpu), "g")
			if err != nil {
				t.Fatal(err)
			}
			m, err := s.Manifest(&Repo{Path: "/opt/local-packages"}, ImageState{Kernels: []string{"k"}, DpkgStatus: []byte(testStatus), ModuleCert: []byte{1}}, date)
			if err != nil {
				t.Fatal(err)
			}
			if m.Created != "2023-11-14T22:13:20Z" || m.Generator != "g" || m.Target.Codename != "trixie" || !slices.Equal(m.Kernels, []string{"k"}) || m.Repo == nil {
				t.Errorf("manifest: %+v", m)
			}
			if !slices.Equal(m.Held, tc.held) {
				t.Errorf("held %q, want %q", m.Held, tc.held)
			}
			if !tc.gpu {
				if m.GPU != nil {
					t.Errorf("GPU off, yet %+v", m.GPU)
				}
				return
			}
			var names []string
			for _, p := range m.GPU.Packages {
				names = append(names, p.Name)
			}
			if !slices.Equal(names, tc.gpuPkgs) {
				t.Errorf("GPU packages %q, want %q", names, tc.gpuPkgs)
			}
			g := m.GPU
			if g.DriverVersion != "550.163.01-2" || g.Flavour != "proprietary" || !g.Toolkit || g.ToolkitVersion != settings.DefaultToolkitVersion || g.HookMode != "both" {
				t.Errorf("GPU: %+v", g)
			}
			if g.ModuleSigning == nil || g.ModuleSigning.Mode != "ephemeral" || g.ModuleSigning.CertSHA256 != CertSHA256([]byte{1}) {
				t.Errorf("module signing: %+v", g.ModuleSigning)
			}
			if s.Base.GPU.ModuleSigning.CertSHA256 != "" || s.Base.GPU.Packages != nil {
				t.Error("Manifest changed the spec's base")
			}
		})
	}
}

func TestSpecForNeedsRepo(t *testing.T) {
	p := testPlan(t, true)
	p.Repo = nil
	if _, err := SpecFor(p, "g"); err == nil {
		t.Error("a plan without a repository: want an error")
	}
}

// TestInTree bakes a one-package repository into an image tree, as the
// mkosi build does, and checks what lands in the tree and beside it.
func TestInTree(t *testing.T) {
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		t.Skip("no dpkg-deb to build a test package")
	}
	root, work, arts := t.TempDir(), t.TempDir(), t.TempDir()
	s, err := SpecFor(testPlan(t, true), "g")
	if err != nil {
		t.Fatal(err)
	}
	s.Repo.SourcesFile = true
	repo := filepath.Join(root, "opt/local-packages")
	pkg := filepath.Join(work, "pkg")
	for _, d := range []string{filepath.Join(pkg, "DEBIAN"), repo, filepath.Join(root, "var/lib/dpkg"), filepath.Join(root, "usr/share/podvm-gpu")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	control := "Package: podvm-test\nVersion: 1.0\nArchitecture: amd64\nMaintainer: t <t@podvm.invalid>\nDescription: test\n"
	if err := os.WriteFile(filepath.Join(pkg, "DEBIAN/control"), []byte(control), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("dpkg-deb", "--root-owner-group", "-b", pkg, filepath.Join(repo, "podvm-test_1.0_amd64.deb")).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(root, "var/lib/dpkg/status"), []byte(testStatus), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "usr/share/podvm-gpu/module-signing.der"), testCert(t), 0o644); err != nil {
		t.Fatal(err)
	}
	sigs := "6.12.57+deb13-amd64\t/usr/lib/modules/6.12.57+deb13-amd64/updates/dkms/nvidia-current.ko.xz\tpodvm-gpu ephemeral module signing key\t1F:2E\tsha256\n"
	if err := os.WriteFile(filepath.Join(root, "usr/share/podvm-gpu/module-signatures.tsv"), []byte(sigs), 0o644); err != nil {
		t.Fatal(err)
	}
	idx, err := s.InTree(context.Background(), Tree{Root: root, Kernels: []string{"6.12.57+deb13-amd64"}, Date: time.Unix(1700000000, 0), ArtifactsDir: arts})
	if err != nil {
		t.Fatal(err)
	}
	if len(idx.Packages) != 1 || idx.Fingerprint == "" {
		t.Errorf("index: %+v", idx)
	}
	for _, f := range []string{"opt/local-packages/InRelease", "opt/local-packages/Packages", "opt/local-packages/manifest.json",
		"usr/share/keyrings/podvm-local-packages.gpg", "etc/apt/sources.list.d/local-packages.sources"} {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Errorf("in the image: %v", err)
		}
	}
	for _, f := range []string{ManifestFile, KeyFile, SourcesFile, ConfigMapFile, ModuleCertDERFile, ModuleCertPEMFile, sbom.File} {
		if _, err := os.Stat(filepath.Join(arts, f)); err != nil {
			t.Errorf("beside the image: %v", err)
		}
	}
	// The record is signed by the repository's key: sqv, as apt uses it,
	// verifies both against the keyring in the image, and refuses a
	// manifest changed by one byte.
	keyring := filepath.Join(arts, KeyFile) // armored, as users get it
	for _, f := range []string{ManifestFile, sbom.File} {
		out, err := exec.Command("sqv", "--keyring", keyring, filepath.Join(arts, f+SignatureSuffix), filepath.Join(arts, f)).CombinedOutput()
		if err != nil || !strings.Contains(string(out), idx.Fingerprint) {
			t.Errorf("sqv %s: %v\n%s", f+SignatureSuffix, err, out)
		}
	}
	// And as docs/verification.md shows it with GnuPG.
	gpgHome := t.TempDir()
	dearmored := filepath.Join(work, "keyring.gpg")
	cmd := exec.Command("sh", "-c", `gpg --dearmor <"$1" >"$2"`, "sh", keyring, dearmored)
	cmd.Env = append(os.Environ(), "GNUPGHOME="+gpgHome)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gpg --dearmor: %v\n%s", err, out)
	}
	for _, f := range []string{ManifestFile, sbom.File} {
		cmd := exec.Command("gpgv", "--keyring", dearmored, filepath.Join(arts, f+SignatureSuffix), filepath.Join(arts, f))
		cmd.Env = append(os.Environ(), "GNUPGHOME="+gpgHome)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("gpgv %s: %v\n%s", f+SignatureSuffix, err, out)
		}
	}
	inArts, err := os.ReadFile(filepath.Join(arts, ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	tampered := filepath.Join(work, "manifest.json")
	if err := os.WriteFile(tampered, append(inArts, ' '), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("sqv", "--keyring", keyring, filepath.Join(arts, ManifestFile+SignatureSuffix), tampered).CombinedOutput(); err == nil {
		t.Errorf("sqv accepted a changed manifest:\n%s", out)
	}
	bom, err := os.ReadFile(filepath.Join(arts, sbom.File))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(bom), `"purl": "pkg:deb/debian/nvidia-kernel-dkms@550.163.01-2?arch=amd64&distro=debian-13"`) {
		t.Errorf("the SBOM lacks the driver:\n%s", bom)
	}
	raw, err := os.ReadFile(filepath.Join(repo, ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	var m Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	if m.Repo == nil || len(m.Repo.Packages) != 1 || m.Repo.Packages[0].Name != "podvm-test" || m.Repo.Fingerprint != idx.Fingerprint {
		t.Errorf("repo: %+v", m.Repo)
	}
	if m.GPU.DriverVersion != "550.163.01-2" || m.GPU.ModuleSigning.CertSHA256 == "" {
		t.Errorf("gpu: %+v", m.GPU)
	}
	want := []ModuleSignature{{Kernel: "6.12.57+deb13-amd64", File: "/usr/lib/modules/6.12.57+deb13-amd64/updates/dkms/nvidia-current.ko.xz",
		Signer: "podvm-gpu ephemeral module signing key", SigKey: "1F:2E", HashAlgo: "sha256"}}
	if !slices.Equal(m.GPU.ModuleSigning.Modules, want) {
		t.Errorf("module signatures %+v, want %+v", m.GPU.ModuleSigning.Modules, want)
	}
	filepath.Walk(root, func(p string, _ os.FileInfo, _ error) error {
		if strings.Contains(filepath.Base(p), ".podvm-tmp") || strings.HasPrefix(filepath.Base(p), ".manifest.json.") {
			t.Errorf("temporary file left in the image: %s", p)
		}
		return nil
	})
}

// testCert is a fixed test certificate (public only).
func testCert(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/module-signing.der")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseSignatures(t *testing.T) {
	if _, err := parseSignatures([]byte("k\tf\ts\tid\n")); err == nil || !strings.Contains(err.Error(), "module-signatures.tsv:1") {
		t.Errorf("four fields: %v", err)
	}
	if _, err := parseSignatures([]byte("k\tf\t\tid\tsha256\n")); err == nil {
		t.Error("no signer: accepted")
	}
	got, err := parseSignatures(nil)
	if err != nil || got != nil {
		t.Errorf("empty: %v %v", got, err)
	}
}

// TestManifestDriverSourceTaken: with nvidia_driver_source=auto on Ubuntu
// the manifest records what the image took, and the signing that goes
// with it; a file that says neither fails the bake.
func TestManifestDriverSourceTaken(t *testing.T) {
	env := map[string]string{"SOURCE_DATE_EPOCH": "1700000000"}
	res, err := settings.Resolve(settings.Input{LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if err != nil {
		t.Fatal(err)
	}
	const k = "6.8.0-50-generic"
	p, err := gpustack.NewPlan(res.Options, gpustack.Target{Distro: "ubuntu", Version: "24.04", Codename: "noble", Arch: "amd64", Kernels: []string{k}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := SpecFor(p, "g")
	if err != nil {
		t.Fatal(err)
	}
	if !s.ChoosesDriver() {
		t.Fatal("an Ubuntu auto plan's spec does not choose the driver in the image")
	}
	if cert, sigs := s.ModuleFiles(gpustack.TakenPrecompiled); cert != "" || !sigs {
		t.Errorf("precompiled reads certificate %q, signatures %v; want none and the signatures", cert, sigs)
	}
	if cert, sigs := s.ModuleFiles(gpustack.TakenDistro); cert == "" || !sigs {
		t.Errorf("distro reads certificate %q, signatures %v; want the build's certificate and the signatures", cert, sigs)
	}
	canonical := k + "\t/usr/lib/modules/" + k + "/kernel/nvidia-570srv-open/nvidia.ko\tBuild time autogenerated kernel key\t0A:0B\tsha512\n"
	ours := k + "\t/usr/lib/modules/" + k + "/updates/dkms/nvidia.ko.zst\tpodvm-gpu ephemeral module signing key\t1C:1D\tsha256\n"
	for _, tc := range []struct {
		taken, sigs string
		cert        []byte
		mode        settings.SigningMode
		signer, bad string
	}{
		{taken: gpustack.TakenPrecompiled, sigs: canonical, mode: settings.SigningDistribution, signer: "Build time autogenerated kernel key"},
		{taken: gpustack.TakenDistro, sigs: ours, cert: []byte{1}, mode: settings.SigningEphemeral, signer: "podvm-gpu ephemeral module signing key"},
		{taken: "dkms", bad: "driver source \"dkms\""},
	} {
		t.Run(tc.taken, func(t *testing.T) {
			m, err := s.Manifest(&Repo{Path: "/opt/local-packages"}, ImageState{Kernels: []string{k}, DpkgStatus: []byte(testStatus),
				ModuleCert: tc.cert, ModuleSignatures: []byte(tc.sigs), DriverSource: tc.taken}, time.Unix(1700000000, 0))
			if tc.bad != "" {
				if err == nil || !strings.Contains(err.Error(), tc.bad) {
					t.Fatalf("got %v; want an error naming %s", err, tc.bad)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			g := m.GPU
			if g.SourceTaken != tc.taken || g.ModuleSigning == nil || g.ModuleSigning.Mode != tc.mode || g.ModuleSigning.Signer != tc.signer || len(g.ModuleSigning.Modules) != 1 {
				t.Errorf("taken %q, module signing %+v", g.SourceTaken, g.ModuleSigning)
			}
		})
	}
}
