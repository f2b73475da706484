#!/bin/bash
# Benchmark: a whole GPU image build, four ways in one run, side by side.
#
#   sudo bench/build/run.sh            (from anywhere; about 45 minutes)
#   sudo bench/build/run.sh rebuild    only 1 and 2 below (about 10 minutes)
#
# BENCH_LOGS=DIR keeps each contender's log there (packer's lines carry
# timestamps, to see where a build spends its time).
#
#   1. make image, cold: a fresh cache (no base tree, no packages), as a
#      first build on a new machine; the pinned packer binary is reused,
#      since building tools is not what is measured.
#   2. make image again with the same inputs, the cache from 1 (base
#      tree, module cache).
#   3. make mkosi (example/mkosi/build.sh) with the same settings, a fresh
#      package cache and a fresh module cache.
#   4. by hand: debootstrap the same suite, then apt-get install the
#      same kernel and driver packages in a bare chroot, as a user without
#      this tool would (DKMS builds the modules in that install).
#
# Every contender builds the GPU stack from Debian's archive without the
# container toolkit (NVIDIA's repository is out of reach on build hosts
# without the network to it; set BENCH_TOOLKIT=yes where it is reachable).
# The results are a Markdown table on stdout with wall times, the load
# average before each contender, and the three ratios issue goals name.
set -euo pipefail

case "${1:-all}" in all|rebuild) which=${1:-all} ;; *) echo "usage: run.sh [all|rebuild]" >&2; exit 2 ;; esac
[ "$(id -u)" = 0 ] || { echo "run.sh: run as root (debootstrap, chroot, packer's chroot builder)" >&2; exit 1; }
for tool in make debootstrap chroot /usr/bin/time awk; do
	command -v "$tool" >/dev/null || { echo "run.sh: $tool is not installed (make deps installs the rest)" >&2; exit 1; }
done
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CACHE=${PODVM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/podvm}
WORK=$(mktemp -d /var/tmp/podvm-bench.XXXXXX)
cleanup() {
	if [ -n "${BENCH_LOGS:-}" ]; then
		mkdir -p "$BENCH_LOGS"
		cp "$WORK"/*.log "$BENCH_LOGS"/ 2>/dev/null || true
	fi
	for m in proc sys dev; do umount -R -l "$WORK/hand/$m" 2>/dev/null || true; done
	rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

export ENABLE_NVIDIA_GPU=yes NVIDIA_CONTAINER_TOOLKIT=${BENCH_TOOLKIT:-no}
PACKER_VERSION=$(sed -n 's/^require github.com\/hashicorp\/packer \(v[^ ]*\)$/\1/p' "$ROOT/tools/packer/go.mod")
export PACKER="$CACHE/tools/packer-$PACKER_VERSION"
[ -x "$PACKER" ] || make -C "$ROOT" tools >&2

declare -A wall load
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

# seconds LOG PATTERN: the summed "done in" durations (Go's 1m2.5s, 300ms
# forms) of the log's lines that match PATTERN.
seconds() {
	sed 's/\x1b\[[0-9;]*m//g' "$1" | grep -E "$2" | sed -n 's/.*: done in \([0-9.hms]*\)$/\1/p' | awk '
		{ t = 0; s = $0
		  if (match(s, /[0-9.]+h/)) { t += substr(s, RSTART, RLENGTH - 1) * 3600 }
		  if (match(s, /[0-9.]+m[^s]/) || match(s, /[0-9.]+m$/)) { t += substr(s, RSTART, RLENGTH - 1) * 60 }
		  if (match(s, /[0-9.]+ms/)) { t += substr(s, RSTART, RLENGTH - 2) / 1000 }
		  else if (match(s, /[0-9.]+s/)) { t += substr(s, RSTART, RLENGTH - 1) }
		  sum += t }
		END { printf "%.0f", sum }'
}
# steps: the podvm-gpu steps of the cold and the warm make image.
steps() {
	cat <<EOF
The podvm-gpu steps of the cold and the warm make image:

| step | cold | warm |
|---|---|---|
EOF
	sed 's/\x1b\[[0-9;]*m//g' "$WORK/image-cold.log" | sed -n 's/.*\] \([a-z-]*\): done in .*/\1/p' | while read -r l; do
		echo "| $l | $(seconds "$WORK/image-cold.log" "\\] $l: done in") s | $(seconds "$WORK/image-warm.log" "\\] $l: done in") s |"
	done
}

measure() { # name command...
	local name=$1
	shift
	load[$name]=$(cut -d' ' -f1 /proc/loadavg)
	echo "bench: $name: $*" >&2
	local start end
	start=$(date +%s.%N)
	"$@" >"$WORK/$name.log" 2>&1 || { echo "bench: $name failed; the end of its log:" >&2; tail -n 40 "$WORK/$name.log" >&2; exit 1; }
	end=$(date +%s.%N)
	wall[$name]=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.0f", b - a }')
	echo "bench: $name: ${wall[$name]} s" >&2
}

# 1 and 2: the same make image, first with an empty cache.
fresh="$WORK/cache"
mkdir -p "$fresh/tools"
ln -s "$PACKER" "$fresh/tools/packer-$PACKER_VERSION"
image() { make -C "$ROOT" image PODVM_CACHE="$fresh" PACKER="$PACKER" PACKER_ARGS=-timestamp-ui; }
measure image-cold image
measure image-warm image
# images: the heading and the rows of 1 and 2, which both reports start with.
images() {
	cat <<EOF
Measured $(date -u +%Y-%m-%d) on $(nproc) CPUs, $(uname -r); container toolkit: $NVIDIA_CONTAINER_TOOLKIT.

| | wall (s) | load average before |
|---|---|---|
| make image, cold cache | ${wall[image-cold]} | ${load[image-cold]} |
| make image, same inputs again | ${wall[image-warm]} | ${load[image-warm]} |
EOF
}
if [ "$which" = rebuild ]; then
	cat <<EOF
$(images)

| ratio | value | goal |
|---|---|---|
| second make image / first | $(ratio "${wall[image-warm]}" "${wall[image-cold]}") | at most 0.35 |

$(steps)
EOF
	exit 0
fi

# 3: mkosi, same settings, its own fresh package cache.
mkosi_build() {
	# make mkosi runs this script; the later --package-cache-dir wins.
	PODVM_MKOSI_TREE="$WORK/mkosi-tree" PODVM_MKOSI_OUTPUT="$WORK/mkosi-out" PODVM_BUILD_CACHE_DIR="$WORK/mkosi-modules" \
		"$ROOT/example/mkosi/build.sh" --package-cache-dir="$WORK/mkosi-pkgcache"
}
measure mkosi mkosi_build

# 4: by hand, what the plan installs, in one apt-get transaction.
mirror=$(sed -n 's/^URIs: \(http[^ ]*debian\/*\)$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n 1)
[ -n "$mirror" ] || mirror=$(awk '$1 == "deb" && $2 ~ /^http/ { print $2; exit }' /etc/apt/sources.list 2>/dev/null)
hand() {
	debootstrap --variant=minbase --components=main,contrib,non-free,non-free-firmware trixie "$WORK/hand" "$mirror"
	for m in proc sys dev; do mount --rbind "/$m" "$WORK/hand/$m"; done
	cp -L /etc/resolv.conf "$WORK/hand/etc/resolv.conf"
	chroot "$WORK/hand" env DEBIAN_FRONTEND=noninteractive apt-get -y update
	chroot "$WORK/hand" env DEBIAN_FRONTEND=noninteractive apt-get -y install --no-install-recommends \
		linux-image-amd64 linux-headers-amd64 nvidia-kernel-dkms nvidia-smi libcuda1 libnvidia-ml1 nvidia-persistenced
}
measure hand hand

# What make image does that the hand path does not: keep the base tree,
# bake and sign the repository, sign and verify the modules, write the
# bootable disk. The rest is the same apt and DKMS work plus the plugin's
# own overhead.
extra=$(seconds "$WORK/image-cold.log" 'Saving the base tree|\] (local-repo|module-signing|verify|repo-expose|hold|gpu-gate): done in|Writing bootable qcow2')
same=$((wall[image-cold] - extra))
cat <<EOF
$(images)
| make mkosi, fresh package cache | ${wall[mkosi]} | ${load[mkosi]} |
| debootstrap + apt-get install by hand | ${wall[hand]} | ${load[hand]} |

| ratio | value | goal |
|---|---|---|
| second make image / first | $(ratio "${wall[image-warm]}" "${wall[image-cold]}") | at most 0.35 |
| make image / make mkosi (cold) | $(ratio "${wall[image-cold]}" "${wall[mkosi]}") | at most 1.1 |
| make image / by hand (cold) | $(ratio "${wall[image-cold]}" "${wall[hand]}") | |
| make image without the work by hand lacks (${extra} s: base tree kept, repository baked and signed, modules signed and verified, disk written) / by hand | $(ratio "$same" "${wall[hand]}") | at most 1.05 |

$(steps)
EOF
