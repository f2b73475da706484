#!/bin/sh
# Generate a mkosi tree from the podvm settings (flags or the environment:
# ENABLE_NVIDIA_GPU, NVIDIA_DRIVER_VERSION, ...) and build it with mkosi 25:
# a bootable GPT disk (UEFI, systemd-boot, serial console), as `make image`
# makes with Packer.
#
#   sudo ENABLE_NVIDIA_GPU=yes example/mkosi/build.sh [extra mkosi args]
#
# The archive and security mirrors are the ones this host's apt uses
# (/etc/apt); set PODVM_MIRROR and PODVM_SECURITY_MIRROR to use others.
#
# Outputs land in example/mkosi/_output (PODVM_MKOSI_OUTPUT; the leading
# underscore keeps Go from reading the tools tree there as our packages): the disk
# image.raw, and podvm-artifacts/ (local-packages.sources, GPU Operator
# ConfigMap and Helm values, keyring.asc, manifest.json, sbom.cdx.json and
# their signatures (.asc), module-signing.der
# and .pem when the NVIDIA modules are signed, gpu-operator-nvidiadriver.yaml
# with a driver repository and version). The generated
# tree is example/mkosi/tree (PODVM_MKOSI_TREE).
#
# PODVM_MKOSI_INTO=DIR adds the GPU layer to the existing mkosi tree DIR
# instead (packer-plugin-podvm mkosi --into, docs/mkosi.md) and builds it
# there with the profile nvidia-gpu selected (PODVM_MKOSI_PROFILES, default
# nvidia-gpu) and the outputs where the tree's own configuration puts them.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cache=${PODVM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/podvm}
tree=${PODVM_MKOSI_TREE:-$here/tree}
output=${PODVM_MKOSI_OUTPUT:-$here/_output}

cd "$root"
go build -o "$cache/bin/packer-plugin-podvm" .
mkosi=$(scripts/install-mkosi.sh --print-env)
generate() {
	"$cache/bin/packer-plugin-podvm" mkosi --force --output "$tree" \
		--distribution "${PODVM_DISTRIBUTION:-debian}" --release "${PODVM_RELEASE:-13}" "$@"
}
into=${PODVM_MKOSI_INTO:-}
if [ -n "$into" ]; then
	generate() {
		"$cache/bin/packer-plugin-podvm" mkosi --into "$into" "$@"
	}
fi
# An empty PODVM_SECURITY_MIRROR builds without the security suite.
generate ${PODVM_MIRROR:+"--mirror=$PODVM_MIRROR"} \
	${PODVM_SECURITY_MIRROR+"--security-mirror=$PODVM_SECURITY_MIRROR"}

# mkosi makes disks with systemd-repart 254 or newer; Debian 12 has 252. On
# such a host mkosi runs its tools from a tools tree: Debian trixie from the
# host's own mirror (or PODVM_MIRROR), listed in a sandbox tree because
# mkosi's built-in list names suites that mirrors rarely carry.
tools=""
repart=$(systemd-repart --version 2>/dev/null | sed -n '1s/^systemd \([0-9][0-9]*\).*/\1/p')
if [ "${repart:-0}" -lt 254 ]; then
	mirror=${PODVM_MIRROR:-$(scripts/install-mkosi.sh --print-mirror)}
	sandbox=$cache/mkosi-tools-sandbox
	mkdir -p "$sandbox/etc/apt/sources.list.d"
	printf 'Types: deb\nURIs: %s\nSuites: trixie trixie-updates\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
		"$mirror" >"$sandbox/etc/apt/sources.list.d/mkosi.sources"
	# The tools tree is built once a week per mkosi version and mirror, and
	# shared by every build on this machine: builds started together (make
	# check's lanes) wait for the one that builds it. It holds only
	# packages from the archive, checked by apt like the image's own.
	# shellcheck disable=SC2086 # $mkosi is "PYTHONPATH=... python3 -m mkosi"
	mkosi_version=$(env $mkosi --version 2>/dev/null | awk '{ print $2 }')
	key=$(printf '%s\n%s\n' "$mkosi_version" "$mirror" | sha256sum | cut -c1-16)
	week=$(date -u +%G-%V)
	tools_dir=$cache/mkosi-tools/$key-$week
	mkdir -p "$cache/mkosi-tools" "$cache/mkosi-pkgcache"
	exec 9>"$cache/mkosi-tools/.lock"
	if ! flock -n 9; then
		echo "mkosi: waiting for another build to finish the tools tree ($cache/mkosi-tools/.lock)" >&2
		flock 9
	fi
	if [ ! -e "$tools_dir/.complete" ]; then
		echo "mkosi: systemd-repart ${repart:-not found} on this host is older than 254; building a Debian trixie tools tree from $mirror into $tools_dir (once a week)" >&2
		start=$(date +%s)
		rm -rf "$tools_dir"
		mkdir -p "$tools_dir"
		# shellcheck disable=SC2086 # $mkosi is "PYTHONPATH=... python3 -m mkosi"
		env $mkosi --directory= --include=mkosi-tools --distribution=debian --release=trixie \
			--sandbox-tree="$sandbox" --output-directory="$tools_dir" --output=tools \
			--package-cache-dir="$cache/mkosi-pkgcache" -f build >&2 9>&-
		touch "$tools_dir/.complete"
		echo "mkosi: tools tree built in $(($(date +%s) - start)) s" >&2
		# Trees of other weeks: no build still running uses one.
		find "$cache/mkosi-tools" -mindepth 1 -maxdepth 1 -type d ! -name "$key-$week" -mtime +8 -exec rm -rf {} +
	else
		echo "mkosi: systemd-repart ${repart:-not found} on this host is older than 254; using the tools tree $tools_dir" >&2
	fi
	exec 9>&-
	tools="--tools-tree=$tools_dir/tools"
fi

mkdir -p "$cache/mkosi-pkgcache"
if [ -n "$into" ]; then
	cd "$into"
	# shellcheck disable=SC2086 # $mkosi is "PYTHONPATH=... python3 -m mkosi"; $tools is a word list
	exec env $mkosi $tools --profile="${PODVM_MKOSI_PROFILES:-nvidia-gpu}" --package-cache-dir="$cache/mkosi-pkgcache" -f "$@" build
fi
mkdir -p "$output"
cd "$tree"
# shellcheck disable=SC2086 # $mkosi is "PYTHONPATH=... python3 -m mkosi"; $tools is a word list
env $mkosi $tools --output-dir="$output" --package-cache-dir="$cache/mkosi-pkgcache" -f "$@" build
