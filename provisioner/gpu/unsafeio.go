package gpu

// generatedChroot is the variable the podvm-rootfs builder generates
// (rootfs.GeneratedChroot; the provisioner does not import the builder):
// "true" when the target is that builder's chroot.
const generatedChroot = "PodvmChroot"

// unsafeDpkg decides, by dpkg_unsafe_io, whether dpkg skips fsync in this
// build. In the podvm-rootfs chroot the files a crash could lose are the
// build's own, which it would start over anyway; anywhere else (another
// builder, a live cloud VM) only when asked. Whether a command runs in a
// chroot cannot be told from inside without reading PID 1's root, which
// sandboxes deny, so the builder says it.
func (e *executor) unsafeDpkg() bool {
	switch e.unsafeIO {
	case "yes":
		e.ui.Say("podvm-gpu: dpkg without fsync (dpkg_unsafe_io=yes)")
		return true
	case "auto":
		if e.generated[generatedChroot] == "true" {
			e.ui.Say("podvm-gpu: the target is the podvm-rootfs chroot: dpkg runs without fsync (dpkg_unsafe_io=auto)")
			return true
		}
	}
	return false
}
