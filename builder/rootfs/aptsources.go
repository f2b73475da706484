package rootfs

import "github.com/podvm-gpu/packer-plugin-podvm/hostapt"

// hostMirror returns the first Debian archive URI in the apt configuration
// under aptDir (normally /etc/apt), preferring one that lists suite, and a
// description of where it was found. With none found it returns "" and
// says that debootstrap's default applies.
func hostMirror(aptDir, suite string) (mirror, origin string) {
	if m, o := hostapt.ArchiveMirror(hostapt.Read(aptDir), "debian", suite); m != "" {
		return m, o
	}
	return "", "debootstrap's default (no Debian archive found in " + aptDir + ")"
}
