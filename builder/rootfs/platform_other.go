//go:build !linux || podvm_nonlinux

package rootfs

import (
	"fmt"
	"runtime"
	"syscall"
)

// checkPlatform refuses the builder in a non-Linux build at Prepare, so
// `packer validate` says so before anything runs. The plugin still ships
// for macOS because the podvm-gpu provisioner works from there through
// SSH (amazon-ebs, azure-arm); only this builder needs Linux.
func checkPlatform() error {
	return fmt.Errorf("the podvm-rootfs builder runs only on a Linux host: it builds the image in a chroot "+
		"with Linux mounts (proc, sysfs, a bind of /dev) and debootstrap, and this plugin is the %s build; "+
		"run this template on Linux, or use the podvm-gpu provisioner with a cloud builder (amazon-ebs, azure-arm) "+
		"from this machine", buildName())
}

// buildName names this build in the refusal. The podvm_nonlinux tag gives
// a Linux binary this file so tests can run it on the CI host.
func buildName() string {
	if runtime.GOOS == "linux" {
		return runtime.GOOS + "/" + runtime.GOARCH + " (podvm_nonlinux tag)"
	}
	return runtime.GOOS + "/" + runtime.GOARCH
}

// hostProcAttr puts a host command in a process group of its own. Only
// Linux has a parent-death signal.
func hostProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
