package gpustack

import (
	_ "embed"
	"strings"
)

// Contents of the files the plan writes into the image. They are the same
// for every distro, so both back ends write the same bytes.

// hookScript is the kata guest OCI prestart hook. kata-agent runs it with
// the container state on stdin; the toolkit hook injects the GPU.
const hookScript = `#!/bin/sh
# OCI prestart hook run by kata-agent in the guest: lets the NVIDIA
# container toolkit inject the GPU into the container. Installed by podvm-gpu.
set -eu
exec /usr/bin/nvidia-container-toolkit -debug "$@" >>/var/log/nvidia-hook.log 2>&1
`

// cdiScript is installed at cdiScriptPath: it loads the driver's modules
// (udev may not have bound the GPU yet when it runs), creates the control
// device nodes, generates the spec and refuses one that CUDA cannot use.
//
//go:embed scripts/nvidia-cdi-generate.sh
var cdiScript string

// cdiService runs cdiScript at boot, with the spec's path and the driver's
// modules in load order as its arguments. A spec it refuses fails the unit.
func cdiService(modules []string) string {
	return `[Unit]
Description=Generate the NVIDIA CDI specification
Documentation=https://github.com/NVIDIA/nvidia-container-toolkit
# kata-agent reads the spec when it creates GPU containers.
Before=kata-agent.service
After=systemd-modules-load.service nvidia-persistenced.service

[Service]
Type=oneshot
RemainAfterExit=yes
# Loads the modules in this order, creates the control device nodes, then
# generates the spec and fails unless it names a GPU, /dev/nvidiactl and
# /dev/nvidia-uvm.
ExecStart=` + cdiScriptPath + ` ` + cdiSpecPath + ` ` + strings.Join(modules, " ") + `

[Install]
WantedBy=multi-user.target
`
}

const ccService = `[Unit]
Description=Set the NVIDIA GPU ready for confidential computing
Before=kata-agent.service
After=nvidia-persistenced.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/bin/nvidia-smi conf-compute -srs 1

[Install]
WantedBy=multi-user.target
`

const nouveauBlacklist = `# The NVIDIA driver needs the GPU; nouveau must not bind it first.
blacklist nouveau
options nouveau modeset=0
`

const gateScriptText = `#!/bin/sh
# Exit 0 when an NVIDIA PCI device (vendor 0x10de) is present, 1 otherwise.
# GPU units use it as ExecCondition, so one image serves GPU and non-GPU VMs.
for f in /sys/bus/pci/devices/*/vendor; do
	[ -r "$f" ] || continue
	[ "$(cat "$f")" = 0x10de ] && exit 0
done
exit 1
`

// moduleLoadText replaces the driver's modules-load.d list.
const moduleLoadText = `# Emptied by podvm-gpu. Listing the NVIDIA driver here made
# systemd-modules-load.service fail on every VM without a GPU. Where an
# NVIDIA GPU is present, udev loads the driver by its PCI alias, and the
# GPU units load what they need themselves.
`

// nouveauHookText is an initramfs-tools hook: hooks run after the
// initramfs's modules are collected, so removing nouveau here keeps it out
// of early boot even where the blacklist would not be read in time.
const nouveauHookText = `#!/bin/sh
# Keeps nouveau out of the initramfs, so nothing binds an NVIDIA GPU before
# the NVIDIA driver. Installed by podvm-gpu.
set -e
case "${1:-}" in prereqs) exit 0 ;; esac
for d in "${DESTDIR}/lib/modules" "${DESTDIR}/usr/lib/modules"; do
	[ -d "$d" ] && find "$d" -name 'nouveau.ko*' -delete
done
exit 0
`

// dkmsNoAutoinstallText is in the image while the driver installs; DKMS
// reads only that the file exists.
const dkmsNoAutoinstallText = `# Written by podvm-gpu for the length of the image build: the NVIDIA modules
# are built, or restored from the build host's module cache, by podvm-gpu's
# own step, which removes this file.
`

// dkmsConfText keeps DKMS from signing, and so from minting a key pair in
// the image (it does so whenever openssl is present and its key is
// missing), now and on any later rebuild on a node: without a sign-file
// it stops before it looks for a key.
const dkmsConfText = `# Written by podvm-gpu. DKMS signs nothing and never creates a signing key
# in the image: podvm-gpu signs the NVIDIA modules at build time with a key
# that lives only in memory (see nvidia_module_signing). Modules rebuilt on a
# node by DKMS are unsigned.
sign_file="/usr/lib/podvm-gpu/dkms-signing-disabled"
`

// signModulesScript signs, or verifies the signatures of, every NVIDIA
// module of the kernels given as arguments. Arguments: mode (sign,
// sign-key or verify), the certificate subject ("" for the certificate's
// issuer), the DER and PEM certificate paths, then the kernels. sign makes
// the key in /run, which must be a tmpfs; sign-key reads a header with the
// input's length, a passphrase line and then the key and certificate (PEM)
// from its input into the same place. Either is removed on exit, whatever happens.
const signModulesScript = `set -eu
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
`

// exposeMountUnit binds the repository read-only at where. The driver
// DaemonSet of the GPU Operator mounts the host's /run/nvidia into its
// containers (Bidirectional propagation), so a bind made below it before
// kubelet starts is what the driver container sees, with no operator patch.
func exposeMountUnit(repo, where string) string {
	return `[Unit]
Description=Node-local package repository, read-only, for the GPU Operator driver container
Documentation=https://github.com/podvm-gpu/packer-plugin-podvm/blob/main/docs/gpu-operator.md
# Harmless without the GPU Operator: a read-only view of ` + repo + `.
RequiresMountsFor=` + repo + `
ConditionPathIsDirectory=` + repo + `
Before=kubelet.service containerd.service

[Mount]
What=` + repo + `
Where=` + where + `
Type=none
Options=bind,ro

[Install]
WantedBy=local-fs.target
`
}

// holdScript holds the installed packages that its arguments match:
// patterns (dpkg globs, {kernel} for each kernel), "--", then the kernels.
// Patterns that match nothing installed are skipped; with none at all (a
// kernel that dpkg does not know) it says so and holds nothing, and the
// manifest's empty held list shows it.
const holdScript = `set -euf
pats=
while [ $# -gt 0 ] && [ "$1" != -- ]; do pats="$pats $1"; shift; done
[ $# -eq 0 ] || shift
want=
for p in $pats; do
	case $p in
	*'{kernel}'*) for k; do want="$want ${p%%'{kernel}'*}$k${p#*'{kernel}'}"; done ;;
	*) want="$want $p" ;;
	esac
done
[ -n "$want" ] || { echo "podvm-gpu: no package to hold" >&2; exit 1; }
held=$(dpkg-query -W -f '${db:Status-Abbrev}\t${Package}\n' $want 2>/dev/null | awk -F'\t' '$1 ~ /^.i/ { print $2 }' | sort -u)
[ -n "$held" ] || { echo "podvm-gpu: nothing held: no installed package matches$want" >&2; exit 0; }
apt-mark hold $held >/dev/null
echo "held $(echo $held | wc -w) packages:" $held
`

// driverVersionScript compares the version of the NVIDIA user-space
// libraries (the file that libnvidia-ml.so.1 and libcuda.so.1 resolve to
// is named for it) with the module's, per kernel. Arguments: the module,
// then the kernels.
const driverVersionScript = `set -eu
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
echo "NVIDIA user-space libraries ($(echo $libs | wc -w)) and module $module are version $mv for kernels $*"
`
