package mkosi

import _ "embed"

// Shell text shared by the generated scripts. The scripts run under
// /bin/sh in mkosi's sandbox on the build host: apt-get and dpkg there are
// mkosi's wrappers that act on the image ($BUILDROOT), and mkosi-chroot
// runs a command inside the image.

// prelude checks the target, resolves the image's kernels and defines the
// helpers the steps call.
//
//go:embed scripts/prelude.sh
var prelude string

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
# shellcheck disable=SC2086 # $pkgs splits into package names.
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
# shellcheck disable=SC2086 # $pkgs splits into package names.
(cd "$repo" && apt-get -q download $pkgs)
` + debNames

// noPrivateKeys fails the build on private key material of any kind in
// any file of the image (packer-plugin-podvm mkosi check-keys: PEM, OpenSSH,
// OpenPGP, DER; files a package shipped unchanged aside). The repository's
// key is made and discarded on the host, the module signing key on a tmpfs.
const noPrivateKeys = `"$podvm_bin" mkosi check-keys --root "$BUILDROOT" / ||
	die "private key material in the image (see above)"
`
