#!/bin/sh
# Keeps nouveau out of the initramfs, so nothing binds an NVIDIA GPU before
# the NVIDIA driver. Installed by podvm-gpu.
set -e
case "${1:-}" in prereqs) exit 0 ;; esac
for d in "${DESTDIR}/lib/modules" "${DESTDIR}/usr/lib/modules"; do
	[ -d "$d" ] && find "$d" -name 'nouveau.ko*' -delete
done
exit 0
