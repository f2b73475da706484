// Package distro holds facts about the distributions the images are built
// from that hold no GPU option: what the option model's planner, the mkosi
// generator and the podvm-rootfs builder would otherwise each write down.
package distro

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
