for k in $kernels; do
	if [ -x "$BUILDROOT/usr/sbin/update-initramfs" ] && [ -e "$BUILDROOT/boot/initrd.img-$k" ]; then
		echo "  update-initramfs -u -k $k"
		mkosi-chroot update-initramfs -u -k "$k"
	else
		echo "  update-initramfs skipped for $k: the image has no update-initramfs or no /boot/initrd.img-$k (mkosi builds the initrd)"
	fi
done
