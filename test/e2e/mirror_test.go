//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/podvm-gpu/packer-plugin-podvm/aptrepo"
)

// toolkitVersion is the NVIDIA container toolkit release whose Go sources
// tools/nvctk pins.
const toolkitVersion = "1.17.8-1"

// toolkitMirror is a local stand-in for NVIDIA's container toolkit apt
// repository, which CI cannot reach. nvidia-ctk and the runtime hook are
// built from NVIDIA's own sources (tools/nvctk), so the toolkit config edit
// in the image runs the real nvidia-ctk; libnvidia-container (C) is not
// built here, so its two packages are empty stand-ins. The repository is
// signed with a key of the test's, passed as the mirror keyring, which is
// exactly the air-gapped mirror path users take.
type toolkitMirror struct {
	URL     string // http://127.0.0.1:port
	Keyring string // binary public keyring on the host
}

func startToolkitMirror(t *testing.T, root, cache string) toolkitMirror {
	t.Helper()
	bin := filepath.Join(cache, "nvctk-"+toolkitVersion)
	if _, err := os.Stat(filepath.Join(bin, "nvidia-ctk")); err != nil {
		run(t, filepath.Join(root, "tools/nvctk"), "go", "build", "-o", bin+"/",
			"github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-ctk",
			"github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-container-runtime-hook")
	}
	work := t.TempDir()
	debs := filepath.Join(work, "debs")
	must(t, os.MkdirAll(debs, 0o755))

	base := pkgTree(t, work, "nvidia-container-toolkit-base", "", "NVIDIA container toolkit base (nvidia-ctk), built from source for podvm e2e")
	install(t, filepath.Join(bin, "nvidia-ctk"), filepath.Join(base, "usr/bin/nvidia-ctk"), 0o755)
	cfg := filepath.Join(base, "etc/nvidia-container-runtime/config.toml")
	must(t, os.MkdirAll(filepath.Dir(cfg), 0o755))
	run(t, work, filepath.Join(bin, "nvidia-ctk"), "config", "default", "--output="+cfg)
	must(t, os.WriteFile(filepath.Join(base, "DEBIAN/conffiles"), []byte("/etc/nvidia-container-runtime/config.toml\n"), 0o644))

	hook := pkgTree(t, work, "nvidia-container-toolkit",
		fmt.Sprintf("nvidia-container-toolkit-base (= %s), libnvidia-container-tools (>= %s)", toolkitVersion, toolkitVersion),
		"NVIDIA container runtime hook, built from source for podvm e2e")
	install(t, filepath.Join(bin, "nvidia-container-runtime-hook"), filepath.Join(hook, "usr/bin/nvidia-container-runtime-hook"), 0o755)
	must(t, os.Symlink("nvidia-container-runtime-hook", filepath.Join(hook, "usr/bin/nvidia-container-toolkit")))

	lib := pkgTree(t, work, "libnvidia-container1", "", "stand-in: libnvidia-container is C and not built by the podvm e2e test")
	tools := pkgTree(t, work, "libnvidia-container-tools", fmt.Sprintf("libnvidia-container1 (>= %s)", toolkitVersion),
		"stand-in: libnvidia-container is C and not built by the podvm e2e test")

	for _, tree := range []string{base, hook, lib, tools} {
		run(t, work, "dpkg-deb", "--root-owner-group", "--build", tree, debs)
	}
	date := time.Now().Add(-time.Minute).Truncate(time.Second)
	signer, err := aptrepo.NewEphemeralSigner("podvm e2e toolkit mirror", date)
	must(t, err)
	repo := filepath.Join(work, "repo")
	res, err := aptrepo.Build(context.Background(), aptrepo.Options{DebDir: debs, Out: repo, Placement: aptrepo.Copy,
		Origin: "podvm-e2e", Label: "toolkit mirror", Date: date, Signer: signer})
	must(t, err)
	keyring := filepath.Join(work, "toolkit-mirror.gpg")
	must(t, os.WriteFile(keyring, signer.PublicKeyring(), 0o644))
	signer.Discard()
	t.Logf("toolkit mirror: %d packages, key %s", len(res.Packages), res.Fingerprint)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	srv := &http.Server{Handler: http.FileServer(http.Dir(repo))}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return toolkitMirror{URL: "http://" + ln.Addr().String(), Keyring: keyring}
}

// pkgTree makes a dpkg-deb tree with a control file and returns its root.
func pkgTree(t *testing.T, work, name, depends, desc string) string {
	t.Helper()
	root := filepath.Join(work, name)
	must(t, os.MkdirAll(filepath.Join(root, "DEBIAN"), 0o755))
	must(t, os.MkdirAll(filepath.Join(root, "usr/share/doc", name), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "usr/share/doc", name, "README.podvm-e2e"), []byte(desc+"\n"), 0o644))
	control := fmt.Sprintf("Package: %s\nVersion: %s\nArchitecture: amd64\nMaintainer: podvm e2e <e2e@invalid>\n", name, toolkitVersion)
	if depends != "" {
		control += "Depends: " + depends + "\n"
	}
	control += "Description: " + desc + "\n"
	must(t, os.WriteFile(filepath.Join(root, "DEBIAN/control"), []byte(control), 0o644))
	return root
}

func install(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(src)
	must(t, err)
	must(t, os.MkdirAll(filepath.Dir(dst), 0o755))
	must(t, os.WriteFile(dst, b, mode))
}

func run(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return string(out)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
