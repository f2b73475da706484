set -eu
mode=$1 subject=$2 der=$3 pem=$4
shift 4
# modinfo reports the issuer CN of the signing certificate as the signer.
issuer_cn() { openssl x509 -inform DER -in "$1" -noout -issuer -nameopt sep_multiline,sname,utf8 | sed -n 's/^ *CN=//p' | head -n 1; }
[ $# -gt 0 ] || { echo "podvm-gpu: no kernel to sign modules for" >&2; exit 1; }
# Only what DKMS installed (updates/): the kernel's own nvidia-wmi or
# nvidiafb modules keep the distribution's signature.
modules() {
	[ -d "/usr/lib/modules/$1/updates" ] || return 0
	find "/usr/lib/modules/$1/updates" -name 'nvidia*.ko' -o -name 'nvidia*.ko.xz' -o -name 'nvidia*.ko.zst' -o -name 'nvidia*.ko.gz' | sort
}
# Keys DKMS makes when it is not told otherwise (dkms 3 and, on Ubuntu,
# dkms 2 through shim-signed).
dkms_keys="/var/lib/dkms/mok.key /var/lib/shim-signed/mok/MOK.priv"
if [ "$mode" = verify ]; then
	[ -n "$subject" ] || subject=$(issuer_cn "$der")
	[ -n "$subject" ] || { echo "$der: no issuer CN to check the modules' signer against" >&2; exit 1; }
	for key in $dkms_keys; do
		[ ! -e "$key" ] || { echo "$key: a private module signing key in the image" >&2; exit 1; }
	done
	n=0
	for k; do
		for f in $(modules "$k"); do
			signer=$(modinfo -F signer "$f" 2>/dev/null || true)
			algo=$(modinfo -F sig_hashalgo "$f" 2>/dev/null || true)
			case "$algo" in sha256|sha384|sha512) ;; *) echo "$f: signature hash '$algo'; want sha256 or stronger" >&2; exit 1 ;; esac
			[ "$signer" = "$subject" ] || { echo "$f: signed by '$signer'; want '$subject'" >&2; exit 1; }
			n=$((n + 1))
		done
	done
	[ "$n" -gt 0 ] || { echo "no NVIDIA module found for kernels $*" >&2; exit 1; }
	echo "$n NVIDIA modules of kernels $* are signed by '$subject'"
	exit 0
fi
# The key must never reach a disk: /run is a tmpfs at boot, in the builder's
# chroot and in mkosi's sandbox.
if [ "$(stat -f -c %T /run)" != tmpfs ]; then
	echo "podvm-gpu: /run is not a tmpfs; refusing to write a signing key there" >&2
	exit 1
fi
dir=$(mktemp -d /run/podvm-module-signing.XXXXXX)
new=""
trap 'rm -rf "$dir"; [ -z "$new" ] || rm -f "$new"' EXIT
trap 'exit 1' INT TERM HUP
chmod 700 "$dir"
if [ "$mode" = sign-key ]; then
	# The input is a header, "podvm-module-key <bytes that follow>", then
	# the passphrase line, the key and the certificate. A missing or short
	# input (an execute_command that reads the command's input itself, as
	# sudo -S does for its password) stops here, not later in openssl.
	IFS= read -r header || true
	want=${header#podvm-module-key }
	case $want in
	"$header" | "" | *[!0-9]*)
		echo "podvm-gpu: the module signing key did not reach this command's input (first line: ${#header} bytes, not podvm's header); an execute_command that reads the input itself, such as sudo -S, takes it: see nvidia_module_signing=key in the provisioner's docs" >&2
		exit 1
		;;
	esac
	cat >"$dir/input"
	got=$(wc -c <"$dir/input")
	if [ "$got" != "$want" ]; then
		echo "podvm-gpu: the module signing key's input is $got bytes, want $want: something between podvm-gpu and this command (execute_command, sudo -S) read part of it; see nvidia_module_signing=key in the provisioner's docs" >&2
		exit 1
	fi
	{
		IFS= read -r pin || true
		cat >"$dir/key.pem"
	} <"$dir/input"
	rm -f "$dir/input"
	# sign-file reads the key's passphrase from KBUILD_SIGN_PIN.
	[ -z "$pin" ] || export KBUILD_SIGN_PIN="$pin"
	openssl x509 -in "$dir/key.pem" -outform DER -out "$dir/cert.der" 2>"$dir/openssl.log" ||
		{ cat "$dir/openssl.log" >&2; echo "podvm-gpu: no certificate in the key input" >&2; exit 1; }
	subject=$(issuer_cn "$dir/cert.der")
else
	openssl req -new -x509 -newkey rsa:3072 -sha256 -nodes -days 36500 -subj "/CN=$subject/" \
		-addext "extendedKeyUsage=codeSigning" -keyout "$dir/key.pem" -outform DER -out "$dir/cert.der" 2>"$dir/openssl.log" ||
		{ cat "$dir/openssl.log" >&2; exit 1; }
fi
n=0
for k; do
	signfile=""
	for c in "/usr/lib/linux-kbuild-${k%.*}/scripts/sign-file" "/usr/src/linux-headers-$k/scripts/sign-file" "/usr/lib/modules/$k/build/scripts/sign-file"; do
		[ -x "$c" ] && { signfile=$c; break; }
	done
	[ -n "$signfile" ] || { echo "podvm-gpu: no sign-file for kernel $k (install its headers)" >&2; exit 1; }
	hash=$(sed -n 's/^CONFIG_MODULE_SIG_HASH="\(.*\)"$/\1/p' "/boot/config-$k" 2>/dev/null || true)
	[ -n "$hash" ] || hash=sha256
	for f in $(modules "$k"); do
		case "$f" in
		*.ko.xz) xz -dc "$f" >"$dir/m.ko" ;;
		*.ko.zst) zstd -dcq "$f" >"$dir/m.ko" ;;
		*.ko.gz) gzip -dc "$f" >"$dir/m.ko" ;;
		*) cp "$f" "$dir/m.ko" ;;
		esac
		# A signature from an earlier run is cut off first: sign-file appends.
		size=$(stat -c %s "$dir/m.ko")
		if [ "$(tail -c 28 "$dir/m.ko")" = "~Module signature appended~" ]; then
			siglen=$(od -An -tu4 --endian=big -j $((size - 32)) -N 4 "$dir/m.ko" | tr -d ' ')
			truncate -s $((size - 40 - siglen)) "$dir/m.ko"
		fi
		"$signfile" "$hash" "$dir/key.pem" "$dir/cert.der" "$dir/m.ko"
		new="$f.podvm-new"
		# xz -1 (1 MiB dictionary, CRC32, as the kernel's decompressor
		# wants): 4x faster than -6 on nvidia.ko's 88 MB for 2% more bytes.
		case "$f" in
		*.ko.xz) xz --check=crc32 -1 -c "$dir/m.ko" >"$new" ;;
		*.ko.zst) zstd -q -c "$dir/m.ko" >"$new" ;;
		*.ko.gz) gzip -9 -c "$dir/m.ko" >"$new" ;;
		*) cp "$dir/m.ko" "$new" ;;
		esac
		chmod 0644 "$new"
		mv "$new" "$f"
		new=""
		n=$((n + 1))
	done
done
[ "$n" -gt 0 ] || { echo "podvm-gpu: no NVIDIA module found for kernels $*" >&2; exit 1; }
# A key DKMS made before its configuration applied goes, with its pair.
for key in $dkms_keys; do
	if [ -e "$key" ]; then
		echo "podvm-gpu: removing $key, which DKMS made" >&2
		rm -f "$key" "${key%.*}.pub" "${key%.*}.der"
	fi
done
mkdir -p "$(dirname "$der")" "$(dirname "$pem")"
install -m 0644 -o root -g root "$dir/cert.der" "$der"
openssl x509 -inform DER -in "$der" -out "$dir/cert.pem"
install -m 0644 -o root -g root "$dir/cert.pem" "$pem"
# What each module carries now, as modinfo reads it, for the manifest:
# kernel, file, signer, signing key id, hash.
for k; do
	for f in $(modules "$k"); do
		printf '%s\t%s\t%s\t%s\t%s\n' "$k" "$f" "$(modinfo -F signer "$f")" "$(modinfo -F sig_key "$f")" "$(modinfo -F sig_hashalgo "$f")"
	done
done >"$dir/signatures"
install -m 0644 -o root -g root "$dir/signatures" "${der%/*}/module-signatures.tsv"
echo "signed $n NVIDIA modules of kernels $* ($hash, signer '$subject') with a key that was never written to the image; certificate $der"
