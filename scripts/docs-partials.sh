#!/bin/sh
# Regenerates docs-partials/ (packer-sdc struct-markdown) from the config
# structs' comments. struct-markdown finds the project root by a parent
# directory named packer-plugin-*, so it runs through such a symlink
# whatever this checkout is called.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ln -s "$root" "$tmp/packer-plugin-podvm"
rm -rf "$root/docs-partials"
for f in builder/rootfs/config.go provisioner/gpu/provisioner.go postprocessor/record/record.go settings/settings_hcl.go; do
	(cd "$tmp/packer-plugin-podvm/$(dirname "$f")" && go tool packer-sdc struct-markdown "$(basename "$f")")
done
