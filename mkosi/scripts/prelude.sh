
die() { echo "podvm: $*" >&2; exit 1; }

if [ "$DISTRIBUTION" != "$target_distribution" ] || [ "$RELEASE" != "$target_release" ]; then
	die "this tree was generated for $target_distribution $target_release, not $DISTRIBUTION $RELEASE; regenerate it with --distribution and --release"
fi

# The image's kernels, never the build host's (uname -r): each
# /usr/lib/modules/<version> that has its kernel image, in dpkg's version
# order, oldest first.
image_kernels() {
	sorted=
	for d in "$BUILDROOT"/usr/lib/modules/*/; do
		[ -d "$d" ] || continue
		k=$(basename "$d")
		[ -e "$BUILDROOT/boot/vmlinuz-$k" ] || [ -e "$d/vmlinuz" ] || continue
		out='' placed=''
		for s in $sorted; do
			if [ -z "$placed" ] && dpkg --compare-versions "$k" lt "$s"; then
				out="$out $k"
				placed=1
			fi
			out="$out $s"
		done
		[ -n "$placed" ] || out="$out $k"
		sorted=$out
	done
	# Each version follows one blank: drop the first.
	echo "${sorted# }"
}

all_kernels=$(image_kernels)
[ -n "$all_kernels" ] ||
	die "no kernel in the image (looked for /usr/lib/modules/<version> with /boot/vmlinuz-<version>); the distro drop-in's Packages= installs one"
case $kernels_setting in
newest) kernels=${all_kernels##* } ;;
all) kernels=$all_kernels ;;
*)
	wanted=$(echo "$kernels_setting" | tr ',' ' ')
	for k in $wanted; do
		case " $all_kernels " in
		*" $k "*) ;;
		*) die "kernels: $k is not installed in the image; installed: $all_kernels" ;;
		esac
	done
	kernels=
	for k in $all_kernels; do
		case " $wanted " in *" $k "*) kernels="$kernels $k" ;; esac
	done
	kernels=${kernels# }
	;;
esac
echo "podvm: image kernels: $all_kernels; targeted: $kernels"

installed() {
	for p in "$@"; do
		dpkg-query --admindir="$BUILDROOT/var/lib/dpkg" -W -f='${Status}' "$p" 2>/dev/null | grep -q ' installed$' ||
			die "package $p is not installed in the image"
	done
}

exists() {
	[ -e "$BUILDROOT$1" ] || die "$1 is missing from the image"
}

executable() {
	for f in "$@"; do
		if [ ! -f "$BUILDROOT$f" ] || [ ! -x "$BUILDROOT$f" ]; then
			die "$f is not an executable file in the image"
		fi
		echo "  executable: $f"
	done
}

enable_units() {
	for u in "$@"; do
		echo "  enable $u"
		if [ -x "$BUILDROOT/usr/bin/systemctl" ]; then
			mkosi-chroot systemctl enable "$u"
		else
			systemctl --root="$BUILDROOT" enable "$u"
		fi
	done
}

# check_modules MODULE...: each module exists for each targeted kernel and
# was built for that kernel (vermagic), not for the build host's.
check_modules() {
	for k in $kernels; do
		for m in "$@"; do
			f=$(find "$BUILDROOT/usr/lib/modules/$k" -name "$m.ko*" -print -quit)
			[ -n "$f" ] || die "module $m missing for kernel $k"
			magic=$(mkosi-chroot modinfo -F vermagic "${f#"$BUILDROOT"}")
			case "$magic" in
			"$k "*) echo "  $m for $k: ${f#"$BUILDROOT"}" ;;
			*) die "module $m in ${f#"$BUILDROOT"} was built for '$magic', not $k" ;;
			esac
		done
	done
}

# verify_repo DIR KEYRING CLOSURE PACKAGE-TEMPLATES: the offline self-test
# a driver container runs: apt with the baked repository as its only
# source must take each package from it (verify_repo_apt, which the
# provisioner runs too). CLOSURE=full: the repository holds every
# dependency, so apt starts from an empty dpkg status; otherwise from a
# copy of the image's, which supplies what the repository leaves out. The
# image's own apt runs it where the image has one; a minimal image has
# none, and then the build host's apt reads the repository in $BUILDROOT.
verify_repo() {
	# Not /var/tmp, /tmp or /run: mkosi-chroot mounts fresh ones over them.
	work=$(mktemp -d "$BUILDROOT/var/lib/podvm-verify.XXXXXX")
	trap 'rm -rf "$work"' EXIT
	if [ -x "$BUILDROOT/usr/bin/apt-get" ]; then
		apt="mkosi-chroot apt-get" root='' d=${work#"$BUILDROOT"}
	else
		apt=/usr/bin/apt-get root=$BUILDROOT d=$work
	fi
	mkdir -p "$work/sources.list.d" "$work/preferences.d" "$work/lists/partial" "$work/archives/partial"
	if [ "$3" = full ]; then
		: >"$work/status"
	else
		cp "$BUILDROOT/var/lib/dpkg/status" "$work/status"
	fi
	printf 'Types: deb\nURIs: file://%s\nSuites: ./\nSigned-By: %s\n' "$root$1" "$root$2" >"$work/sources.list.d/local.sources"
	pkgs=
	for k in $kernels; do
		for p in $4; do
			pkgs="$pkgs $(echo "$p" | sed "s/{kernel}/$k/g")"
		done
	done
	# shellcheck disable=SC2086 # package names hold no blanks or globs: one word each.
	verify_repo_apt "$apt" "$d" $pkgs || die "the local repository $1 failed its self-test"
	rm -rf "$work"
	trap - EXIT
}

# repo_files_only DIR: the repository holds packages, its index, the
# public keyring and the manifest, nothing else.
repo_files_only() {
	for f in "$BUILDROOT$1"/* "$BUILDROOT$1"/.[!.]*; do
		[ -e "$f" ] || continue
		case "${f##*/}" in
		*.deb | Packages | Packages.gz | Release | InRelease | Release.gpg | keyring.gpg | keyring.asc | manifest.json) ;;
		*) die "unexpected file in the local repository: ${f#"$BUILDROOT"}" ;;
		esac
	done
}
