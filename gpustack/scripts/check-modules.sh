# check-modules MODULE... -- KERNEL...: each module exists for each kernel
# and was built for that kernel (vermagic), not for the build host's.
set -eu
mods=
while [ $# -gt 0 ] && [ "$1" != -- ]; do
	mods="$mods $1"
	shift
done
[ $# -eq 0 ] || shift
if [ -z "$mods" ] || [ $# -eq 0 ]; then
	echo "podvm-gpu: check-modules: no module or no kernel" >&2
	exit 1
fi
for k; do
	for m in $mods; do
		# depmod's index where it is current, else the modules directory.
		f=$(modinfo -k "$k" -F filename "$m" 2>/dev/null | head -n 1) || f=
		if [ -z "$f" ] || [ ! -e "$f" ]; then
			f=$(find "/usr/lib/modules/$k" -name "$m.ko*" -print -quit 2>/dev/null)
		fi
		[ -n "$f" ] || { echo "podvm-gpu: module $m missing for kernel $k" >&2; exit 1; }
		magic=$(modinfo -F vermagic "$f")
		case "$magic" in
		"$k "*) echo "$m for $k: $f" ;;
		*) echo "podvm-gpu: module $m in $f was built for '$magic', not $k" >&2; exit 1 ;;
		esac
	done
done
