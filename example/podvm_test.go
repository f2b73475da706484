package example_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// provisionerStep is one provisioner of a build block, in order: a plain
// block or a dynamic one, with its type.
type provisionerStep struct {
	typ     string
	dynamic *hclsyntax.Block // the dynamic block, nil for a plain one
	block   *hclsyntax.Block
}

// buildSteps lists the provisioners of the template's build block.
func buildSteps(t *testing.T, path string) []provisionerStep {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, diags := hclsyntax.ParseConfig(src, path, hcl.InitialPos)
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	var steps []provisionerStep
	for _, b := range f.Body.(*hclsyntax.Body).Blocks {
		if b.Type != "build" {
			continue
		}
		for _, p := range b.Body.Blocks {
			switch {
			case p.Type == "provisioner" && len(p.Labels) == 1:
				steps = append(steps, provisionerStep{typ: p.Labels[0], block: p})
			case p.Type == "dynamic" && len(p.Labels) == 1 && p.Labels[0] == "provisioner":
				v, diags := p.Body.Attributes["labels"].Expr.Value(nil)
				if diags.HasErrors() || !v.Type().IsTupleType() || v.LengthInt() != 1 {
					t.Fatalf("%s: a dynamic provisioner without one static label: %v", path, diags)
				}
				var content *hclsyntax.Block
				for _, c := range p.Body.Blocks {
					if c.Type == "content" {
						content = c
					}
				}
				steps = append(steps, provisionerStep{typ: v.Index(cty.NumberIntVal(0)).AsString(), dynamic: p, block: content})
			}
		}
	}
	return steps
}

// exprText is an attribute's source text, "" when absent.
func exprText(t *testing.T, path string, b *hclsyntax.Block, name string) string {
	t.Helper()
	a, ok := b.Body.Attributes[name]
	if !ok {
		return ""
	}
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r := a.Expr.Range()
	return string(src[r.Start.Byte:r.End.Byte])
}

// TestAgentStackByPodvmGPU: no template uploads the binaries tree itself
// (a file provisioner over SSH follows links, copying files of the build
// host); each hands it to podvm-gpu, which carries it as one archive,
// links as links.
func TestAgentStackByPodvmGPU(t *testing.T) {
	for _, dir := range []string{"local", "aws", "azure"} {
		t.Run(dir, func(t *testing.T) {
			path := filepath.Join(dir, "podvm.pkr.hcl")
			var gpu *hclsyntax.Block
			for _, s := range buildSteps(t, path) {
				if s.typ == "podvm-gpu" {
					gpu = s.block
				}
				if s.dynamic != nil && strings.Contains(exprText(t, path, s.dynamic, "for_each"), "podvm_binaries") {
					t.Errorf("a dynamic %s provisioner handles podvm_binaries itself", s.typ)
				}
				if s.typ == "file" && s.block != nil && strings.Contains(exprText(t, path, s.block, "source"), "podvm_binaries") {
					t.Errorf("a file provisioner uploads podvm_binaries")
				}
			}
			if gpu == nil || !strings.Contains(exprText(t, path, gpu, "podvm_binaries"), "var.podvm_binaries") {
				t.Error("podvm-gpu is not given podvm_binaries")
			}
		})
	}
}
