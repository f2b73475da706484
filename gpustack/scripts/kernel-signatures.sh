set -eu
# The C locale: the same module order (and so the same record) everywhere.
export LC_ALL=C
out=$1
shift
[ $# -gt 0 ] || { echo "podvm-gpu: no kernel to check module signatures for" >&2; exit 1; }
moddir=${PODVM_MODULES_DIR:-/usr/lib/modules}
sigs=$(mktemp)
trap 'rm -f "$sigs"' EXIT
n=0
for k; do
	dir=$moddir/$k
	# The kernel's key is what its in-tree modules carry: the first signed
	# one of the first few (in name order) that are not NVIDIA's.
	ref='' want_key='' want_signer=''
	for f in $(find "$dir/kernel" -type f -name '*.ko*' ! -name 'nvidia*' 2>/dev/null | sort | head -n 20); do
		key=$(modinfo -F sig_key "$f" 2>/dev/null || true)
		[ -n "$key" ] || continue
		ref=$f want_key=$key want_signer=$(modinfo -F signer "$f" 2>/dev/null || true)
		break
	done
	[ -n "$ref" ] || { echo "podvm-gpu: kernel $k: no signed in-tree module in $dir/kernel to check the NVIDIA modules' signatures against" >&2; exit 1; }
	mods=$(find "$dir" -type f -name 'nvidia*.ko*' | sort)
	[ -n "$mods" ] || { echo "podvm-gpu: kernel $k: no NVIDIA module in $dir" >&2; exit 1; }
	for f in $mods; do
		signer=$(modinfo -F signer "$f" 2>/dev/null || true)
		key=$(modinfo -F sig_key "$f" 2>/dev/null || true)
		algo=$(modinfo -F sig_hashalgo "$f" 2>/dev/null || true)
		if [ "$key" != "$want_key" ] || [ "$signer" != "$want_signer" ]; then
			echo "podvm-gpu: module $f of kernel $k is signed by '$signer' (key '$key'); expected '$want_signer' (key $want_key), the kernel's own module signing key, as $ref carries it" >&2
			exit 1
		fi
		case "$algo" in sha256|sha384|sha512) ;; *) echo "podvm-gpu: module $f of kernel $k: signature hash '$algo'; want sha256 or stronger" >&2; exit 1 ;; esac
		printf '%s\t%s\t%s\t%s\t%s\n' "$k" "$f" "$signer" "$key" "$algo" >>"$sigs"
		n=$((n + 1))
	done
done
mkdir -p "$(dirname "$out")"
install -m 0644 "$sigs" "$out"
echo "$n NVIDIA modules of kernels $* are signed with their kernel's own key ('$want_signer')"
