package main

import "github.com/hashicorp/packer-plugin-sdk/plugin"

// registerComponents adds every Packer component the plugin ships.
func registerComponents(pps *plugin.Set) {
}
