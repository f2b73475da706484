#!/bin/sh
# toolkit-stub.sh DIR: build stand-ins for NVIDIA's container toolkit
# packages into DIR, for the real mkosi build test. NVIDIA's repository is
# unreachable from CI and Debian does not package the toolkit, so the test
# serves these from a local signed mirror: they prove the repository,
# keyring and package wiring and the nvidia-ctk config step, not NVIDIA's
# binaries. The nvidia-ctk stand-in only records the keys it is asked to set.
set -eu
out=$1
version=0.0.0~podvm.test-1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"

pkg() { # name depends files-setup
	name=$1 depends=$2
	d=$work/$name
	mkdir -p "$d/DEBIAN"
	{
		echo "Package: $name"
		echo "Version: $version"
		echo "Architecture: amd64"
		echo "Maintainer: podvm tests <tests@podvm.invalid>"
		[ -z "$depends" ] || echo "Depends: $depends"
		echo "Description: podvm test stand-in for NVIDIA's $name"
	} >"$d/DEBIAN/control"
}

pkg libnvidia-container1 ""
pkg libnvidia-container-tools "libnvidia-container1 (= $version)"
mkdir -p "$work/libnvidia-container-tools/usr/bin"
printf '#!/bin/sh\necho "nvidia-container-cli stand-in"\n' >"$work/libnvidia-container-tools/usr/bin/nvidia-container-cli"

pkg nvidia-container-toolkit-base ""
mkdir -p "$work/nvidia-container-toolkit-base/usr/bin" "$work/nvidia-container-toolkit-base/etc/nvidia-container-runtime"
cat >"$work/nvidia-container-toolkit-base/usr/bin/nvidia-ctk" <<'STUB'
#!/bin/sh
# nvidia-ctk stand-in: "config --config-file=F --in-place --set k=v ..."
# appends "k = v" lines to F; anything else fails.
set -eu
[ "${1:-}" = config ] || { echo "nvidia-ctk stand-in: only config is supported" >&2; exit 1; }
shift
file=/etc/nvidia-container-runtime/config.toml inplace=
while [ $# -gt 0 ]; do
	case $1 in
	--config-file=*) file=${1#--config-file=} ;;
	--in-place | -i) inplace=1 ;;
	--set) shift; echo "$1" | sed 's/=/ = /' >>"$file.sets" ;;
	*) echo "nvidia-ctk stand-in: unknown argument $1" >&2; exit 1 ;;
	esac
	shift
done
[ -n "$inplace" ] || { echo "nvidia-ctk stand-in: --in-place expected" >&2; exit 1; }
cat "$file.sets" >>"$file"
rm -f "$file.sets"
STUB
echo '# config.toml of the nvidia-container-toolkit-base stand-in' >"$work/nvidia-container-toolkit-base/etc/nvidia-container-runtime/config.toml"
echo /etc/nvidia-container-runtime/config.toml >"$work/nvidia-container-toolkit-base/DEBIAN/conffiles"

pkg nvidia-container-toolkit "nvidia-container-toolkit-base (= $version), libnvidia-container-tools (= $version)"
mkdir -p "$work/nvidia-container-toolkit/usr/bin"
printf '#!/bin/sh\necho "nvidia-container-toolkit stand-in"\n' >"$work/nvidia-container-toolkit/usr/bin/nvidia-container-toolkit"

for d in "$work"/*/; do
	chmod 0755 "$d"usr/bin/* 2>/dev/null || true
	dpkg-deb --root-owner-group -Zxz -b "$d" "$out" >/dev/null
done
