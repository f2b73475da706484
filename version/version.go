// Package version holds the plugin's version, reported to Packer by describe.
package version

import "github.com/hashicorp/packer-plugin-sdk/version"

var (
	// Version is the main version number that is being run at the moment.
	Version = "0.1.0"
	// VersionPrerelease marks development builds; Packer loads a "-dev"
	// plugin only from an explicit path.
	VersionPrerelease = "dev"
	// VersionMetadata is optional build metadata.
	VersionMetadata = ""

	// PluginVersion is what describe reports.
	PluginVersion = version.NewPluginVersion(Version, VersionPrerelease, VersionMetadata)
)
