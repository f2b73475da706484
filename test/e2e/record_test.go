//go:build e2e

package e2e

import (
	"bytes"
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
