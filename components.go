package main

import (
	"github.com/hashicorp/packer-plugin-sdk/plugin"

	"github.com/podvm-gpu/packer-plugin-podvm/builder/rootfs"
	"github.com/podvm-gpu/packer-plugin-podvm/provisioner/gpu"
)

// registerComponents adds every Packer component the plugin ships.
func registerComponents(pps *plugin.Set) {
	pps.RegisterBuilder("rootfs", new(rootfs.Builder))
	pps.RegisterProvisioner("gpu", new(gpu.Provisioner))
}
