#!/usr/bin/env bash
# Renders .web-docs/ (what HashiCorp's integrations registry reads) from
# docs/: `packer-sdc renderdocs` includes the docs-partials, then
# scripts/webdocs lays the pages out as the registry wants them
# (README.md, components/<type>/<name>/README.md). metadata.hcl is written
# by hand and left alone.
#
#   scripts/web-docs.sh           rewrite .web-docs/
#   scripts/web-docs.sh --check   render into a temporary directory and fail
#                                 on any difference from the committed one
#
# Environment: GO (default go).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
GO="${GO:-go}"
check=0
case "${1:-}" in
--check) check=1 ;;
"") ;;
*) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

# The repository on GitHub, from the module path: links in the rendered
# pages point at files there.
module="$("$GO" list -m)"
base="https://$module/blob/main"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# renderdocs logs each step on stderr; only its failure matters.
if ! "$GO" tool packer-sdc renderdocs -src docs -partials docs-partials -dst "$tmp/rendered" 2>"$tmp/log"; then
	cat "$tmp/log" >&2
	exit 1
fi
"$GO" run ./scripts/webdocs -src "$tmp/rendered" -dst "$tmp/web-docs" -base "$base"
cp .web-docs/metadata.hcl "$tmp/web-docs/metadata.hcl"

if [[ $check == 1 ]]; then
	if ! diff -ru .web-docs "$tmp/web-docs"; then
		echo ".web-docs is out of date with docs/: run 'make web-docs' and commit the result" >&2
		exit 1
	fi
	echo ".web-docs matches docs/"
	exit 0
fi
rm -rf .web-docs/components .web-docs/README.md
cp -R "$tmp/web-docs/." .web-docs/
