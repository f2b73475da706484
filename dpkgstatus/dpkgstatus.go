// Package dpkgstatus reads dpkg's database of an image: the status file
// (/var/lib/dpkg/status) that the manifest and the SBOM are made from.
package dpkgstatus

import (
	"bufio"
	"bytes"
	"fmt"
	"strings"
)

// Path is where dpkg keeps the status file in an image.
const Path = "/var/lib/dpkg/status"

// Package is one paragraph of the status file.
type Package struct {
	Name    string
	Version string
	Arch    string
	// Source and SourceVersion name the source package it was built from:
	// the Source field, else the package itself at its own version.
	Source        string
	SourceVersion string
	// Installed is dpkg's "installed" state; a package that was removed
	// but keeps its configuration files is listed but not installed.
	Installed bool
	// Held is an installed package marked hold (apt-mark hold).
	Held bool
}

// Parse reads the packages of a status file in its order. A paragraph
// without a Package field is skipped; a Status field that is not the three
// words dpkg writes is an error, as a database in that state cannot be
// described.
func Parse(data []byte) ([]Package, error) {
	var out []Package
	for i, para := range bytes.Split(data, []byte("\n\n")) {
		f := map[string]string{}
		sc := bufio.NewScanner(bytes.NewReader(para))
		sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			// Continuation lines (descriptions, conffiles) start with
			// white space.
			if k, v, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(line, " ") && !strings.HasPrefix(line, "\t") {
				f[k] = strings.TrimSpace(v)
			}
		}
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("dpkg status, paragraph %d: %w", i+1, err)
		}
		if f["Package"] == "" {
			continue
		}
		p := Package{Name: f["Package"], Version: f["Version"], Arch: f["Architecture"]}
		// Status: want flag status, e.g. "hold ok installed".
		st := strings.Fields(f["Status"])
		if len(st) != 3 {
			return nil, fmt.Errorf("dpkg status: package %s: Status %q is not \"want flag status\"", p.Name, f["Status"])
		}
		p.Installed = st[2] == "installed"
		p.Held = st[0] == "hold" && p.Installed
		// Source: name, or "name (version)" when it differs.
		p.Source, p.SourceVersion = p.Name, p.Version
		if src := f["Source"]; src != "" {
			name, ver, ok := strings.Cut(src, " (")
			p.Source = strings.TrimSpace(name)
			if ok {
				p.SourceVersion = strings.TrimSuffix(strings.TrimSpace(ver), ")")
			}
		}
		out = append(out, p)
	}
	return out, nil
}

// Installed returns the installed packages of pkgs, in their order.
func Installed(pkgs []Package) []Package {
	var out []Package
	for _, p := range pkgs {
		if p.Installed {
			out = append(out, p)
		}
	}
	return out
}
