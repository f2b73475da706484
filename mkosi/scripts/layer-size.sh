# What the root holds at the end of the layer's post-installation, so the
# tree's dm-verity hash partition can be sized: SHA-256 over 4 KiB blocks
# takes about 1/127 of the data it covers. The layer's share is its own
# packages ($layer_packages; the dependencies it shares with the tree are
# not counted), the modules DKMS built and its repository ($layer_repo).
echo '[size] The root with the GPU layer'
# shellcheck disable=SC2016,SC2086 # ${...} is dpkg-query's format; a word list of package names
layer_kib=$(mkosi-chroot dpkg-query -W -f='${Installed-Size}\n' $layer_packages 2>/dev/null | awk '{ s += $1 } END { print s + 0 }')
modules_kib=$(du -skc "$BUILDROOT"/usr/lib/modules/*/updates 2>/dev/null | awk 'END { print $1 + 0 }')
repo_kib=0
if [ -n "$layer_repo" ] && [ -d "$BUILDROOT$layer_repo" ]; then
	repo_kib=$(du -sk "$BUILDROOT$layer_repo" | cut -f1)
fi
root_kib=$(du -skx "$BUILDROOT" | cut -f1)
echo "  the root holds $((root_kib / 1024)) MiB uncompressed; of it the GPU layer: packages $((layer_kib / 1024)) MiB, DKMS-built modules $((modules_kib / 1024)) MiB, repository $((repo_kib / 1024)) MiB"
echo "  a dm-verity hash partition of $((root_kib / 127 / 1024 + 1)) MiB covers this root even uncompressed (a squashfs root needs less)"
