package gpustack

import (
	"errors"
	"fmt"

	"github.com/podvm-gpu/packer-plugin-podvm/settings"
)

// Debian: the driver comes from non-free (DKMS; open modules from contrib)
// or NVIDIA's CUDA repository. Debian's packaging renames the module
// nvidia-current so several branches can coexist.
type debian struct{}

func init() {
	releases["debian-12"] = release{Release: known("debian", "12"), family: debian{},
		defaultBranch: "535", cudaDir: "debian12", cudaKey: "3bf863cc.pub", cudaFingerprint: "EB693B3035CD5710E231E123A4B469963BF863CC"}
	releases["debian-13"] = release{Release: known("debian", "13"), family: debian{},
		defaultBranch: "550", cudaDir: "debian13", cudaKey: "8793F200.pub", cudaFingerprint: "02182E60104FCDC26EAE1B8597A5D4CB8793F200",
		autoProprietary: "nvidia-open-kernel-dkms 550.163.01 fails to build against 6.12.117 and later (pci_resize_resource changed)"}
}

func (debian) archiveComponents() []string {
	return []string{"contrib", "non-free", "non-free-firmware"}
}

func (debian) headers(k string) string { return "linux-headers-" + k }

func (debian) kernelMeta(arch string) (string, string) {
	return "linux-image-" + arch, "linux-headers-" + arch
}

// Debian has no linux-modules package: the modules ship in linux-image.
func (debian) repoTemplates() []string {
	return []string{"linux-headers-{kernel}", "linux-image-{kernel}"}
}

func (debian) hasOpen(r release, branch string) bool { return branchAtLeast(branch, 515) }

func (debian) driver(r release, d Driver, kernels []string) ([]string, bool, error) {
	switch d.Source {
	case settings.SourcePrecompiled:
		return nil, false, errors.New("nvidia_driver_source=precompiled: Debian has no precompiled NVIDIA modules; allowed: distro|cuda-repo")
	case settings.SourceCUDARepo:
		if d.Flavour == settings.ModulesOpen {
			return []string{"nvidia-open"}, true, nil
		}
		return []string{"cuda-drivers"}, true, nil
	}
	if d.Branch != r.defaultBranch {
		return nil, false, fmt.Errorf("nvidia_driver_version=%s: %s's archive ships driver branch %s only; allowed: %s or an exact %s.x version, or nvidia_driver_source=cuda-repo for other branches",
			orBranch(d), r.Name(), r.defaultBranch, r.defaultBranch, r.defaultBranch)
	}
	// Headless compute stack: no X driver, which nvidia-driver would pull.
	dkms := "nvidia-kernel-dkms"
	if d.Flavour == settings.ModulesOpen {
		dkms = "nvidia-open-kernel-dkms"
	}
	return []string{dkms, "nvidia-smi", "libcuda1", "libnvidia-ml1"}, true, nil
}

// Debian ships no precompiled NVIDIA modules.
func (debian) precompiled(d Driver) (string, []string, bool) { return "", nil, false }

// Every flavour builds UVM and modeset beside the core module; the archive's
// packaging renames all three.
func (debian) modules(d Driver) []string {
	if d.Source == settings.SourceCUDARepo {
		return []string{"nvidia", "nvidia-uvm", "nvidia-modeset"}
	}
	return []string{"nvidia-current", "nvidia-current-uvm", "nvidia-current-modeset"}
}

func (debian) pinPackages(d Driver) []string {
	if d.Source == settings.SourceCUDARepo {
		return []string{"*nvidia*", "cuda-drivers*", "libcuda*", "libxnvctrl*"}
	}
	return []string{"*nvidia*", "libcuda*", "firmware-nvidia-gsp"}
}

func (debian) persistenced(d Driver) []string { return []string{"nvidia-persistenced"} }

// Debian's package creates nvpd (its postinst, 550.163.01-1); NVIDIA's
// CUDA repository packages it as Ubuntu's are, with nvidia-persistenced.
func (debian) persistencedUser(d Driver) string {
	if d.Source == settings.SourceCUDARepo {
		return "nvidia-persistenced"
	}
	return "nvpd"
}

func (debian) fabricManager(d Driver) ([]string, error) {
	if d.Source != settings.SourceCUDARepo {
		return nil, errors.New("nvidia_fabric_manager=yes: Debian's archive has no fabric manager; set nvidia_driver_source=cuda-repo")
	}
	return []string{"nvidia-fabricmanager-" + d.Branch}, nil
}

// Debian's glx-alternative-nvidia links /etc/modules-load.d/nvidia.conf,
// through the alternatives system, to this conffile of
// nvidia-kernel-support; replacing its content keeps the links intact.
func (debian) moduleLoadConf(d Driver) string {
	if d.Source == settings.SourceDistro {
		return "/etc/nvidia/current/nvidia-load.conf"
	}
	return ""
}

// systemd-boot-efi holds the boot loader a disk builder puts on the ESP.
func (debian) bootPackages() []string {
	// apt, for the node's own use of the local repository and its checks.
	return []string{"systemd-sysv", "udev", "systemd-boot-efi", "apt"}
}
