// Package example holds what the example templates share with the tests
// that keep them honest: the cloud templates (aws, azure) and the e2e
// rehearsal of the cloud path must run the very same podvm-gpu provisioner
// block, so a fix to one cannot silently miss the others.
package example

import (
	"fmt"
	"os"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// ProvisionerBlock returns the exact text (comments and layout included)
// of the one provisioner block of type typ inside the build block of the
// template file path.
func ProvisionerBlock(path, typ string) (string, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading template: %w", err)
	}
	f, diags := hclsyntax.ParseConfig(src, path, hcl.InitialPos)
	if diags.HasErrors() {
		return "", fmt.Errorf("parsing %s: %s", path, diags.Error())
	}
	body, ok := f.Body.(*hclsyntax.Body)
	if !ok {
		return "", fmt.Errorf("%s: not native HCL syntax", path)
	}
	var found []string
	for _, b := range body.Blocks {
		if b.Type != "build" {
			continue
		}
		for _, p := range b.Body.Blocks {
			if p.Type == "provisioner" && len(p.Labels) == 1 && p.Labels[0] == typ {
				r := p.Range()
				found = append(found, string(src[r.Start.Byte:r.End.Byte]))
			}
		}
	}
	if len(found) != 1 {
		return "", fmt.Errorf("%s: %d provisioner %q blocks in build blocks, want exactly 1", path, len(found), typ)
	}
	return found[0], nil
}
