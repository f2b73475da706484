package mkosi

// Shell text shared by the generated scripts. The scripts run under
// /bin/sh in mkosi's sandbox on the build host: apt-get and dpkg there are
// mkosi's wrappers that act on the image ($BUILDROOT), and mkosi-chroot
// runs a command inside the image.

// prelude checks the target, resolves the image's kernels and defines the
// helpers the steps call.
const prelude = `
die() { echo "podvm: $*" >&2; exit 1; }

[ "$DISTRIBUTION" = "$target_distribution" ] && [ "$RELEASE" = "$target_release" ] ||
	die "this tree was generated for $target_distribution $target_release, not $DISTRIBUTION $RELEASE; regenerate it with --distribution and --release"

# The image's kernels, never the build host's (uname -r): each
# /usr/lib/modules/<version> that has its kernel image, in dpkg's version
# order, oldest first.
image_kernels() {
	sorted=
	for d in "$BUILDROOT"/usr/lib/modules/*/; do
		[ -d "$d" ] || continue
		k=$(basename "$d")
		[ -e "$BUILDROOT/boot/vmlinuz-$k" ] || [ -e "$d/vmlinuz" ] || continue
		out= placed=
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
	echo $sorted
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
		[ -f "$BUILDROOT$f" ] && [ -x "$BUILDROOT$f" ] || die "$f is not an executable file in the image"
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
		apt="mkosi-chroot apt-get" root= d=${work#"$BUILDROOT"}
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
`

// updateInitramfs refreshes an initramfs the image already has for a
// kernel, as the provisioner does; mkosi builds its own initrd otherwise.
const updateInitramfs = `for k in $kernels; do
	if [ -x "$BUILDROOT/usr/sbin/update-initramfs" ] && [ -e "$BUILDROOT/boot/initrd.img-$k" ]; then
		echo "  update-initramfs -u -k $k"
		mkosi-chroot update-initramfs -u -k "$k"
	else
		echo "  update-initramfs skipped for $k: the image has no update-initramfs or no /boot/initrd.img-$k (mkosi builds the initrd)"
	fi
done
`

// downloadClosure fetches the packages and their whole dependency closure,
// resolved against an empty dpkg status as a consumer that has nothing
// installed would resolve it.
const downloadClosure = `echo "  downloading$pkgs with their dependency closure"
status=$(mktemp)
apt-get -q -o Dir::State::Status="$status" -o Dir::Cache::Archives="$repo/" -o APT::Get::Download-Only=true install $pkgs
rm -rf "$status" "$repo/partial" "$repo/lock"
` + debNames

// debNames renames apt's downloads to the archive's own names: apt writes
// an epoch as "%3a" into the file name, which the repository indexer
// refuses and the pool never has (libattr1_1%3a2.5.2-3_amd64.deb is
// libattr1_2.5.2-3_amd64.deb there).
const debNames = `for f in "$repo"/*%3a*.deb; do
	[ -e "$f" ] || continue
	mv "$f" "$(echo "$f" | sed 's/_[0-9]*%3a/_/')"
done
chmod 0644 "$repo"/*.deb
`

const downloadOnly = `echo "  downloading$pkgs"
(cd "$repo" && apt-get -q download $pkgs)
` + debNames

// noPrivateKeys fails the build on private key material of any kind in
// any file of the image (packer-plugin-podvm mkosi check-keys: PEM, OpenSSH,
// OpenPGP, DER; files a package shipped unchanged aside). The repository's
// key is made and discarded on the host, the module signing key on a tmpfs.
const noPrivateKeys = `"$podvm_bin" mkosi check-keys --root "$BUILDROOT" / ||
	die "private key material in the image (see above)"
`
