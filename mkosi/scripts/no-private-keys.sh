"$podvm_bin" mkosi check-keys --root "$BUILDROOT" / ||
	die "private key material in the image (see above)"
