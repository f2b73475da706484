package gpustack

import (
	"fmt"
	"strings"

	"github.com/podvm-gpu/packer-plugin-podvm/settings"
)

// Ubuntu: the "-server" driver packages from restricted (DKMS), Canonical's
// precompiled signed modules (linux-modules-nvidia-*), or NVIDIA's CUDA
// repository.
type ubuntu struct{}

func init() {
	releases["ubuntu-22.04"] = release{Release: known("ubuntu", "22.04"), family: ubuntu{},
		defaultBranch: "535", cudaDir: "ubuntu2204", cudaKey: "3bf863cc.pub", cudaFingerprint: "EB693B3035CD5710E231E123A4B469963BF863CC"}
	releases["ubuntu-24.04"] = release{Release: known("ubuntu", "24.04"), family: ubuntu{},
		defaultBranch: "570", cudaDir: "ubuntu2404", cudaKey: "3bf863cc.pub", cudaFingerprint: "EB693B3035CD5710E231E123A4B469963BF863CC"}
	// 595 is the branch NVIDIA's 26.04 driver containers build by default;
	// the archive carries its -server packages and Canonical's precompiled
	// modules (both flavours). No cudaDir: see noCUDARepo.
	releases["ubuntu-26.04"] = release{Release: known("ubuntu", "26.04"), family: ubuntu{},
		// DKMS compresses the modules it builds with zstd, as the release's
		// kernel modules are, yet does not depend on it.
		dkmsPackages:  []string{"zstd"},
		defaultBranch: "595", noCUDARepo: "NVIDIA's ubuntu2604 repository installs unversioned driver packages held by a nvidia-driver-pinning-<version> package, not the branch-named ones (cuda-drivers-<branch>, nvidia-driver-<branch>-open) the plan pins, and its signing key file has not been checked"}
}

func (ubuntu) archiveComponents() []string { return []string{"restricted"} }

func (ubuntu) headers(k string) string { return "linux-headers-" + k }

func (ubuntu) kernelMeta(arch string) (string, string) {
	return "linux-image-generic", "linux-headers-generic"
}

// The GPU Operator's Ubuntu driver container downloads image and modules
// besides installing headers.
func (ubuntu) repoTemplates() []string {
	return []string{"linux-headers-{kernel}", "linux-image-{kernel}", "linux-modules-{kernel}"}
}

func (ubuntu) hasOpen(r release, branch string) bool { return branchAtLeast(branch, 515) }

func serverSuffix(d Driver) string {
	if d.Flavour == settings.ModulesOpen {
		return "-server-open"
	}
	return "-server"
}

func (u ubuntu) driver(r release, d Driver, kernels []string) ([]string, bool, error) {
	b := d.Branch
	switch d.Source {
	case settings.SourceCUDARepo:
		if r.noCUDARepo != "" {
			return nil, false, fmt.Errorf("nvidia_driver_source=cuda-repo: not supported on %s: %s; allowed there: auto, distro, precompiled", r.Name(), r.noCUDARepo)
		}
		if d.Flavour == settings.ModulesOpen {
			return []string{"nvidia-driver-" + b + "-open"}, true, nil
		}
		return []string{"cuda-drivers-" + b}, true, nil
	case settings.SourcePrecompiled:
		modules, rest, _ := u.precompiled(d)
		var pkgs []string
		for _, k := range kernels {
			if k == KernelPlaceholder {
				k = "generic" // the meta package that follows linux-image-generic
			}
			pkgs = append(pkgs, strings.ReplaceAll(modules, KernelPlaceholder, k))
		}
		return append(pkgs, rest...), false, nil
	}
	return append([]string{"nvidia-headless-" + b + serverSuffix(d), "nvidia-utils-" + b + "-server"}, r.dkmsPackages...), true, nil
}

// Canonical builds and signs the modules of the -server branches for each
// kernel of the archive (linux-restricted-modules).
func (ubuntu) precompiled(d Driver) (string, []string, bool) {
	return fmt.Sprintf("linux-modules-nvidia-%s%s-%s", d.Branch, serverSuffix(d), KernelPlaceholder),
		[]string{"nvidia-headless-no-dkms-" + d.Branch + serverSuffix(d), "nvidia-utils-" + d.Branch + "-server"}, true
}

// The precompiled and DKMS packages alike ship UVM and modeset beside the
// core module, under NVIDIA's names.
func (ubuntu) modules(d Driver) []string { return []string{"nvidia", "nvidia-uvm", "nvidia-modeset"} }

func (ubuntu) pinPackages(d Driver) []string {
	return []string{"*nvidia*", "cuda-drivers*", "libnvidia*", "libxnvctrl*"}
}

// nvidia-persistenced ships in nvidia-compute-utils, which the headless
// packages already depend on.
func (ubuntu) persistenced(d Driver) []string { return nil }

// Ubuntu's unit runs it as nvidia-persistenced (and with
// --no-persistence-mode), as NVIDIA's own packages do.
func (ubuntu) persistencedUser(d Driver) string { return "nvidia-persistenced" }

func (ubuntu) fabricManager(d Driver) ([]string, error) {
	return []string{"nvidia-fabricmanager-" + d.Branch}, nil
}

// Ubuntu's driver packages load nothing at boot by themselves.
func (ubuntu) moduleLoadConf(d Driver) string { return "" }

// systemd-boot-efi holds the boot loader a disk builder puts on the ESP.
func (ubuntu) bootPackages() []string {
	// apt, for the node's own use of the local repository and its checks.
	return []string{"systemd-sysv", "udev", "systemd-boot-efi", "apt"}
}
