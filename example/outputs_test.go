package example_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestMkosiOutputsOutsideGoPackages: make mkosi's default output directory
// holds mkosi's tools tree, a whole Debian tree with Go sources in it
// (git's contrib). Where Go looks for packages, `go vet ./...` would vet
// them as ours and fail. Go skips directories whose names begin with _ or
// ., so a Go file where build.sh puts its outputs must not be a package of
// the module.
func TestMkosiOutputsOutsideGoPackages(t *testing.T) {
	script, err := os.ReadFile("mkosi/build.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^output=\$\{PODVM_MKOSI_OUTPUT:-\$here/([^}]+)\}$`).FindSubmatch(script)
	if m == nil {
		t.Fatal("build.sh: no output=${PODVM_MKOSI_OUTPUT:-$here/...} line")
	}
	rel := filepath.Join("example/mkosi", string(m[1]), "tools/usr/share/doc/git/contrib/persistent-https")

	mod := t.TempDir()
	write := func(name, data string) {
		p := filepath.Join(mod, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.test/m\n\ngo 1.24\n")
	write("main.go", "package main\n\nfunc main() {}\n")
	write(filepath.Join(rel, "client.go"), "package main\n\nfunc main() { return; panic(1) }\n")
	cmd := exec.Command("go", "list", "./...")
	cmd.Dir = mod
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "persistent-https") {
		t.Fatalf("a Go file in make mkosi's output (%s) is a package of the module:\n%s", rel, out)
	}
}
