package main

import (
	"go/build"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/podvm-gpu/packer-plugin-podvm/"

// TestArchitecture keeps the layout's rules (docs/README.md): the option
// model imports no back end; the repository tooling, the apt sources and
// the rootfs builder know nothing of GPU options; the two back ends never
// import each other, and each reaches the host-side bake only through
// package bake.
func TestArchitecture(t *testing.T) {
	for _, tc := range []struct {
		pkg       string
		forbidden []string
	}{
		{"gpustack", []string{"provisioner/gpu", "mkosi", "builder/rootfs", "bake", "aptrepo"}},
		{"aptsource", []string{"gpustack", "provisioner/gpu", "mkosi", "builder/rootfs", "bake"}},
		{"aptrepo", []string{"gpustack", "provisioner/gpu", "mkosi", "builder/rootfs", "bake"}},
		{"builder/rootfs", []string{"gpustack", "provisioner/gpu", "mkosi", "bake"}},
		{"provisioner/gpu", []string{"mkosi", "builder/rootfs"}},
		{"mkosi", []string{"provisioner/gpu", "builder/rootfs"}},
		{"bake", []string{"provisioner/gpu", "mkosi", "builder/rootfs"}},
		// Leaves that both back ends and the builder share: they hold one
		// rule each (the build cache settings, the image's kernels, the flag
		// parser) and import
		// no package that has options or back ends.
		{"cachedir", []string{"gpustack", "provisioner/gpu", "mkosi", "builder/rootfs", "bake", "modcache", "debcache"}},
		{"imagekernel", []string{"gpustack", "provisioner/gpu", "mkosi", "builder/rootfs", "bake", "chroot"}},
		{"cmdflags", []string{"gpustack", "provisioner/gpu", "mkosi", "builder/rootfs", "bake", "aptrepo"}},
		// The image's record: dpkg's database and the SBOM made from it
		// know nothing of options, back ends or the repository.
		{"dpkgstatus", []string{"gpustack", "provisioner/gpu", "mkosi", "builder/rootfs", "bake", "aptrepo"}},
		{"sbom", []string{"gpustack", "provisioner/gpu", "mkosi", "builder/rootfs", "bake", "aptrepo"}},
	} {
		deps := moduleDeps(t, tc.pkg, map[string]bool{})
		for _, f := range tc.forbidden {
			if slices.Contains(deps, f) {
				t.Errorf("%s imports %s (directly or through %v)", tc.pkg, f, deps)
			}
		}
	}
}

// moduleDeps lists the packages of this module that pkg imports, directly
// or not, by its non-test Go files for this platform.
func moduleDeps(t *testing.T, pkg string, seen map[string]bool) []string {
	t.Helper()
	p, err := build.ImportDir(filepath.FromSlash(pkg), 0)
	if err != nil {
		t.Fatalf("%s: %v", pkg, err)
	}
	var out []string
	for _, imp := range p.Imports {
		dep, ok := strings.CutPrefix(imp, module)
		if !ok || seen[dep] {
			continue
		}
		seen[dep] = true
		out = append(out, dep)
		out = append(out, moduleDeps(t, dep, seen)...)
	}
	return out
}
