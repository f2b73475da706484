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
# nvidia-ctk stand-in: "config --in-place --config=F --set k=v ..."
# appends "k = v" lines to F. It parses the flags as nvidia-ctk v1.17's
# config command (urfave/cli) declares them: --config-file with its
# aliases --config and -c, --in-place (-i), --set, each with one or two
# dashes and its value after "=" or as the next argument; --output (-o) is
# real but not needed here, so the stand-in refuses it with the rest.
set -eu
die() { echo "nvidia-ctk stand-in: $*" >&2; exit 1; }
[ "${1:-}" = config ] || die "only config is supported"
shift
file=/etc/nvidia-container-runtime/config.toml inplace= sets=
while [ $# -gt 0 ]; do
	arg=$1 name= value= hasvalue=
	case $arg in
	--*=* | -*=*) name=${arg%%=*} value=${arg#*=} hasvalue=1 ;;
	*) name=$arg ;;
	esac
	case $name in
	--config-file | -config-file | --config | -config | -c | --c | --set | -set)
		if [ -z "$hasvalue" ]; then
			[ $# -ge 2 ] || die "flag needs an argument: $name"
			shift
			value=$1
		fi
		case $name in
		*set) sets="$sets$value
" ;;
		*) file=$value ;;
		esac
		;;
	--in-place | -in-place | -i | --i)
		[ -z "$hasvalue" ] || [ "$value" = true ] || die "$arg: only true is handled"
		inplace=1
		;;
	*) die "unknown argument $arg" ;;
	esac
	shift
done
[ -n "$inplace" ] || die "--in-place expected"
printf '%s' "$sets" | sed 's/=/ = /' >>"$file"
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
