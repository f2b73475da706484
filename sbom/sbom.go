// Package sbom writes the software bill of materials of an image: every
// installed Debian package, as CycloneDX JSON, from the image's dpkg
// database.
package sbom

import (
	"bytes"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"

	"github.com/podvm-gpu/packer-plugin-podvm/dpkgstatus"
)

// File is the SBOM's name beside the manifest.
const File = "sbom.cdx.json"

// Image says what the SBOM describes.
type Image struct {
	Distro  string // debian or ubuntu: the purl namespace
	Version string // 13, 24.04: the purl distro qualifier's version
	Name    string // the image, as the SBOM's subject
	Tool    string // what made the SBOM, with its version
}

// FromStatus returns a CycloneDX 1.6 JSON document listing every
// installed package of the dpkg status file, each with its version,
// architecture, package URL and source package (as its ancestor, with a
// package URL of arch=source). The document holds no random serial
// number, and created is its only time, so the same image gives the same
// bytes.
func FromStatus(status []byte, img Image, created time.Time) ([]byte, error) {
	if img.Distro == "" || img.Version == "" {
		return nil, fmt.Errorf("sbom: the image's distribution and version are required (got %q, %q)", img.Distro, img.Version)
	}
	pkgs, err := dpkgstatus.Parse(status)
	if err != nil {
		return nil, fmt.Errorf("sbom: %w", err)
	}
	pkgs = dpkgstatus.Installed(pkgs)
	if len(pkgs) == 0 {
		return nil, fmt.Errorf("sbom: the dpkg database lists no installed package")
	}
	slices.SortFunc(pkgs, func(a, b dpkgstatus.Package) int {
		return strings.Compare(a.Name+"\x00"+a.Arch, b.Name+"\x00"+b.Arch)
	})
	distro := img.Distro + "-" + img.Version
	comps := make([]cdx.Component, 0, len(pkgs))
	for _, p := range pkgs {
		purl := PackageURL(img.Distro, p.Name, p.Version, p.Arch, distro)
		src := []cdx.Component{{
			Type:       cdx.ComponentTypeLibrary,
			Name:       p.Source,
			Version:    p.SourceVersion,
			PackageURL: PackageURL(img.Distro, p.Source, p.SourceVersion, "source", distro),
		}}
		comps = append(comps, cdx.Component{
			BOMRef:     purl,
			Type:       cdx.ComponentTypeLibrary,
			Name:       p.Name,
			Version:    p.Version,
			PackageURL: purl,
			Pedigree:   &cdx.Pedigree{Ancestors: &src},
		})
	}
	bom := cdx.NewBOM()
	bom.Metadata = &cdx.Metadata{
		Timestamp: created.UTC().Format(time.RFC3339),
		Tools: &cdx.ToolsChoice{Components: &[]cdx.Component{{
			Type: cdx.ComponentTypeApplication, Name: img.Tool,
		}}},
		Component: &cdx.Component{
			BOMRef: "image", Type: cdx.ComponentTypeOS,
			Name: img.Name, Version: distro,
		},
	}
	bom.Components = &comps
	var b bytes.Buffer
	enc := cdx.NewBOMEncoder(&b, cdx.BOMFileFormatJSON).SetPretty(true).SetEscapeHTML(false)
	if err := enc.EncodeVersion(bom, cdx.SpecVersion1_6); err != nil {
		return nil, fmt.Errorf("sbom: encode: %w", err)
	}
	return b.Bytes(), nil
}

// PackageURL is the purl of a Debian package (the purl spec's deb type):
// pkg:deb/NAMESPACE/NAME@VERSION?arch=ARCH&distro=DISTRO.
func PackageURL(namespace, name, version, arch, distro string) string {
	q := url.Values{}
	if arch != "" {
		q.Set("arch", arch)
	}
	q.Set("distro", distro)
	return "pkg:deb/" + url.PathEscape(namespace) + "/" + url.PathEscape(name) + "@" + url.PathEscape(version) + "?" + q.Encode()
}
