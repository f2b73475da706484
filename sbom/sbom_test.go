package sbom

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
	"github.com/xeipuuv/gojsonschema"

	"github.com/podvm-gpu/packer-plugin-podvm/dpkgstatus"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden.json")

var img = Image{Distro: "debian", Version: "13", Name: "podvm-gpu", Tool: "packer-plugin-podvm test"}

func TestFromStatusGolden(t *testing.T) {
	status, err := os.ReadFile("testdata/status")
	if err != nil {
		t.Fatal(err)
	}
	got, err := FromStatus(status, img, time.Unix(1700000000, 0))
	if err != nil {
		t.Fatal(err)
	}
	golden := "testdata/sbom.golden.json"
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("FromStatus differs from %s (go test ./sbom -update):\n%s", golden, got)
	}
	validate(t, got)
	// The same input, the same bytes.
	again, err := FromStatus(status, img, time.Unix(1700000000, 0))
	if err != nil || !bytes.Equal(again, got) {
		t.Errorf("a second run differs (err %v)", err)
	}
}

func TestFromStatusRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, status string
		img          Image
		want         string
	}{
		{"no distro", "Package: a\nStatus: install ok installed\nVersion: 1\n", Image{Version: "13"}, "distribution and version"},
		{"nothing installed", "Package: a\nStatus: deinstall ok config-files\nVersion: 1\n", img, "no installed package"},
		{"bad status", "Package: a\nStatus: broken\nVersion: 1\n", img, "package a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := FromStatus([]byte(tc.status), tc.img, time.Unix(0, 0)); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one saying %q", err, tc.want)
			}
		})
	}
}

// TestFromStatusHost describes this machine: every package dpkg reports
// installed is a component with its version, architecture and
// source, and the document is valid CycloneDX 1.6.
func TestFromStatusHost(t *testing.T) {
	status, err := os.ReadFile(dpkgstatus.Path)
	if err != nil {
		if os.Getenv("PODVM_REQUIRE_ROOT") == "1" {
			t.Fatalf("no dpkg database here, and PODVM_REQUIRE_ROOT=1 says this test must run: %v", err)
		}
		t.Skipf("no dpkg database here: %v", err)
	}
	doc, err := FromStatus(status, img, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	validate(t, doc)
	var bom cdx.BOM
	if err := cdx.NewBOMDecoder(bytes.NewReader(doc), cdx.BOMFileFormatJSON).Decode(&bom); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range *bom.Components {
		src := (*c.Pedigree.Ancestors)[0]
		got = append(got, c.Name+" "+c.Version+" "+src.Name+" "+src.Version)
		if !strings.HasPrefix(c.PackageURL, "pkg:deb/debian/") || !strings.Contains(src.PackageURL, "arch=source") {
			t.Errorf("%s: purl %s, source purl %s", c.Name, c.PackageURL, src.PackageURL)
		}
	}
	// dpkgstatus's own test holds its reading to dpkg-query's.
	pkgs, err := dpkgstatus.Parse(status)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, p := range dpkgstatus.Installed(pkgs) {
		want = append(want, p.Name+" "+p.Version+" "+p.Source+" "+p.SourceVersion)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) || len(got) == 0 {
		t.Errorf("the SBOM lists %d packages, dpkg-query %d installed; they differ", len(got), len(want))
	}
}

func TestPackageURL(t *testing.T) {
	for _, tc := range []struct{ name, version, arch, want string }{
		{"libattr1", "1:2.5.2-3+b1", "amd64", "pkg:deb/debian/libattr1@1:2.5.2-3+b1?arch=amd64&distro=debian-13"},
		{"attr", "1:2.5.2-3", "source", "pkg:deb/debian/attr@1:2.5.2-3?arch=source&distro=debian-13"},
		{"libstdc++6", "14.2.0-19", "amd64", "pkg:deb/debian/libstdc++6@14.2.0-19?arch=amd64&distro=debian-13"},
	} {
		if got := PackageURL("debian", tc.name, tc.version, tc.arch, "debian-13"); got != tc.want {
			t.Errorf("PackageURL(%s, %s, %s) = %s, want %s", tc.name, tc.version, tc.arch, got, tc.want)
		}
	}
}

// validate checks doc against CycloneDX's own JSON schema, as shipped
// with the library.
func validate(t *testing.T, doc []byte) {
	t.Helper()
	for _, e := range schemaErrors(t, doc) {
		t.Errorf("not valid CycloneDX 1.6: %s", e)
	}
	var v struct {
		SpecVersion string `json:"specVersion"`
	}
	if json.Unmarshal(doc, &v) != nil || v.SpecVersion != "1.6" {
		t.Errorf("specVersion %q, want 1.6", v.SpecVersion)
	}
}

// TestSchemaCheckFails shows the schema check can fail: a component type
// CycloneDX does not have.
func TestSchemaCheckFails(t *testing.T) {
	status, err := os.ReadFile("testdata/status")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := FromStatus(status, img, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Replace(doc, []byte(`"type": "library"`), []byte(`"type": "debian-package"`), 1)
	if len(schemaErrors(t, bad)) == 0 {
		t.Error("a component of type debian-package passed the schema check")
	}
}

func schemaErrors(t *testing.T, doc []byte) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/CycloneDX/cyclonedx-go").Output()
	if err != nil {
		t.Fatalf("finding the CycloneDX schema: go list: %v", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "schema")
	// The schema refers to its two companions by their http ids; they are
	// added by content, so nothing is fetched.
	sl := gojsonschema.NewSchemaLoader()
	for _, f := range []string{"spdx.schema.json", "jsf-0.82.schemax.json"} {
		if err := sl.AddSchemas(gojsonschema.NewReferenceLoader("file://" + filepath.Join(dir, f))); err != nil {
			t.Fatalf("CycloneDX schema %s: %v", f, err)
		}
	}
	schema, err := sl.Compile(gojsonschema.NewReferenceLoader("file://" + filepath.Join(dir, "bom-1.6.schema.json")))
	if err != nil {
		t.Fatalf("CycloneDX 1.6 schema: %v", err)
	}
	res, err := schema.Validate(gojsonschema.NewBytesLoader(doc))
	if err != nil {
		t.Fatalf("validate: %v", err)
	}
	var errs []string
	for _, e := range res.Errors() {
		errs = append(errs, e.String())
	}
	return errs
}
