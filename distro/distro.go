// Package distro holds facts about the distributions the images are built
// from that hold no GPU option: what the option model's planner, the mkosi
// generator and the podvm-rootfs builder would otherwise each write down.
package distro

import (
	"strconv"
	"strings"
)

// KernelCmdline is the command line of every bootable disk, whichever back
// end builds it: the console on the screen and on the first serial port,
// which QEMU's -serial, libvirt and the clouds' serial consoles show.
const KernelCmdline = "console=tty0 console=ttyS0,115200n8"

// The archive keyrings that apt in every Debian and Ubuntu tree has
// (debian-archive-keyring, ubuntu-keyring).
const (
	DebianArchiveKeyring = "/usr/share/keyrings/debian-archive-keyring.gpg"
	UbuntuArchiveKeyring = "/usr/share/keyrings/ubuntu-archive-keyring.gpg"
)

// Release is a release of a distribution the images are built from, as
// its os-release names it.
type Release struct {
	ID       string // ID: debian, ubuntu
	Version  string // VERSION_ID: 13, 24.04
	Codename string // VERSION_CODENAME: trixie, noble
}

// Releases are the releases the images are built from.
var Releases = []Release{
	{ID: "debian", Version: "12", Codename: "bookworm"},
	{ID: "debian", Version: "13", Codename: "trixie"},
	{ID: "ubuntu", Version: "22.04", Codename: "jammy"},
	{ID: "ubuntu", Version: "24.04", Codename: "noble"},
	{ID: "ubuntu", Version: "26.04", Codename: "resolute"},
}

// Lookup finds the release of distribution id by its version or codename.
func Lookup(id, versionOrCodename string) (Release, bool) {
	for _, r := range Releases {
		if r.ID == id && (r.Version == versionOrCodename || r.Codename == versionOrCodename) {
			return r, true
		}
	}
	return Release{}, false
}

// Name is the release as messages name it: "debian 13".
func (r Release) Name() string { return r.ID + " " + r.Version }

// Suites are the archive suites of the release's packages and their
// updates, from the distribution's mirror.
func (r Release) Suites() []string { return []string{r.Codename, r.Codename + "-updates"} }

// SecuritySuite is the suite of the release's security updates, from the
// security mirror.
func (r Release) SecuritySuite() string { return r.Codename + "-security" }

// ArchiveKeyring is the keyring that signs the release's archive.
func (r Release) ArchiveKeyring() string {
	if r.ID == "ubuntu" {
		return UbuntuArchiveKeyring
	}
	return DebianArchiveKeyring
}

// OSRelease holds the fields of an os-release file (os-release(5)) that
// the builds read.
type OSRelease struct {
	ID, VersionID, Codename, PrettyName string
}

// ParseOSRelease reads an os-release file's text. Values may be quoted
// in shell style; comments and other fields are skipped.
func ParseOSRelease(text string) OSRelease {
	var o OSRelease
	for _, line := range strings.Split(text, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok || strings.HasPrefix(k, "#") {
			continue
		}
		if s, err := strconv.Unquote(v); err == nil {
			v = s
		} else {
			v = strings.Trim(v, `"'`)
		}
		switch k {
		case "ID":
			o.ID = v
		case "VERSION_ID":
			o.VersionID = v
		case "VERSION_CODENAME":
			o.Codename = v
		case "PRETTY_NAME":
			o.PrettyName = v
		}
	}
	return o
}
