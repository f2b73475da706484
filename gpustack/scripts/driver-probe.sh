set -eu
template=$1
shift
[ $# -gt 0 ] || { echo "podvm-gpu: no kernel to choose the driver source for" >&2; exit 1; }
for k; do
	p=${template%%'{kernel}'*}$k${template#*'{kernel}'}
	# policy, not show: a package apt cannot install (no candidate) counts
	# as missing. C locale: the field name is translated otherwise.
	cand=$(LC_ALL=C apt-cache policy "$p" 2>/dev/null | sed -n 's/^ *Candidate: *//p' | head -n 1)
	if [ -z "$cand" ] || [ "$cand" = "(none)" ]; then
		echo "podvm-gpu: the archive has no $p for kernel $k: DKMS"
		echo distro
		exit 0
	fi
	echo "podvm-gpu: the archive has $p $cand"
done
echo precompiled
