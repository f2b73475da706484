package gpu

import (
	"context"
	"fmt"
	"path"
	"strings"

	"github.com/podvm-gpu/packer-plugin-podvm/agenttree"
	"github.com/podvm-gpu/packer-plugin-podvm/shellquote"
)

// baseImageNote is what a build without a binaries tree says: it makes an
// image with the GPU layer only.
const baseImageNote = "podvm-gpu: no pod VM binaries (podvm_binaries): this builds a GPU base image, not a pod VM; see docs/pod-vm.md"

// agentStack checks that the pod VM binaries tree, which a file
// provisioner copied onto the image's root before this one, is in the
// image, and enables its units as cloud-api-adaptor's images do: the
// tree's own *.wants links, made again in the image. An SSH upload
// follows links, so they may have landed as copies of the unit files.
// It runs before the GPU layer, whose units order against the agent's.
func agentStack(ctx context.Context, r *runner, dir string) (string, error) {
	if dir == "" {
		return baseImageNote, nil
	}
	// Prepare checked it; it is read again for what it holds now.
	tree, err := agenttree.Check(dir)
	if err != nil {
		return "", fmt.Errorf("podvm_binaries: %s: %w", dir, err)
	}
	if _, err := r.run(ctx, agentScript(tree)); err != nil {
		return "", fmt.Errorf("podvm-gpu: pod VM agent stack from %s: %w", dir, err)
	}
	return fmt.Sprintf("podvm-gpu: pod VM: agent stack from %s: units %s", dir, strings.Join(tree.Enabled(), " ")), nil
}

// agentScript checks the tree's programs and units in the image, owned by
// root, and makes its enabling links.
func agentScript(tree *agenttree.Tree) string {
	q := shellquote.Word
	var b strings.Builder
	b.WriteString("set -eu\n")
	b.WriteString(`missing() { echo "podvm-gpu: $1 is not in the image: copy podvm_binaries onto its root with a file provisioner before podvm-gpu (see example/local)" >&2; exit 1; }` + "\n")
	for _, e := range tree.Executables {
		fmt.Fprintf(&b, "[ -f %s ] && [ -x %s ] || missing %s\nchown 0:0 %s\n", q(e), q(e), q(e), q(e))
	}
	for _, u := range tree.Units {
		fmt.Fprintf(&b, "[ -f %s ] || missing %s\nchown 0:0 %s\n", q(u), q(u), q(u))
	}
	for _, l := range tree.Links {
		dir := path.Dir(l.Path)
		fmt.Fprintf(&b, "mkdir -p %s\nln -sfn %s %s\nchown -h 0:0 %s\n", q(dir), q(l.Target), q(l.Path), q(l.Path))
	}
	return b.String()
}
