# shellcheck disable=SC2086 # set -f: $want and $held split into words on purpose, and dpkg globs reach dpkg-query unexpanded.
set -euf
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
