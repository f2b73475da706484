#!/bin/sh
# install-mkosi.sh: fetch mkosi from a Debian suite and unpack it into a
# cache directory, without touching the host's apt state. Debian 12 ships
# mkosi 14, too old for the generator's MinimumVersion=25; Debian's mkosi is
# pure Python and runs on bookworm's python3.
#
# Usage: [MKOSI_VERSION=V MKOSI_SUITE=S] scripts/install-mkosi.sh [--print-env | --print-mirror]
#   Cache: $PODVM_CACHE/mkosi/<version> (default PODVM_CACHE:
#   ${XDG_CACHE_HOME:-~/.cache}/podvm). Each version has a directory of its
#   own, so several live side by side; make's mkosi-tool installs two:
#     scripts/install-mkosi.sh                                        # 25.3-7 from trixie (builds)
#     MKOSI_VERSION=27.1-1 MKOSI_SUITE=forky scripts/install-mkosi.sh  # 27.1 (tests parse with it too)
#   Version: $MKOSI_VERSION (default 25.3-7), suite $MKOSI_SUITE (trixie);
#   the version must be the one the suite carries now (apt-get download
#   fetches name=version).
#   Mirror: the host's first Debian mirror, or $MKOSI_MIRROR; it must carry
#   the suite.
# Idempotent: a second run with the same version does nothing.
# It prints the command to run mkosi; with --print-env, only
# "PYTHONPATH=... python3 -m mkosi" for scripts to eval.
set -eu

version=${MKOSI_VERSION:-25.3-7}
suite=${MKOSI_SUITE:-trixie}
cache=${PODVM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/podvm}/mkosi
dest=$cache/$version
pypath=$dest/usr/lib/python3/dist-packages

print() {
	if [ "${1:-}" = --print-env ]; then
		echo "PYTHONPATH=$pypath python3 -m mkosi"
	else
		echo "mkosi $version is in $dest; run it as:" >&2
		echo "  PYTHONPATH=$pypath python3 -m mkosi --version" >&2
		echo "PYTHONPATH=$pypath python3 -m mkosi"
	fi
}

# The Debian mirror: MKOSI_MIRROR, else the host's first Debian mirror.
find_mirror() {
	if [ -n "${MKOSI_MIRROR:-}" ]; then
		echo "$MKOSI_MIRROR"
		return
	fi
	cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null |
		sed -n -e 's/^URIs:[[:space:]]*\([^[:space:]]*\/debian\/\{0,1\}\)[[:space:]]*$/\1/p' \
			-e 's/^deb[[:space:]]\{1,\}\(\[[^]]*\][[:space:]]\{1,\}\)\{0,1\}\([^[:space:]]*\/debian\/\{0,1\}\)[[:space:]].*/\2/p' |
		head -n 1
}

if [ "${1:-}" = --print-mirror ]; then
	mirror=$(find_mirror)
	if [ -z "$mirror" ]; then
		echo "install-mkosi: no Debian mirror in the host's apt sources; set MKOSI_MIRROR" >&2
		exit 1
	fi
	echo "$mirror"
	exit 0
fi

if [ -f "$dest/.complete" ]; then
	print "$@"
	exit 0
fi

# The host's own mirror, so air-gapped hosts use theirs (never a hard-coded host).
mirror=$(find_mirror)
if [ -z "$mirror" ]; then
	echo "install-mkosi: no Debian mirror in the host's apt sources; set MKOSI_MIRROR" >&2
	exit 1
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/install-mkosi.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/etc/preferences.d" "$work/state/lists/partial" "$work/cache/archives/partial"
cat >"$work/etc/sources.list" <<SOURCES
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $suite main
SOURCES
: >"$work/state/status"
# A private apt configuration: nothing of the host's lists or cache changes.
set -- -o Dir::Etc::SourceList="$work/etc/sources.list" -o Dir::Etc::SourceParts=- \
	-o Dir::Etc::Preferences="$work/etc/preferences" -o Dir::Etc::PreferencesParts="$work/etc/preferences.d" \
	-o Dir::State="$work/state" -o Dir::State::status="$work/state/status" -o Dir::Cache="$work/cache" \
	-o APT::Architecture="$(dpkg --print-architecture)" -o APT::Architectures="$(dpkg --print-architecture)" -o Debug::NoLocking=1 -o APT::Sandbox::User=root
apt-get "$@" -q update >&2
(cd "$work" && apt-get "$@" -q download "mkosi=$version" >&2)
# Unpacked beside its destination under a name of its own, so that two
# installs at once never share a staging directory; the first to finish
# wins, and the other finds it complete.
mkdir -p "$cache"
stage=$(mktemp -d "$cache/.$version.XXXXXX")
trap 'rm -rf "$work" "$stage"' EXIT
dpkg-deb -x "$work"/mkosi_*_all.deb "$stage"
touch "$stage/.complete"
if [ ! -f "$dest/.complete" ]; then
	rm -rf "$dest"
	mv -T "$stage" "$dest" 2>/dev/null || [ -f "$dest/.complete" ]
fi
print "${1:-}"
