package gpustack

import (
	"fmt"

	"github.com/podvm-gpu/packer-plugin-podvm/distro"
	"github.com/podvm-gpu/packer-plugin-podvm/imagekernel"
)

// Target is what the plan needs to know about the image, read from the image
// itself: never from the build host (in a chroot or mkosi, uname -r is the
// host's kernel).
type Target struct {
	Distro   string   // os-release ID: debian, ubuntu
	Version  string   // os-release VERSION_ID: 13, 24.04
	Codename string   // VERSION_CODENAME: trixie, noble
	Arch     string   // dpkg architecture: amd64, arm64
	Kernels  []string // kernel versions installed in the image
	// KernelsAtBuildTime says the kernels are not known yet (the mkosi
	// generator renders before the image exists). The plan then targets the
	// single symbolic kernel KernelPlaceholder, which the back end expands
	// at build time from the image's /usr/lib/modules.
	KernelsAtBuildTime bool
	// Mirror and SecurityMirror are the archives a generator installs the
	// image from (the mirror policy, aptsource.Pick, settles them); the
	// plan turns them into its Archive. An image that exists already has
	// its own sources and leaves them empty.
	Mirror, SecurityMirror string
}

// KernelPlaceholder stands for each targeted kernel when KernelsAtBuildTime.
const KernelPlaceholder = "{kernel}"

func (t Target) String() string {
	return fmt.Sprintf("%s %s (%s, %s)", t.Distro, t.Version, t.Codename, t.Arch)
}

// ParseOSRelease reads the fields of an os-release file into t.
func ParseOSRelease(text string) (Target, error) {
	o := distro.ParseOSRelease(text)
	t := Target{Distro: o.ID, Version: o.VersionID, Codename: o.Codename}
	if t.Distro == "" {
		return t, fmt.Errorf("os-release: no ID field")
	}
	// Debian testing/sid have no VERSION_ID; the codename still identifies it.
	if t.Version == "" && t.Codename != "" {
		if r, ok := distro.Lookup(t.Distro, t.Codename); ok {
			t.Version = r.Version
		}
	}
	return t, nil
}

// SortKernels orders kernel versions oldest first, the way dpkg compares
// versions, so "newest" is the last one; see imagekernel.Sort.
func SortKernels(ks []string) { imagekernel.Sort(ks) }
