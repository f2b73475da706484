package gpustack

// Contents of the files the plan writes into the image. They are the same
// for every distro, so both back ends write the same bytes.

// hookScript is the kata guest OCI prestart hook. kata-agent runs it with
// the container state on stdin; the toolkit hook injects the GPU.
const hookScript = `#!/bin/sh
# OCI prestart hook run by kata-agent in the guest: lets the NVIDIA
# container toolkit inject the GPU into the container. Installed by podvm-gpu.
set -eu
exec /usr/bin/nvidia-container-toolkit -debug "$@" >>/var/log/nvidia-hook.log 2>&1
`

// cdiService generates the CDI spec at boot. It loads the driver's module
// itself: udev may not have bound the GPU yet when it runs.
func cdiService(module string) string {
	return `[Unit]
Description=Generate the NVIDIA CDI specification
Documentation=https://github.com/NVIDIA/nvidia-container-toolkit
# kata-agent reads the spec when it creates GPU containers.
Before=kata-agent.service
After=systemd-modules-load.service nvidia-persistenced.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStartPre=/sbin/modprobe ` + module + `
ExecStart=/usr/bin/nvidia-ctk cdi generate --output=/run/cdi/nvidia.yaml

[Install]
WantedBy=multi-user.target
`
}

const ccService = `[Unit]
Description=Set the NVIDIA GPU ready for confidential computing
Before=kata-agent.service
After=nvidia-persistenced.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/bin/nvidia-smi conf-compute -srs 1

[Install]
WantedBy=multi-user.target
`

const nouveauBlacklist = `# The NVIDIA driver needs the GPU; nouveau must not bind it first.
blacklist nouveau
options nouveau modeset=0
`

const gateScriptText = `#!/bin/sh
# Exit 0 when an NVIDIA PCI device (vendor 0x10de) is present, 1 otherwise.
# GPU units use it as ExecCondition, so one image serves GPU and non-GPU VMs.
for f in /sys/bus/pci/devices/*/vendor; do
	[ -r "$f" ] || continue
	[ "$(cat "$f")" = 0x10de ] && exit 0
done
exit 1
`

// moduleLoadText replaces the driver's modules-load.d list.
const moduleLoadText = `# Emptied by podvm-gpu. Listing the NVIDIA driver here made
# systemd-modules-load.service fail on every VM without a GPU. Where an
# NVIDIA GPU is present, udev loads the driver by its PCI alias, and the
# GPU units load what they need themselves.
`

// nouveauHookText is an initramfs-tools hook: hooks run after the
// initramfs's modules are collected, so removing nouveau here keeps it out
// of early boot even where the blacklist would not be read in time.
const nouveauHookText = `#!/bin/sh
# Keeps nouveau out of the initramfs, so nothing binds an NVIDIA GPU before
# the NVIDIA driver. Installed by podvm-gpu.
set -e
case "${1:-}" in prereqs) exit 0 ;; esac
for d in "${DESTDIR}/lib/modules" "${DESTDIR}/usr/lib/modules"; do
	[ -d "$d" ] && find "$d" -name 'nouveau.ko*' -delete
done
exit 0
`
