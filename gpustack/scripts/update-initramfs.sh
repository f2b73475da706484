# update-initramfs CONF KERNEL...: end a DeferInitramfs (CONF is
# initramfs-tools' configuration, its original kept beside it), then
# regenerate the initramfs of each kernel that has one. An image that
# boots without one loads nouveau from the root file system, where the
# modprobe.d blacklist already applies; mkosi builds its own initrd.
set -eu
c=$1
shift
if [ -e "$c.podvm-saved" ]; then
	mv -f "$c.podvm-saved" "$c"
	echo "initramfs updates resumed"
fi
for k; do
	if command -v update-initramfs >/dev/null 2>&1 && [ -e "/boot/initrd.img-$k" ]; then
		update-initramfs -u -k "$k"
	else
		echo "no initramfs for $k, nothing to update"
	fi
done
