//go:build e2e

package e2e

import (
	"bytes"
	"crypto/sha256"
	"debug/pe"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	cdx "github.com/CycloneDX/cyclonedx-go"

	"github.com/podvm-gpu/packer-plugin-podvm/bake"
	"github.com/podvm-gpu/packer-plugin-podvm/sbom"
)

// checkRecord checks the build's signed record in arts: the manifest and
// the SBOM each verify with the build's keyring.asc (sqv, as apt verifies
// the repository), and the SBOM lists exactly the packages that dpkg in
// root reports installed, at their versions. root "" skips that
// comparison, for an image that dropped its dpkg database after the
// record was made.
func checkRecord(t *testing.T, arts, root string) {
	t.Helper()
	keyring := filepath.Join(arts, bake.KeyFile)
	for _, f := range []string{bake.ManifestFile, sbom.File} {
		out, err := exec.Command("sqv", "--keyring", keyring, filepath.Join(arts, f+bake.SignatureSuffix), filepath.Join(arts, f)).CombinedOutput()
		if err != nil {
			t.Errorf("sqv %s%s with %s: %v\n%s", f, bake.SignatureSuffix, bake.KeyFile, err, out)
		}
	}
	b, err := os.ReadFile(filepath.Join(arts, sbom.File))
	must(t, err)
	var bom cdx.BOM
	must(t, cdx.NewBOMDecoder(bytes.NewReader(b), cdx.BOMFileFormatJSON).Decode(&bom))
	if bom.SpecVersion != cdx.SpecVersion1_6 || bom.Components == nil {
		t.Fatalf("%s: spec %s, no components", sbom.File, bom.SpecVersion)
	}
	var got []string
	for _, c := range *bom.Components {
		if c.Pedigree == nil || c.Pedigree.Ancestors == nil || len(*c.Pedigree.Ancestors) != 1 || !strings.HasPrefix(c.PackageURL, "pkg:deb/") {
			t.Errorf("%s: component %s has no source package or purl", sbom.File, c.Name)
		}
		got = append(got, c.Name+" "+c.Version)
	}
	slices.Sort(got)
	if !slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, "nvidia-container-toolkit ") }) {
		t.Errorf("%s lists no nvidia-container-toolkit among %d packages", sbom.File, len(got))
	}
	if root == "" {
		t.Logf("%s: %d packages, manifest and SBOM signatures verified", sbom.File, len(got))
		return
	}
	var want []string
	for name, version := range dpkgInstalled(t, root) {
		want = append(want, name+" "+version)
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		for _, w := range want {
			if !slices.Contains(got, w) {
				t.Errorf("installed, not in %s: %s", sbom.File, w)
			}
		}
		for _, g := range got {
			if !slices.Contains(want, g) {
				t.Errorf("in %s, not installed: %s", sbom.File, g)
			}
		}
		return
	}
	t.Logf("%s: the %d packages dpkg reports; manifest and SBOM signatures verified", sbom.File, len(got))
}

// checkDiskRecord checks the record that binds the build's record to its
// disk (bake.DiskFile in arts): the disk's size and SHA256 are the
// file's, the manifest's and the SBOM's digests are theirs, and for a
// UKI (uki not "") the root hash is the one the UKI's command line gives
// the kernel (roothash=), which is what the boot measures. The build's
// key was the user's (signed) or ephemeral: an ephemeral key is gone
// before the disk exists, so that record must be unsigned.
func checkDiskRecord(t *testing.T, arts, disk, uki string, signed bool) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(arts, bake.DiskFile))
	must(t, err)
	var rec bake.DiskRecord
	must(t, json.Unmarshal(b, &rec))
	sum := func(p string) string { return fileSHA256(t, p) }
	fi, err := os.Stat(disk)
	must(t, err)
	if rec.Disk.File != filepath.Base(disk) || rec.Disk.Size != fi.Size() || rec.Disk.SHA256 != sum(disk) {
		t.Errorf("%s: %+v, not the disk %s (%d bytes)", bake.DiskFile, rec.Disk, disk, fi.Size())
	}
	if rec.Manifest != sum(filepath.Join(arts, bake.ManifestFile)) || rec.SBOM != sum(filepath.Join(arts, sbom.File)) {
		t.Errorf("%s: the manifest's or the SBOM's digest is not theirs: %+v", bake.DiskFile, rec)
	}
	if _, err := os.Stat(filepath.Join(arts, bake.DiskFile+bake.SignatureSuffix)); signed && err != nil {
		t.Errorf("%s%s: no signature with the user's key: %v", bake.DiskFile, bake.SignatureSuffix, err)
	} else if !signed && err == nil {
		t.Errorf("%s%s: a signature with an ephemeral key that was gone before the disk existed", bake.DiskFile, bake.SignatureSuffix)
	}
	if uki == "" {
		if rec.Disk.RootHash != "" {
			t.Errorf("%s: root hash %s for a disk without verity", bake.DiskFile, rec.Disk.RootHash)
		}
		t.Logf("%s: %s, %d bytes, SHA256 %s", bake.DiskFile, rec.Disk.File, rec.Disk.Size, rec.Disk.SHA256)
		return
	}
	f, err := pe.Open(uki)
	must(t, err)
	defer f.Close()
	sec := f.Section(".cmdline")
	if sec == nil {
		t.Fatalf("%s has no .cmdline section", uki)
	}
	cmdline, err := sec.Data()
	must(t, err)
	var want string
	for _, w := range strings.Fields(strings.TrimRight(string(cmdline), "\x00")) {
		if h, ok := strings.CutPrefix(w, "roothash="); ok {
			want = h
		}
	}
	if want == "" || rec.Disk.RootHash != want {
		t.Errorf("%s: root hash %q, the UKI's command line has roothash=%q (%s)", bake.DiskFile, rec.Disk.RootHash, want, cmdline)
	} else {
		t.Logf("%s: %s, SHA256 %s, root hash %s (as the UKI's roothash=)", bake.DiskFile, rec.Disk.File, rec.Disk.SHA256, want)
	}
}

// fileSHA256 is the SHA-256 of the file at p, in hex.
func fileSHA256(t *testing.T, p string) string {
	t.Helper()
	f, err := os.Open(p)
	must(t, err)
	defer f.Close()
	h := sha256.New()
	_, err = io.Copy(h, f)
	must(t, err)
	return hex.EncodeToString(h.Sum(nil))
}
