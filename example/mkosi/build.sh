#!/bin/sh
# Generate a mkosi tree from the podvm settings (flags or the environment:
# ENABLE_NVIDIA_GPU, NVIDIA_DRIVER_VERSION, ...) and build it with mkosi 25.
#
#   sudo ENABLE_NVIDIA_GPU=yes example/mkosi/build.sh [extra mkosi args]
#
# The archive and security mirrors are the ones this host's apt uses
# (/etc/apt); set PODVM_MIRROR and PODVM_SECURITY_MIRROR to use others.
#
# Outputs land in example/mkosi/output: the image and podvm-artifacts/
# (local-packages.sources, GPU Operator ConfigMap and Helm values,
# keyring.asc, manifest.json).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cache=${PODVM_CACHE:-$root/.cache}

cd "$root"
go build -o "$cache/bin/packer-plugin-podvm" .
mkosi=$(scripts/install-mkosi.sh --print-env)
generate() {
	"$cache/bin/packer-plugin-podvm" mkosi --force --output "$here/tree" \
		--distribution "${PODVM_DISTRIBUTION:-debian}" --release "${PODVM_RELEASE:-13}" "$@"
}
# An empty PODVM_SECURITY_MIRROR builds without the security suite.
generate ${PODVM_MIRROR:+"--mirror=$PODVM_MIRROR"} \
	${PODVM_SECURITY_MIRROR+"--security-mirror=$PODVM_SECURITY_MIRROR"}
mkdir -p "$here/output" "$cache/mkosi-pkgcache"
cd "$here/tree"
# shellcheck disable=SC2086 # $mkosi is "PYTHONPATH=... python3 -m mkosi"
env $mkosi --output-dir="$here/output" --package-cache-dir="$cache/mkosi-pkgcache" -f "$@" build
