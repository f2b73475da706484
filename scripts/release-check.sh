#!/usr/bin/env bash
# Proves the release configuration without publishing anything:
#
#  1. goreleaser check, then a snapshot release (goreleaser release
#     --snapshot --skip=sign) named like the release of version/version.go;
#  2. the assets: one zip per platform (linux and darwin, amd64 and arm64)
#     holding one binary of the zip's name, for the right OS and CPU, and a
#     SHA256SUMS that matches them;
#  3. the linux/amd64 binary as Packer gets it: `packer plugins install
#     --path` into an empty plugin directory installs it under the zip's
#     own name, `packer-sdc plugin-check` passes, it reports the release
#     version with no prerelease, and `packer validate` of example/local
#     loads it;
#  4. the non-Linux build under Packer: the plugin built with the
#     podvm_nonlinux tag (the files a darwin build takes) refuses the
#     podvm-rootfs builder at `packer validate` with its message, validates
#     a template that uses only the podvm-gpu provisioner, and runs the
#     options, plan, mkosi and repo commands.
#
# The darwin binaries are cross-compiled only: nothing here can run them.
#
# Environment: GORELEASER and PACKER (required; make release-check sets
# them), GO (default go).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
GO="${GO:-go}"
GORELEASER="${GORELEASER:?set GORELEASER to the goreleaser binary (make release-check sets it)}"
PACKER="${PACKER:?set PACKER to the packer binary (make release-check sets it)}"
# No update check, no telemetry, no color in logs.
export CHECKPOINT_DISABLE=1 PACKER_NO_COLOR=1

say() { printf '==> %s\n' "$*"; }
die() { printf 'release-check: %s\n' "$*" >&2; exit 1; }

name=packer-plugin-podvm
addr=github.com/podvm-gpu/podvm
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# The API version goes into every asset name; the plugin says which it
# speaks, as the release workflow asks it.
"$GO" build -o "$tmp/describe/$name" .
api="$("$tmp/describe/$name" describe | sed -n 's/.*"api_version":"\([^"]*\)".*/\1/p')"
version="$(sed -n 's/^\tVersion = "\([^"]*\)"$/\1/p' version/version.go)"
[[ $api =~ ^x[0-9]+\.[0-9]+$ ]] || die "describe reported no api_version: '$api'"
[[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "no Version in version/version.go: '$version'"

say "goreleaser check"
"$GORELEASER" check
say "goreleaser release --snapshot as v$version, API $api"
start=$SECONDS
API_VERSION="$api" PODVM_SNAPSHOT_VERSION="$version" "$GORELEASER" release --snapshot --clean --skip=sign
say "snapshot built in $((SECONDS - start))s"

# binfmt FILE prints the executable format and CPU: elf-amd64, macho-arm64...
binfmt() {
	local magic
	magic="$(od -An -tx1 -N4 "$1" | tr -d ' \n')"
	case "$magic" in
	7f454c46) # ELF: e_machine at byte 18
		case "$(od -An -tx1 -j18 -N2 "$1" | tr -d ' \n')" in
		3e00) echo elf-amd64 ;; b700) echo elf-arm64 ;; *) echo elf-other ;;
		esac ;;
	cffaedfe) # 64-bit Mach-O: cputype at byte 4
		case "$(od -An -tx1 -j4 -N4 "$1" | tr -d ' \n')" in
		07000001) echo macho-amd64 ;; 0c000001) echo macho-arm64 ;; *) echo macho-other ;;
		esac ;;
	*) echo "unknown-$magic" ;;
	esac
}

say "checking the assets in dist/"
sums="${name}_v${version}_SHA256SUMS"
want=("$sums")
for os in darwin linux; do
	for arch in amd64 arm64; do
		want+=("${name}_v${version}_${api}_${os}_${arch}.zip")
	done
done
got="$(find dist -maxdepth 1 -type f \( -name '*.zip' -o -name '*SHA256SUMS*' \) -printf '%f\n' | sort)"
[[ $got == "$(printf '%s\n' "${want[@]}" | sort)" ]] ||
	die "dist/ holds:"$'\n'"$got"$'\n'"want:"$'\n'"$(printf '%s\n' "${want[@]}")"
(cd dist && sha256sum --strict --quiet -c "$sums") || die "$sums does not match the zips"
[[ $(wc -l <"dist/$sums") == 4 ]] || die "$sums lists other files than the four zips"
for zip in "${want[@]:1}"; do
	member="${zip%.zip}"
	members="$(python3 -c 'import sys, zipfile; print("\n".join(zipfile.ZipFile(sys.argv[1]).namelist()))' "dist/$zip")"
	[[ $members == "$member" ]] || die "$zip holds '$members', want only $member"
	mkdir -p "$tmp/unpacked"
	python3 -m zipfile -e "dist/$zip" "$tmp/unpacked"
	chmod 0755 "$tmp/unpacked/$member"
	os_arch="${member##*_"${api}"_}"
	case "$os_arch" in
	linux_*) wantfmt="elf-${os_arch#linux_}" ;;
	darwin_*) wantfmt="macho-${os_arch#darwin_}" ;;
	esac
	fmt="$(binfmt "$tmp/unpacked/$member")"
	[[ $fmt == "$wantfmt" ]] || die "$member is $fmt, want $wantfmt"
	say "$zip: $member ($fmt)"
done

bin="$tmp/unpacked/${name}_v${version}_${api}_linux_amd64"
desc="$("$bin" describe)"
grep -q "\"version\":\"$version\"" <<<"$desc" || die "the release binary describes itself as: $desc (want version $version, no prerelease)"
grep -q "\"api_version\":\"$api\"" <<<"$desc" || die "the release binary describes itself as: $desc"

# plugin-check takes the binary's name as it is given (it must start with
# packer-plugin-), so it runs beside the binary: packer-sdc is built from
# this module's pin (go.mod's tool) first.
say "packer-sdc plugin-check $(basename "$bin")"
"$GO" build -o "$tmp/packer-sdc" github.com/hashicorp/packer-plugin-sdk/cmd/packer-sdc
(cd "$(dirname "$bin")" && "$tmp/packer-sdc" plugin-check "$(basename "$bin")")

# Unset every setting of the table so the host's environment cannot change
# the outcome of the validations below.
mapfile -t setting_envs < <("$bin" options --format json | sed -n 's/^ *"env": "\([A-Z0-9_]*\)".*/\1/p')
[[ ${#setting_envs[@]} -gt 0 ]] || die "no settings listed by $name options"
for v in "${setting_envs[@]}"; do unset "$v"; done

say "packer plugins install --path $(basename "$bin") $addr"
export PACKER_PLUGIN_PATH="$tmp/plugins"
"$PACKER" plugins install --path "$bin" "$addr"
installed="$("$PACKER" plugins installed)"
[[ $installed == "$PACKER_PLUGIN_PATH/$addr/$(basename "$bin")" ]] ||
	die "packer installed '$installed', want the zip's binary name $PACKER_PLUGIN_PATH/$addr/$(basename "$bin")"
say "packer validate example/local with the release binary"
(cd example/local && "$PACKER" validate .)

say "the non-Linux build (podvm_nonlinux tag) under packer"
"$GO" build -tags podvm_nonlinux -o "$tmp/nonlinux/$name" .
nl="$tmp/nonlinux/$name"
export PACKER_PLUGIN_PATH="$tmp/plugins-nonlinux"
"$PACKER" plugins install --path "$nl" "$addr" >/dev/null
if out="$(cd example/local && "$PACKER" validate . 2>&1)"; then
	echo "$out"
	die "the non-Linux build accepted the podvm-rootfs builder"
fi
grep -q "podvm-rootfs builder runs only on a Linux host" <<<"$out" || {
	echo "$out"
	die "the non-Linux build failed validation, but not with the builder's refusal"
}
say "example/local refused as expected:"
grep -A3 "podvm-rootfs builder runs only" <<<"$out"
mkdir -p "$tmp/provisioner-only"
cat >"$tmp/provisioner-only/template.pkr.hcl" <<HCL
packer {
  required_plugins {
    podvm = {
      source  = "$addr"
      version = ">= $version"
    }
  }
}

# What a macOS user runs, less the cloud: any builder with a communicator.
source "null" "image" {
  communicator = "none"
}

build {
  sources = ["source.null.image"]
  provisioner "podvm-gpu" {
    nvidia_driver_version = "550"
  }
}
HCL
(cd "$tmp/provisioner-only" && "$PACKER" validate .)
"$nl" options --format json >/dev/null
"$nl" plan --distribution debian --release trixie --kernel 6.12.57+deb13-amd64 >"$tmp/plan.txt"
grep -q . "$tmp/plan.txt" || die "plan printed nothing"
# A Mac has no apt configuration to take mirrors from, so they are given;
# NVIDIA's toolkit repository key would be fetched over the network.
"$nl" mkosi --output "$tmp/mkosi" --nvidia-container-toolkit=no \
	--mirror http://mirror.example/debian --security-mirror http://mirror.example/debian-security
[[ -f $tmp/mkosi/mkosi.conf ]] || die "mkosi generated no mkosi.conf"
mkdir -p "$tmp/debs/pkg/DEBIAN"
printf 'Package: podvm-release-check\nVersion: 1\nArchitecture: all\nMaintainer: podvm\nDescription: test\n' >"$tmp/debs/pkg/DEBIAN/control"
dpkg-deb --root-owner-group -b "$tmp/debs/pkg" "$tmp/debs/podvm-release-check_1_all.deb" >/dev/null
rm -rf "$tmp/debs/pkg"
"$nl" repo --debs "$tmp/debs" --out "$tmp/repo" >/dev/null
[[ -f $tmp/repo/InRelease ]] || die "repo wrote no InRelease"
say "the non-Linux build runs options, plan, mkosi and repo"
say "release check passed: dist/ holds the v$version snapshot"
