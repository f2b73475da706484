package mkosi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podvm-gpu/packer-plugin-podvm/aptrepo"
	"github.com/podvm-gpu/packer-plugin-podvm/artifact"
	"github.com/podvm-gpu/packer-plugin-podvm/hostapt"
)

// TestMkosiBuild builds a real image from a generated tree: Debian trixie,
// the nvidia-gpu profile, Format=directory without a bootloader or initrd.
// It took 3-4 minutes here with a warm package cache (DKMS on 2 cores is
// most of it) and needs root, bubblewrap, systemd-container and a Debian
// archive in the host's apt sources (the build takes the host's mirror,
// as the mkosi command does), so it runs only with PODVM_MKOSI_BUILD=1:
//
//	sudo PODVM_MKOSI_BUILD=1 go test ./mkosi -run TestMkosiBuild -timeout 40m -v
//
// NVIDIA's toolkit repository is out of reach, so the toolkit comes from a
// local signed mirror of stand-in packages (testdata/toolkit-stub.sh)
// served over http on 127.0.0.1: the real source, keyring and Packages=
// wiring, and the real nvidia-ctk config step against a stand-in nvidia-ctk.
func TestMkosiBuild(t *testing.T) {
	if os.Getenv("PODVM_MKOSI_BUILD") != "1" {
		t.Skip("set PODVM_MKOSI_BUILD=1 to build a real image with mkosi (3-4 minutes with a warm cache, root)")
	}
	if os.Geteuid() != 0 {
		t.Fatal("the mkosi build test needs root")
	}
	argv := needMkosi(t)
	work := t.TempDir()

	bin := filepath.Join(work, "bin", "packer-plugin-podvm")
	if out, err := exec.Command("go", "build", "-o", bin, "..").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	mirror := filepath.Join(work, "toolkit-mirror")
	if out, err := exec.Command(filepath.Join("testdata", "toolkit-stub.sh"), mirror).CombinedOutput(); err != nil {
		t.Fatalf("toolkit-stub.sh: %v\n%s", err, out)
	}
	signer, err := aptrepo.NewEphemeralSigner("podvm toolkit test mirror", time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := aptrepo.Build(context.Background(), aptrepo.Options{DebDir: mirror, Out: mirror, Placement: aptrepo.IndexOnly,
		Date: time.Now().Add(-time.Hour), Signer: signer}); err != nil {
		t.Fatal(err)
	}
	signer.Discard()
	srv := httptest.NewServer(http.FileServer(http.Dir(mirror)))
	defer srv.Close()

	tree := filepath.Join(work, "tree")
	p := plan(t, "debian", "13", map[string]string{
		"enable_nvidia_gpu":                     "yes",
		"nvidia_container_toolkit_repo_url":     srv.URL + "/",
		"nvidia_container_toolkit_repo_keyring": filepath.Join(mirror, "keyring.asc"),
		// The open flavour of 550.163.01 failed to build against trixie's
		// 6.12.118 kernel here; the proprietary one builds.
		"nvidia_kernel_modules": "proprietary",
	})
	// The build fetches from the archive this host's apt uses.
	hostSources := hostapt.Read(hostapt.Dir)
	mirrorURL, origin := hostapt.ArchiveMirror(hostSources, "debian", "trixie")
	if mirrorURL == "" {
		t.Fatalf("no Debian archive in %s: the mkosi build test takes the host's mirror", hostapt.Dir)
	}
	security, secOrigin := hostapt.SecurityMirror(hostSources, "debian", "trixie")
	t.Logf("mirror %s (from %s); security mirror %q (from %s)", mirrorURL, origin, security, secOrigin)
	files, err := Render(context.Background(), Config{Plan: p, Bin: bin, Mirror: mirrorURL, SecurityMirror: security})
	if err != nil {
		t.Fatal(err)
	}
	if err := Write(tree, files, false); err != nil {
		t.Fatal(err)
	}

	cache := os.Getenv("PODVM_CACHE")
	if cache == "" {
		cache, _ = filepath.Abs(filepath.Join("..", ".cache"))
	}
	pkgcache := filepath.Join(cache, "mkosi-pkgcache")
	if err := os.MkdirAll(pkgcache, 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(work, "out")
	start := time.Now()
	stdout, stderr := runMkosi(t, argv, tree, "--format=directory", "--bootable=no", "--kernel-modules-initrd=no",
		"--output-dir="+out, "--package-cache-dir="+pkgcache, "-f", "build")
	t.Logf("mkosi build took %s", time.Since(start).Round(time.Second))
	// The scripts echo the plan's step titles and their own checks.
	log := string(stdout) + stderr
	for _, want := range []string{"[6/13] Building NVIDIA modules with DKMS", "[13/13] Verifying the image",
		"installs from /opt/local-packages alone", "no armored OpenPGP private key in the image"} {
		if !strings.Contains(log, want) {
			t.Errorf("build log lacks %q", want)
		}
	}
	checkImage(t, filepath.Join(out, "image"), out)
}

func checkImage(t *testing.T, img, out string) {
	t.Helper()
	// Kernels of the image, not the host's.
	mods, err := os.ReadDir(filepath.Join(img, "usr/lib/modules"))
	if err != nil || len(mods) == 0 {
		t.Fatalf("no kernel in the image: %v", err)
	}
	kernel := mods[len(mods)-1].Name()
	host, _ := exec.Command("uname", "-r").Output()
	if strings.TrimSpace(string(host)) == kernel {
		t.Logf("image kernel %s equals the host's: the check cannot tell them apart", kernel)
	}
	ko, _ := filepath.Glob(filepath.Join(img, "usr/lib/modules", kernel, "updates/dkms/nvidia-current.ko*"))
	if len(ko) == 0 {
		t.Fatalf("nvidia-current.ko missing for the image kernel %s", kernel)
	}
	if magic, err := vermagic(ko[0]); err != nil || !strings.HasPrefix(magic, kernel+" ") {
		t.Errorf("%s vermagic %q (%v), want %s", ko[0], magic, err, kernel)
	}

	hook := filepath.Join(img, "usr/share/oci/hooks/prestart/nvidia-container-toolkit.sh")
	if fi, err := os.Stat(hook); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("hook: %v %v", fi, err)
	}
	cfg, err := os.ReadFile(filepath.Join(img, "etc/nvidia-container-runtime/config.toml"))
	if err != nil || !strings.Contains(string(cfg), "nvidia-container-cli.no-cgroups = true") {
		t.Errorf("toolkit config: %v\n%s", err, cfg)
	}
	if _, err := os.Lstat(filepath.Join(img, "etc/systemd/system/multi-user.target.wants/nvidia-persistenced.service")); err != nil {
		t.Errorf("nvidia-persistenced not enabled: %v", err)
	}

	repo := filepath.Join(img, "opt/local-packages")
	for _, f := range []string{"InRelease", "Release.gpg", "Packages", "keyring.gpg", "manifest.json"} {
		if _, err := os.Stat(filepath.Join(repo, f)); err != nil {
			t.Errorf("repo: %v", err)
		}
	}
	// The driver container's view: the repository as the only source,
	// nothing installed, the public keyring from the image.
	aptCheck(t, repo, filepath.Join(img, "usr/share/keyrings/podvm-local-packages.gpg"), "linux-headers-"+kernel)

	var m artifact.Manifest
	data, err := os.ReadFile(filepath.Join(repo, "manifest.json"))
	if err == nil {
		err = json.Unmarshal(data, &m)
	}
	if err != nil {
		t.Fatalf("manifest: %v", err)
	}
	if len(m.Kernels) != 1 || m.Kernels[0] != kernel || m.Repo == nil || m.Repo.Fingerprint == "" || m.GPU == nil {
		t.Errorf("manifest: kernels %v repo %+v gpu %+v", m.Kernels, m.Repo, m.GPU)
	} else {
		found := false
		for _, p := range m.Repo.Packages {
			found = found || p.Name == "linux-headers-"+kernel
		}
		if !found {
			t.Errorf("manifest lists no linux-headers-%s", kernel)
		}
	}
	for _, f := range []string{artifact.SourcesFile, artifact.ConfigMapFile, artifact.ValuesFile, artifact.KeyFile, artifact.ManifestFile} {
		if _, err := os.Stat(filepath.Join(out, "podvm-artifacts", f)); err != nil {
			t.Errorf("host artifact: %v", err)
		}
	}
	if leaks, _ := exec.Command("grep", "-rlsF", "-e", "PRIVATE KEY BLOCK", img).Output(); len(leaks) > 0 {
		t.Errorf("private key material in the image:\n%s", leaks)
	}
}

// aptCheck runs the host's apt with the repository as its only source and
// an empty dpkg status, and simulates installing pkg.
func aptCheck(t *testing.T, repo, keyring, pkg string) {
	t.Helper()
	d := t.TempDir()
	for _, sub := range []string{"lists/partial", "archives/partial", "parts"} {
		if err := os.MkdirAll(filepath.Join(d, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	src := "Types: deb\nURIs: file://" + repo + "\nSuites: ./\nSigned-By: " + keyring + "\n"
	for name, data := range map[string]string{"parts/local.sources": src, "sources.list": "", "status": ""} {
		if err := os.WriteFile(filepath.Join(d, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	opts := []string{"-o", "Dir::Etc::SourceList=" + d + "/sources.list", "-o", "Dir::Etc::SourceParts=" + d + "/parts",
		"-o", "Dir::State::Lists=" + d + "/lists", "-o", "Dir::State::Status=" + d + "/status",
		"-o", "Dir::Cache::Archives=" + d + "/archives", "-o", "Dir::Cache::pkgcache=", "-o", "Dir::Cache::srcpkgcache=",
		"-o", "APT::Sandbox::User=root", "-o", "Debug::NoLocking=1"}
	if out, err := exec.Command("apt-get", append(opts, "update")...).CombinedOutput(); err != nil || strings.Contains(string(out), "W: ") {
		t.Fatalf("apt refused the repository: %v\n%s", err, out)
	}
	if out, err := exec.Command("apt-get", append(opts, "-s", "install", pkg)...).CombinedOutput(); err != nil {
		t.Fatalf("apt cannot install %s from the repository alone: %v\n%s", pkg, err, out)
	}
}

// vermagic reads a module's vermagic= string; modules are compressed as
// the kernel's packaging chose, and the host need not have kmod.
func vermagic(ko string) (string, error) {
	var data []byte
	var err error
	switch filepath.Ext(ko) {
	case ".xz":
		data, err = exec.Command("xz", "-dc", ko).Output()
	case ".zst":
		data, err = exec.Command("zstd", "-dcq", ko).Output()
	case ".gz":
		data, err = exec.Command("gzip", "-dc", ko).Output()
	default:
		data, err = os.ReadFile(ko)
	}
	if err != nil {
		return "", err
	}
	_, rest, ok := bytes.Cut(data, []byte("\x00vermagic="))
	if !ok {
		return "", errors.New("no vermagic in the module")
	}
	magic, _, _ := bytes.Cut(rest, []byte{0})
	return string(magic), nil
}
