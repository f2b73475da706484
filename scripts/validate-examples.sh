#!/usr/bin/env bash
# Validates the example templates with the pinned packer and the real plugins:
# example/aws (packer-plugin-amazon), example/azure (packer-plugin-azure) and
# example/local, each with packer-plugin-podvm built from this checkout.
#
# No credentials and no cloud calls: `packer validate` only decodes and
# prepares each builder and provisioner. amazon-ebs needs no credentials to
# prepare; azure-arm falls back to managed-identity authentication when no
# credential is set, which it does not contact until a build starts. The one
# required variable (azure's resource_group) is given with -var. No template
# is validated with -syntax-only.
#
# Besides the plain validation it proves that the ENABLE_NVIDIA_GPU family of
# settings reaches the provisioner from packer's environment: a valid value in
# the environment passes, a bad one must make `packer validate` fail with the
# provisioner's error.
#
# The cloud plugins are built from the Go module proxy with the versions
# pinned in tools/cloudplugins/go.mod (once; cached under $PODVM_CACHE), and
# installed with every plugin into $PACKER_PLUGIN_PATH (default
# $PODVM_CACHE/packer-plugins, the directory `make image` uses).
#
# Environment: PODVM_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/podvm),
# PACKER_PLUGIN_PATH, PACKER (required; make sets it), GO (default go).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
GO="${GO:-go}"
PACKER="${PACKER:?set PACKER to the packer binary (make validate-examples sets it)}"
PODVM_CACHE="${PODVM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/podvm}"
mkdir -p "$PODVM_CACHE"
PODVM_CACHE="$(cd "$PODVM_CACHE" && pwd)"
export PACKER_PLUGIN_PATH="${PACKER_PLUGIN_PATH:-$PODVM_CACHE/packer-plugins}"
# No update check, no telemetry, no color in logs.
export CHECKPOINT_DISABLE=1 PACKER_NO_COLOR=1

say() { printf '==> %s\n' "$*"; }
die() { printf 'validate-examples: %s\n' "$*" >&2; exit 1; }

[[ -x "$PACKER" ]] || die "no packer at $PACKER: run 'make tools' first"

bin="$PODVM_CACHE/validate-examples/bin"
mkdir -p "$bin"

# The cloud plugins: rebuilt only when tools/cloudplugins changes. Release
# builds set an empty prerelease; so do we, so packer sees 1.4.5, not
# 1.4.5-dev.
stamp="$(cat tools/cloudplugins/go.mod tools/cloudplugins/go.sum | sha256sum | cut -c1-16)"
build_cloud() { # name module
	local out="$bin/$stamp/packer-plugin-$1"
	if [[ ! -x "$out" ]]; then
		say "building packer-plugin-$1 from the Go module proxy (once; a few minutes)"
		local start=$SECONDS
		(cd tools/cloudplugins && "$GO" build \
			-ldflags "-X $2/version.VersionPrerelease=" \
			-o "$out.tmp" "$2") || die "building $2 failed"
		mv "$out.tmp" "$out"
		# Drop binaries of earlier pins.
		find "$bin" -mindepth 1 -maxdepth 1 -type d ! -name "$stamp" -exec rm -rf {} +
		say "built packer-plugin-$1 in $((SECONDS - start))s"
	fi
	"$PACKER" plugins install --path "$out" "github.com/hashicorp/$1" >/dev/null
}
build_cloud amazon github.com/hashicorp/packer-plugin-amazon
build_cloud azure github.com/hashicorp/packer-plugin-azure

say "building packer-plugin-podvm from this checkout"
"$GO" build -o "$bin/packer-plugin-podvm" .
"$PACKER" plugins install --path "$bin/packer-plugin-podvm" github.com/podvm-gpu/podvm >/dev/null

# Unset every setting of the table so the host's environment cannot change
# the outcome; the pass-through checks below set them on purpose.
mapfile -t setting_envs < <("$bin/packer-plugin-podvm" options --format json |
	sed -n 's/^ *"env": "\([A-Z0-9_]*\)".*/\1/p')
[[ ${#setting_envs[@]} -gt 0 ]] || die "no settings listed by packer-plugin-podvm options"
for v in "${setting_envs[@]}"; do unset "$v"; done
# Nor can credentials or template variables from the caller's environment.
while IFS= read -r v; do unset "$v"; done < <(compgen -e | grep -E '^(PKR_VAR_|ARM_)' || true)

declare -A vars=(
	[aws]=""
	[azure]="-var resource_group=validate-examples"
	[local]=""
)

validate() { # dir [env assignments...]
	local dir="$1"
	shift
	# shellcheck disable=SC2086 # vars holds whole -var words
	(cd "example/$dir" && env "$@" "$PACKER" validate ${vars[$dir]} .)
}

# A pod VM binaries tree: the e2e tests' stand-in one, with the modes a tree
# must have (git keeps only the executable bit; the umask does the rest).
podvm_tree="$(mktemp -d)/podvm-binaries"
trap 'rm -rf "$(dirname "$podvm_tree")"' EXIT
cp -R test/e2e/testdata/podvm-binaries "$podvm_tree"
find "$podvm_tree" -type d -exec chmod 0755 {} +
find "$podvm_tree" -type f -exec chmod go-w {} +

failed=0
for dir in aws azure local; do
	if [[ ! -d "example/$dir" ]]; then
		say "example/$dir: missing"
		failed=1
		continue
	fi
	say "packer fmt -check example/$dir"
	"$PACKER" fmt -check -diff "example/$dir" || failed=1
	say "packer validate example/$dir"
	validate "$dir" || { failed=1; continue; }
	# The environment reaches the provisioner: a good value is accepted ...
	say "packer validate example/$dir with ENABLE_NVIDIA_GPU=no NVIDIA_DRIVER_VERSION=550 NVIDIA_KERNEL_MODULES=open"
	validate "$dir" ENABLE_NVIDIA_GPU=no NVIDIA_DRIVER_VERSION=550 NVIDIA_KERNEL_MODULES=open || failed=1
	# ... and a bad one is rejected by the provisioner's own validation.
	say "packer validate example/$dir with NVIDIA_KERNEL_MODULES=bogus must fail"
	if out="$(validate "$dir" NVIDIA_KERNEL_MODULES=bogus 2>&1)"; then
		echo "$out"
		echo "example/$dir: a bad NVIDIA_KERNEL_MODULES in the environment was accepted" >&2
		failed=1
	elif ! grep -qi nvidia_kernel_modules <<<"$out"; then
		echo "$out"
		echo "example/$dir: validation failed, but not on NVIDIA_KERNEL_MODULES" >&2
		failed=1
	fi
	# The agent stack: a binaries tree passes, a missing one is refused by
	# podvm-gpu's own check of podvm_binaries.
	say "packer validate example/$dir with PODVM_BINARIES=<the stand-in tree>"
	validate "$dir" PODVM_BINARIES="$podvm_tree" || failed=1
	say "packer validate example/$dir with PODVM_BINARIES=<a missing directory> must fail"
	if out="$(validate "$dir" PODVM_BINARIES="$podvm_tree/absent" 2>&1)"; then
		echo "$out"
		echo "example/$dir: a missing PODVM_BINARIES directory was accepted" >&2
		failed=1
	# packer wraps long messages: the line breaks are undone first.
	elif ! tr -s ' \n' '  ' <<<"$out" | grep -q 'podvm_binaries: invalid value .*no such directory'; then
		echo "$out"
		echo "example/$dir: validation failed, but not with podvm_binaries' own message" >&2
		failed=1
	fi
done

[[ $failed == 0 ]] || die "some examples did not validate"
say "all examples validate"
