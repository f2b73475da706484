package gpustack

import (
	"bufio"
	"fmt"
	"strings"

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
	var t Target
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if !ok || strings.HasPrefix(k, "#") {
			continue
		}
		v = strings.Trim(v, `"'`)
		switch k {
		case "ID":
			t.Distro = v
		case "VERSION_ID":
			t.Version = v
		case "VERSION_CODENAME":
			t.Codename = v
		}
	}
	if t.Distro == "" {
		return t, fmt.Errorf("os-release: no ID field")
	}
	// Debian testing/sid have no VERSION_ID; the codename still identifies it.
	if t.Version == "" {
		for v, r := range releases {
			if r.distro == t.Distro && r.codename == t.Codename {
				t.Version = v[len(t.Distro)+1:]
			}
		}
	}
	return t, nil
}

// SortKernels orders kernel versions oldest first, the way dpkg compares
// versions, so "newest" is the last one; see imagekernel.Sort.
func SortKernels(ks []string) { imagekernel.Sort(ks) }
