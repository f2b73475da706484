package mkosi

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/packet"

	"github.com/podvm-gpu/packer-plugin-podvm/bake"
)

// TestBakeFromTree runs the host-side half of run-steps' bake as the
// rendered tree sets it up: the tree's podvm-bake.json, a signing key
// mounted below $SRCDIR, a .deb in the image's repository directory. The
// repository is signed by that key, and the manifest and the artefacts
// come out.
func TestBakeFromTree(t *testing.T) {
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		t.Skip("no dpkg-deb to build a test package")
	}
	srcdir, root, arts := t.TempDir(), t.TempDir(), t.TempDir()
	key := writeTestKey(t, filepath.Join(srcdir, signingKeySource))
	p := plan(t, "debian", "13", map[string]string{"enable_nvidia_gpu": "no", "local_repo": "yes", "source_date_epoch": "1700000000",
		"local_repo_signing_key": key})
	files, err := Render(context.Background(), Config{Plan: p, Bin: goldenBin, HTTPClient: noNetwork})
	if err != nil {
		t.Fatal(err)
	}
	var spec string
	for _, f := range files {
		if filepath.Base(f.Path) == "podvm-bake.json" {
			spec = filepath.Join(srcdir, f.Path)
			if err := os.MkdirAll(filepath.Dir(spec), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(spec, f.Data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if spec == "" {
		t.Fatal("the tree has no podvm-bake.json")
	}
	repo := filepath.Join(root, "opt/local-packages")
	pkg := filepath.Join(t.TempDir(), "pkg")
	for _, d := range []string{filepath.Join(pkg, "DEBIAN"), repo, filepath.Join(root, "var/lib/dpkg")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(pkg, "DEBIAN/control"), []byte("Package: linux-headers-6.12.1-amd64\nVersion: 1\nArchitecture: amd64\nMaintainer: t <t@podvm.invalid>\nDescription: t\n"), 0o644)
	if out, err := exec.Command("dpkg-deb", "--root-owner-group", "-b", pkg, filepath.Join(repo, "linux-headers-6.12.1-amd64_1_amd64.deb")).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb: %v\n%s", err, out)
	}
	os.WriteFile(filepath.Join(root, "var/lib/dpkg/status"), []byte("Package: linux-image-6.12.1-amd64\nStatus: hold ok installed\nVersion: 1\nArchitecture: amd64\n"), 0o644)
	t.Setenv("SOURCE_DATE_EPOCH", "1700000000")
	idx, err := (Bake{Root: root, Spec: spec, SrcDir: srcdir, Kernels: []string{"6.12.1-amd64"}, ArtifactsDir: arts}).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var m bake.Manifest
	data, err := os.ReadFile(filepath.Join(arts, bake.ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	fp, err := bake.SignerFingerprint(key, "", p.Timestamp)
	if err != nil {
		t.Fatal(err)
	}
	if m.Repo == nil || m.Repo.Fingerprint != fp || len(m.Repo.Packages) != 1 || m.Created != "2023-11-14T22:13:20Z" ||
		m.Generator != Generator || strings.Join(m.Held, " ") != "linux-image-6.12.1-amd64" || strings.Join(m.Kernels, " ") != "6.12.1-amd64" {
		t.Errorf("manifest: %s", data)
	}
	if idx.Fingerprint != fp {
		t.Errorf("index signed by %s, want %s", idx.Fingerprint, fp)
	}
}

// writeTestKey writes an armored OpenPGP private key, made in 2020, into
// dir and returns its path.
func writeTestKey(t *testing.T, dir string) string {
	t.Helper()
	created := time.Unix(1600000000, 0)
	e, err := openpgp.NewEntity("podvm test", "", "", &packet.Config{Algorithm: packet.PubKeyAlgoEdDSA, Curve: packet.Curve25519,
		Time: func() time.Time { return created }})
	if err != nil {
		t.Fatal(err)
	}
	var sec bytes.Buffer
	if err := e.SerializePrivate(&sec, nil); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "signing.asc")
	if err := os.WriteFile(path, armored(t, "PGP PRIVATE KEY BLOCK", sec.Bytes()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
