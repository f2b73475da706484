package gpustack

import (
	"bufio"
	"fmt"
	"sort"
	"strings"
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
// versions, so "newest" is the last one.
func SortKernels(ks []string) {
	sort.SliceStable(ks, func(i, j int) bool { return CompareVersions(ks[i], ks[j]) < 0 })
}

// CompareVersions compares two Debian version strings the way dpkg does
// (epoch, then upstream and revision with ~ sorting before everything).
func CompareVersions(a, b string) int {
	ea, ra := splitEpoch(a)
	eb, rb := splitEpoch(b)
	if c := compareNum(ea, eb); c != 0 {
		return c
	}
	ua, va := splitRevision(ra)
	ub, vb := splitRevision(rb)
	if c := compareFragment(ua, ub); c != 0 {
		return c
	}
	return compareFragment(va, vb)
}

func splitEpoch(v string) (string, string) {
	if e, rest, ok := strings.Cut(v, ":"); ok && isDigits(e) {
		return e, rest
	}
	return "0", v
}

func splitRevision(v string) (string, string) {
	if i := strings.LastIndexByte(v, '-'); i >= 0 {
		return v[:i], v[i+1:]
	}
	return v, ""
}

func isDigits(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return s != ""
}

func compareNum(a, b string) int {
	a, b = strings.TrimLeft(a, "0"), strings.TrimLeft(b, "0")
	if len(a) != len(b) {
		if len(a) < len(b) {
			return -1
		}
		return 1
	}
	return strings.Compare(a, b)
}

// order is dpkg's character weight: ~ first, then end of string, letters,
// then everything else.
func order(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return 0
	case c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z':
		return int(c)
	case c == '~':
		return -1
	}
	return int(c) + 256
}

func compareFragment(a, b string) int {
	for a != "" || b != "" {
		// Non-digit prefix.
		for (a != "" && !isDigit(a[0])) || (b != "" && !isDigit(b[0])) {
			ca, cb := 0, 0
			if a != "" && !isDigit(a[0]) {
				ca = order(a[0])
			}
			if b != "" && !isDigit(b[0]) {
				cb = order(b[0])
			}
			if ca != cb {
				if ca < cb {
					return -1
				}
				return 1
			}
			if a != "" && !isDigit(a[0]) {
				a = a[1:]
			}
			if b != "" && !isDigit(b[0]) {
				b = b[1:]
			}
		}
		// Digit run.
		i, j := 0, 0
		for i < len(a) && isDigit(a[i]) {
			i++
		}
		for j < len(b) && isDigit(b[j]) {
			j++
		}
		if c := compareNum(a[:i], b[:j]); c != 0 {
			return c
		}
		a, b = a[i:], b[j:]
	}
	return 0
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
