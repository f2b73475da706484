set -eu
cmd=$1
shift
tree=/var/lib/dkms
# dkms's default architecture.
arch=$(uname -m)
sha() { sha256sum | cut -d' ' -f1; }
# unsigned_for K DIR: every module in DIR was built for kernel K and
# carries no signature (the cache holds unsigned modules only).
unsigned_for() {
	n=0
	for f in "$2"/*.ko "$2"/*.ko.xz "$2"/*.ko.zst "$2"/*.ko.gz; do
		[ -e "$f" ] || continue
		magic=$(modinfo -F vermagic "$f")
		case "$magic" in
		"$1 "*) ;;
		*) echo "podvm-gpu: ${f##*/} was built for '$magic', not $1" >&2; return 1 ;;
		esac
		signer=$(modinfo -F signer "$f" 2>/dev/null || true)
		[ -z "$signer" ] || { echo "podvm-gpu: ${f##*/} is signed by '$signer'; cached modules are unsigned" >&2; return 1; }
		n=$((n + 1))
	done
	[ "$n" -gt 0 ] || { echo "podvm-gpu: no module in $2" >&2; return 1; }
}
# settle NAME VERSION K A: what is left of an installed build is the
# same whether it was compiled or restored from the cache. A compile
# leaves make.log beside the modules (with its times), which a restore
# has not; dkms add makes an empty build directory, which a compile
# removes and a restore would keep.
settle() {
	rm -rf "${tree:?}/$1/$2/$3/$4/log"
	rmdir "$tree/$1/$2/build" 2>/dev/null || true
}
case $cmd in
pending)
	# Every DKMS source a package put in /usr/src with AUTOINSTALL (as
	# dkms's package hook picks them), added if the hook did not, and for
	# each targeted kernel not installed yet: what its build reads.
	kernels=$*
	for conf in /usr/src/*/dkms.conf; do
		[ -f "$conf" ] || continue
		info=$(bash -c '. "$1" >/dev/null 2>&1; echo "$PACKAGE_NAME|$PACKAGE_VERSION|$AUTOINSTALL"' podvm "$conf")
		name=$(echo "$info" | cut -d'|' -f1)
		version=$(echo "$info" | cut -d'|' -f2)
		[ -n "$(echo "$info" | cut -d'|' -f3)" ] || continue
		if [ -z "$name" ] || [ -z "$version" ]; then
			echo "podvm-gpu: $conf names no PACKAGE_NAME or PACKAGE_VERSION" >&2
			exit 1
		fi
		src=${conf%/dkms.conf}
		# Added: dkms's own test, the source link.
		[ -L "$tree/$name/$version/source" ] || dkms add -m "$name" -v "$version" >&2
		pkg=$(dpkg-query -S "$conf" 2>/dev/null | cut -d: -f1 | head -n 1)
		pkgver=$(dpkg-query -W -f '${Version}' "$pkg" 2>/dev/null || echo none)
		srcsum=$(cd "$src" && find . -type f | LC_ALL=C sort | xargs -d '\n' sha256sum | sha)
		for k in $kernels; do
			build=/usr/lib/modules/$k/build
			[ -e "$build/include" ] || { echo "podvm-gpu: no headers for $k ($build)" >&2; exit 1; }
			for f in Module.symvers .config; do
				[ -f "$build/$f" ] || { echo "podvm-gpu: $build/$f is missing: the headers of $k are incomplete" >&2; exit 1; }
			done
			if [ "$(readlink "$tree/$name/kernel-$k-$arch" 2>/dev/null || true)" = "$version/$k/$arch" ]; then
				echo "podvm-gpu: $name/$version is installed for $k already" >&2
				continue
			fi
			cc=$(sed -n 's|^CONFIG_CC_VERSION_TEXT="*\([^" ]*\) .*|\1|p' "$build/.config")
			command -v "$cc" >/dev/null 2>&1 || cc=gcc
			hdir=$(readlink -f "$build")
			hpkg=$(dpkg-query -S "$hdir" 2>/dev/null | cut -d: -f1 | head -n 1)
			hver=$(dpkg-query -W -f '${Version}' "$hpkg" 2>/dev/null || echo none)
			gen=$(cd "$build/include/generated" 2>/dev/null && find . -type f | LC_ALL=C sort | xargs -r -d '\n' sha256sum | sha)
			echo "entry $name $version $k $arch"
			echo "layout 1"
			echo "module $name $version"
			echo "package $pkg $pkgver"
			echo "source $srcsum"
			echo "kernel $k $arch"
			echo "kernel-abi $(sha <"$build/Module.symvers")"
			echo "kernel-config $(sha <"$build/.config")"
			echo "kernel-headers ${hpkg:-none} $hver $gen"
			echo "compiler $cc: $("$cc" --version | head -n 1)"
			echo "dkms $(dkms --version | head -n 1)"
			echo "end"
		done
	done
	;;
restore)
	name=$1 version=$2 k=$3 a=$4
	d=$tree/$name/$version/$k/$a
	rm -rf "$d"
	mkdir -p "$d"
	# -m: the files get the time of this build, as compiled ones do, not
	# the archive time (a SOURCE_DATE_EPOCH build clamps later times only).
	if ! tar -xmf @RESTORE_TAR@ -C "$d" || ! unsigned_for "$k" "$d/module"; then
		rm -rf "$d" @RESTORE_TAR@
		exit 86
	fi
	rm -f @RESTORE_TAR@
	dkms install -m "$name" -v "$version" -k "$k" -a "$a" || { rc=$?; [ "$rc" -ne 86 ] || rc=1; exit "$rc"; }
	settle "$name" "$version" "$k" "$a"
	;;
build)
	name=$1 version=$2 k=$3 a=$4
	# Nothing stale: dkms skips a build whose module directory exists,
	# and pack would keep what is there under this build's key.
	rm -rf "$tree/${name:?}/${version:?}/${k:?}/${a:?}"
	rc=0
	dkms build -m "$name" -v "$version" -k "$k" -a "$a" || rc=$?
	case $rc in
	0) ;;
	77) echo "podvm-gpu: dkms does not build $name/$version for $k (BUILD_EXCLUSIVE)" >&2; exit 87 ;;
	86 | 87) exit 1 ;;
	*) exit "$rc" ;;
	esac
	dkms install -m "$name" -v "$version" -k "$k" -a "$a" || { rc=$?; case $rc in 86 | 87) rc=1 ;; esac; exit "$rc"; }
	settle "$name" "$version" "$k" "$a"
	;;
pack)
	name=$1 version=$2 k=$3 a=$4
	d=$tree/$name/$version/$k/$a
	unsigned_for "$k" "$d/module"
	tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf @PACK_TAR@ -C "$d" module
	# Readable by a communicator's unprivileged user.
	chmod 0644 @PACK_TAR@
	;;
clean)
	rm -f @PACK_TAR@ @RESTORE_TAR@
	;;
finish)
	rm -f @NO_AUTOINSTALL@
	;;
*)
	echo "podvm-dkms: unknown command $cmd" >&2
	exit 2
	;;
esac
