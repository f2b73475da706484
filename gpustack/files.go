package gpustack

import (
	_ "embed"
	"strings"
)

// Contents of the files the plan writes into the image. They are the same
// for every distro, so both back ends write the same bytes.

// hookScript is the kata guest OCI prestart hook. kata-agent runs it with
// the container state on stdin; the toolkit hook injects the GPU.
//
//go:embed scripts/nvidia-hook.sh
var hookScript string

// cdiScript is installed at cdiScriptPath: it loads the driver's modules
// (udev may not have bound the GPU yet when it runs), creates the control
// device nodes, generates the spec and refuses one that CUDA cannot use.
//
//go:embed scripts/nvidia-cdi-generate.sh
var cdiScript string

// cdiService runs cdiScript at boot, with the spec's path and the driver's
// modules in load order as its arguments. A spec it refuses fails the unit.
func cdiService(modules []string) string {
	return `[Unit]
Description=Generate the NVIDIA CDI specification
Documentation=https://github.com/NVIDIA/nvidia-container-toolkit
# kata-agent reads the spec when it creates GPU containers.
Before=kata-agent.service
After=systemd-modules-load.service nvidia-persistenced.service

[Service]
Type=oneshot
RemainAfterExit=yes
# Loads the modules in this order, creates the control device nodes, then
# generates the spec and fails unless it names a GPU, /dev/nvidiactl and
# /dev/nvidia-uvm.
ExecStart=` + cdiScriptPath + ` ` + cdiSpecPath + ` ` + strings.Join(modules, " ") + `

[Install]
WantedBy=multi-user.target
`
}

// persistencedUnit replaces the driver package's nvidia-persistenced unit
// on every distro: the packages' units differ (Debian's runs it with
// persistence on, Ubuntu's with --no-persistence-mode and
// StopWhenUnneeded). A pod VM wants the driver state kept from boot, and
// with uvm, UVM's too: NVIDIA's guest init for kata (NVRC) runs it so, and
// a confidential GPU keeps its SPDM session only while the driver stays
// up. user is the package's system user.
func persistencedUnit(user string, uvm bool) string {
	args := "--user " + user
	if uvm {
		args += " --uvm-persistence-mode"
	}
	return `# Installed by podvm-gpu: replaces the driver package's unit, to keep
# persistence on from boot.
[Unit]
Description=NVIDIA Persistence Daemon
Wants=syslog.target
After=systemd-modules-load.service

[Service]
Type=forking
ExecStart=/usr/bin/nvidia-persistenced ` + args + ` --verbose
ExecStopPost=/bin/rm -rf /run/nvidia-persistenced

[Install]
WantedBy=multi-user.target
`
}

// uvmPersistenceBranch is the first driver branch whose
// nvidia-persistenced knows --uvm-persistence-mode (550.40.07). An older
// one takes an unknown option as a bad command line and exits 0 before it
// forks, so its unit would end with no daemon and no failure.
const uvmPersistenceBranch = 550

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

//go:embed scripts/gpu-gate.sh
var gateScriptText string

// moduleLoadText replaces the driver's modules-load.d list.
const moduleLoadText = `# Emptied by podvm-gpu. Listing the NVIDIA driver here made
# systemd-modules-load.service fail on every VM without a GPU. Where an
# NVIDIA GPU is present, udev loads the driver by its PCI alias, and the
# GPU units load what they need themselves.
`

// nouveauHookText is an initramfs-tools hook: hooks run after the
// initramfs's modules are collected, so removing nouveau here keeps it out
// of early boot even where the blacklist would not be read in time.
//
//go:embed scripts/initramfs-no-nouveau.sh
var nouveauHookText string

// dkmsNoAutoinstallText is in the image while the driver installs; DKMS
// reads only that the file exists.
const dkmsNoAutoinstallText = `# Written by podvm-gpu for the length of the image build: the NVIDIA modules
# are built, or restored from the build host's module cache, by podvm-gpu's
# own step, which removes this file.
`

// dkmsConfText keeps DKMS from signing, and so from minting a key pair in
// the image (it does so whenever openssl is present and its key is
// missing), now and on any later rebuild on a node: without a sign-file
// it stops before it looks for a key.
const dkmsConfText = `# Written by podvm-gpu. DKMS signs nothing and never creates a signing key
# in the image: podvm-gpu signs the NVIDIA modules at build time with a key
# that lives only in memory (see nvidia_module_signing). Modules rebuilt on a
# node by DKMS are unsigned.
sign_file="/usr/lib/podvm-gpu/dkms-signing-disabled"
`

// signModulesScript signs, or verifies the signatures of, every NVIDIA
// module of the kernels given as arguments. Arguments: mode (sign,
// sign-key or verify), the certificate subject ("" for the certificate's
// issuer), the DER and PEM certificate paths, then the kernels. sign makes
// the key in /run, which must be a tmpfs; sign-key reads a header with the
// input's length, a passphrase line and then the key and certificate (PEM)
// from its input into the same place. Either is removed on exit, whatever happens.
//
//go:embed scripts/sign-modules.sh
var signModulesScript string

// ExposeUnit binds the repository read-only where the GPU Operator's
// driver container sees it.
const ExposeUnit = "podvm-local-packages.service"

// exposeService binds the repository read-only at where. The driver
// DaemonSet of the GPU Operator mounts the host's /run/nvidia into its
// containers (Bidirectional propagation), so a bind made below it before
// kubelet starts is what the driver container sees, with no operator patch.
//
// A service, not a mount unit: systemd makes a mount unit of a fragment
// stop with the device that /proc/self/mountinfo names as its source, which
// for a bind is the root's. On a dm-verity root that the image's udev does
// not name (/dev/mapper/root without device-mapper's rules) that device is
// never plugged, and systemd unmounts the bind seconds after boot. The
// mount this service makes is one systemd finds, not one it owns.
func exposeService(repo, where string) string {
	return `[Unit]
Description=Node-local package repository, read-only, for the GPU Operator driver container
Documentation=https://github.com/podvm-gpu/packer-plugin-podvm/blob/main/docs/gpu-operator.md
# Harmless without the GPU Operator: a read-only view of ` + repo + `.
RequiresMountsFor=` + repo + `
ConditionPathIsDirectory=` + repo + `
DefaultDependencies=no
After=local-fs.target
Before=kubelet.service containerd.service multi-user.target umount.target
Conflicts=umount.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=mkdir -p ` + where + `
ExecStart=mount --bind -o ro ` + repo + ` ` + where + `
# systemd's own unit for the mount may unmount it first at shutdown.
ExecStop=-umount ` + where + `

[Install]
WantedBy=multi-user.target
`
}

// holdScript holds the installed packages that its arguments match:
// patterns (dpkg globs, {kernel} for each kernel), "--", then the kernels.
// Patterns that match nothing installed are skipped; with none at all (a
// kernel that dpkg does not know) it says so and holds nothing, and the
// manifest's empty held list shows it.
//
//go:embed scripts/hold.sh
var holdScript string

// driverVersionScript compares the version of the NVIDIA user-space
// libraries (the file that libnvidia-ml.so.1 and libcuda.so.1 resolve to
// is named for it) with the module's, per kernel. Arguments: the module,
// then the kernels.
//
//go:embed scripts/driver-version.sh
var driverVersionScript string
