package gpu

import (
	"context"
	"fmt"
	"os"
	"path"
	"strings"
	"time"

	"github.com/podvm-gpu/packer-plugin-podvm/agenttree"
	"github.com/podvm-gpu/packer-plugin-podvm/shellquote"
)

// baseImageNote is what a build without a binaries tree says: it makes an
// image with the GPU layer only.
const baseImageNote = "podvm-gpu: no pod VM binaries (podvm_binaries): this builds a GPU base image, not a pod VM; see docs/pod-vm.md"

// agentStack carries the pod VM binaries tree onto the image's root as
// one archive streamed over the communicator and unpacked in the image,
// links as links: a file-by-file upload over SSH follows links, which
// would copy files of the build host (or fail on CAA's absolute link into
// /run). It then enables the tree's units as cloud-api-adaptor's images
// do, and warns of each link whose target the image does not have. It
// runs before the GPU layer, whose units order against the agent's.
func agentStack(ctx context.Context, r *runner, dir string) (string, error) {
	if dir == "" {
		return baseImageNote, nil
	}
	// Prepare checked it; it is read again for what it holds now.
	tree, err := agenttree.Check(dir)
	if err != nil {
		return "", fmt.Errorf("podvm_binaries: %s: %w", dir, err)
	}
	start := time.Now()
	size, err := carryTree(ctx, r, tree)
	if err != nil {
		return "", fmt.Errorf("podvm-gpu: pod VM agent stack from %s: %w", dir, err)
	}
	r.ui.Say(fmt.Sprintf("podvm-gpu: pod VM: unpacked the binaries tree (%d bytes, %d links kept as links) in %s",
		size, len(tree.Carried), time.Since(start).Round(100*time.Millisecond)))
	if _, err := r.run(ctx, agentScript(tree)); err != nil {
		return "", fmt.Errorf("podvm-gpu: pod VM agent stack from %s: %w", dir, err)
	}
	if err := warnElsewhere(ctx, r, tree); err != nil {
		return "", fmt.Errorf("podvm-gpu: pod VM agent stack from %s: %w", dir, err)
	}
	return fmt.Sprintf("podvm-gpu: pod VM: agent stack from %s: units %s", dir, strings.Join(tree.Enabled(), " ")), nil
}

// carryTree packs the tree on the build host into a private temporary
// file, stages it in the image and unpacks it onto the root: entries
// root's, existing directories (/etc, /usr) keeping their own modes and
// links (merged /usr). The host's file is unlinked as soon as it is made
// (only the open descriptor holds it), so not even a killed plugin leaves
// it; the staged copy goes once unpacked, or on failure.
func carryTree(ctx context.Context, r *runner, tree *agenttree.Tree) (int64, error) {
	f, err := os.CreateTemp("", "podvm-binaries-*.tar")
	if err != nil {
		return 0, fmt.Errorf("packing the binaries tree: %w", err)
	}
	defer f.Close()
	if err := os.Remove(f.Name()); err != nil {
		return 0, fmt.Errorf("packing the binaries tree: %w", err)
	}
	if err := tree.WriteTar(f); err != nil {
		return 0, err
	}
	size, err := f.Seek(0, 1)
	if err != nil {
		return 0, fmt.Errorf("packing the binaries tree: %w", err)
	}
	staged, err := r.stageFrom(ctx, "binaries-tree.tar", f, size)
	if err != nil {
		return 0, fmt.Errorf("uploading the binaries tree: %w", err)
	}
	if _, err := r.run(ctx, unpackCommand(staged)); err != nil {
		r.removeStaged(staged)
		return 0, fmt.Errorf("unpacking the binaries tree: %w", err)
	}
	return size, nil
}

// unpackCommand unpacks a staged tree archive onto the image's root and
// removes it. GNU tar, which every Debian and Ubuntu image has (it is
// essential there).
func unpackCommand(staged string) string {
	q := shellquote.Word(staged)
	return "tar -C / --no-overwrite-dir --keep-directory-symlink --numeric-owner --same-owner -xpf " + q + " && rm -f " + q
}

// agentScript checks the tree's programs and units in the image, owned by
// root, and makes its enabling links (again, where the image had a file
// of that name).
func agentScript(tree *agenttree.Tree) string {
	q := shellquote.Word
	var b strings.Builder
	b.WriteString("set -eu\n")
	b.WriteString(`missing() { echo "podvm-gpu: $1 is not in the image after unpacking podvm_binaries onto its root" >&2; exit 1; }` + "\n")
	for _, e := range tree.Executables {
		fmt.Fprintf(&b, "[ -f %s ] && [ -x %s ] || missing %s\nchown 0:0 %s\n", q(e), q(e), q(e), q(e))
	}
	for _, u := range tree.Units {
		fmt.Fprintf(&b, "[ -f %s ] || missing %s\nchown 0:0 %s\n", q(u), q(u), q(u))
	}
	for _, l := range tree.Links {
		dir := path.Dir(l.Path)
		fmt.Fprintf(&b, "mkdir -p -- %s\nln -sfn -- %s %s\nchown -h 0:0 -- %s\n", q(dir), q(l.Target), q(l.Path), q(l.Path))
	}
	return b.String()
}

// warnElsewhere lists, as warnings, the carried links whose targets the
// image does not have, resolved in the image: a unit its skeleton should
// have provided is seen now rather than at boot. A target below /run is
// made at boot (by tmpfiles or a unit), and said so.
func warnElsewhere(ctx context.Context, r *runner, tree *agenttree.Tree) error {
	links := tree.Elsewhere()
	if len(links) == 0 {
		return nil
	}
	var b strings.Builder
	for _, l := range links {
		fmt.Fprintf(&b, "[ -e %s ] || printf '%%s\\n' %s\n", shellquote.Word(l.Path), shellquote.Word(l.Path))
	}
	out, err := r.query(ctx, b.String())
	if err != nil {
		return fmt.Errorf("looking for the targets of the tree's links: %w", err)
	}
	absent := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		// A pty (ssh_pty) ends lines in CRLF.
		absent[strings.TrimSuffix(line, "\r")] = true
	}
	for _, l := range links {
		switch {
		case !absent[l.Path]:
		case l.MadeAtBoot():
			r.ui.Say(fmt.Sprintf("podvm-gpu: pod VM: the link %s -> %s points below /run: its target is made at boot", l.Path, l.Target))
		default:
			r.ui.Error(fmt.Sprintf("podvm-gpu: warning: the link %s -> %s from podvm_binaries points to %s, which is not in the image: provide it (a unit of the image or its skeleton) or the link stays dangling at boot", l.Path, l.Target, l.Dest))
		}
	}
	return nil
}
