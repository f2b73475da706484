package main

import (
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/podvm-gpu/packer-plugin-podvm/"

// TestArchitecture keeps the layout's rules (docs/README.md): the settings
// import no plan, and the option model no back end; the repository tooling, the apt sources and
// the rootfs builder know nothing of GPU options; the two back ends never
// import each other, and each reaches the host-side bake only through
// package bake.
func TestArchitecture(t *testing.T) {
	for _, tc := range []struct {
		pkg       string
		forbidden []string
	}{
		// The settings are read before anything is planned: the table knows
		// no plan, no executor and no back end.
		{"settings", []string{"gpustack", "imagestep", "provisioner/gpu", "mkosi", "builder/rootfs", "bake", "aptrepo"}},
		{"gpustack", []string{"provisioner/gpu", "mkosi", "builder/rootfs", "bake", "aptrepo"}},
		{"aptsource", []string{"settings", "gpustack", "provisioner/gpu", "mkosi", "builder/rootfs", "bake"}},
		{"aptrepo", []string{"settings", "gpustack", "provisioner/gpu", "mkosi", "builder/rootfs", "bake"}},
		{"builder/rootfs", []string{"settings", "gpustack", "provisioner/gpu", "mkosi", "bake"}},
		{"provisioner/gpu", []string{"mkosi", "builder/rootfs"}},
		{"mkosi", []string{"provisioner/gpu", "builder/rootfs"}},
		{"bake", []string{"provisioner/gpu", "mkosi", "builder/rootfs"}},
		// The one executor of the plan's actions serves both back ends.
		{"imagestep", []string{"provisioner/gpu", "mkosi", "builder/rootfs"}},
		// Leaves that both back ends and the builder share: they hold one
		// rule each (the build cache settings, the image's kernels, the flag
		// parser) and import
		// no package that has options or back ends.
		{"cachedir", []string{"settings", "gpustack", "provisioner/gpu", "mkosi", "builder/rootfs", "bake", "modcache", "debcache"}},
		{"distro", []string{"settings", "gpustack", "provisioner/gpu", "mkosi", "builder/rootfs", "bake", "imagestep"}},
		{"imagekernel", []string{"settings", "gpustack", "provisioner/gpu", "mkosi", "builder/rootfs", "bake", "chroot"}},
		{"linetail", []string{"settings", "gpustack", "provisioner/gpu", "mkosi", "builder/rootfs", "bake", "imagestep"}},
		{"cmdflags", []string{"settings", "gpustack", "provisioner/gpu", "mkosi", "builder/rootfs", "bake", "aptrepo"}},
		// The image's record: dpkg's database and the SBOM made from it
		// know nothing of options, back ends or the repository.
		{"dpkgstatus", []string{"settings", "gpustack", "provisioner/gpu", "mkosi", "builder/rootfs", "bake", "aptrepo"}},
		{"sbom", []string{"settings", "gpustack", "provisioner/gpu", "mkosi", "builder/rootfs", "bake", "aptrepo"}},
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

// TestBackEndsRunActions keeps the rule that a back end knows how to run
// an action, not what it does: imagestep holds the one implementation of
// each action of the plan. The provisioner names no action type but the
// bake, whose download and upload go through its communicator; the mkosi
// generator names them only where it states an action in mkosi's own
// terms (render.go: packages, trees, apt's configuration, presets, and the
// mounts an action needs; runsteps.go: which of them mkosi did).
func TestBackEndsRunActions(t *testing.T) {
	actions := actionTypes(t)
	for _, tc := range []struct {
		pkg     string
		allowed func(file, action string) bool
	}{
		{"provisioner/gpu", func(_, a string) bool { return a == "BakeRepo" }},
		{"mkosi", func(f, _ string) bool { return f == "render.go" || f == "runsteps.go" }},
	} {
		for file, names := range selectors(t, tc.pkg, module+"gpustack") {
			for _, n := range names {
				if actions[n] && !tc.allowed(file, n) {
					t.Errorf("%s/%s names the action gpustack.%s: an action's implementation belongs in imagestep", tc.pkg, file, n)
				}
			}
		}
	}
}

// actionTypes are gpustack's types with the Action interface's method.
func actionTypes(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, f := range parseDir(t, "gpustack") {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || fd.Name.Name != "describe" {
				continue
			}
			typ := fd.Recv.List[0].Type
			if st, ok := typ.(*ast.StarExpr); ok {
				typ = st.X
			}
			if id, ok := typ.(*ast.Ident); ok {
				out[id.Name] = true
			}
		}
	}
	if len(out) < 20 {
		t.Fatalf("found %d action types in gpustack, want every one", len(out))
	}
	return out
}

// selectors lists, by file, the names a package's non-test files select
// from the package with import path imp, under whatever name they import it.
func selectors(t *testing.T, dir, imp string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for name, f := range parseDir(t, dir) {
		local := ""
		for _, is := range f.Imports {
			if strings.Trim(is.Path.Value, `"`) == imp {
				local = imp[strings.LastIndex(imp, "/")+1:]
				if is.Name != nil {
					local = is.Name.Name
				}
			}
		}
		if local == "" || local == "_" {
			continue
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if se, ok := n.(*ast.SelectorExpr); ok {
				if id, ok := se.X.(*ast.Ident); ok && id.Name == local {
					out[name] = append(out[name], se.Sel.Name)
				}
			}
			return true
		})
	}
	return out
}

func parseDir(t *testing.T, dir string) map[string]*ast.File {
	t.Helper()
	p, err := build.ImportDir(filepath.FromSlash(dir), 0)
	if err != nil {
		t.Fatalf("%s: %v", dir, err)
	}
	out := map[string]*ast.File{}
	fset := token.NewFileSet()
	for _, name := range p.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = f
	}
	return out
}
