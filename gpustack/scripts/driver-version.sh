set -eu
module=$1
shift
[ $# -gt 0 ] || { echo "podvm-gpu: no kernel to check" >&2; exit 1; }
libs=$(find /usr/lib /usr/lib64 -xdev \( -name 'libnvidia-ml.so.[0-9]*.*' -o -name 'libcuda.so.[0-9]*.*' \) 2>/dev/null | sort || true)
[ -n "$libs" ] || { echo "podvm-gpu: no NVIDIA user-space library (libnvidia-ml, libcuda) in the image" >&2; exit 1; }
for k; do
	mv=$(modinfo -k "$k" -F version "$module" 2>/dev/null) || { echo "podvm-gpu: no module $module for kernel $k" >&2; exit 1; }
	for l in $libs; do
		lv=${l##*.so.}
		[ "$lv" = "$mv" ] || { echo "podvm-gpu: Driver/library version mismatch: $l is $lv, module $module of kernel $k is $mv" >&2; exit 1; }
	done
done
echo "NVIDIA user-space libraries ($(printf '%s\n' "$libs" | wc -l)) and module $module are version $mv for kernels $*"
