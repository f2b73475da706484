package imagestep

import (
	"testing"

	"github.com/podvm-gpu/packer-plugin-podvm/gpustack"
	"github.com/podvm-gpu/packer-plugin-podvm/internal/shellcheck"
)

// TestCommandsShellcheck holds the commands this package composes, its
// embedded script included, to sh -n and shellcheck.
func TestCommandsShellcheck(t *testing.T) {
	shellcheck.Require(t)
	for name, cmd := range map[string]string{
		"verify repo, full closure": VerifyRepoCommand(gpustack.VerifyRepo{Dir: "/opt/r", Keyring: "/k.gpg", Packages: []string{"linux-headers-6.1.0-1-amd64"}, Closure: true}, "/var/lib/dpkg/status"),
		"verify repo, image status": VerifyRepoCommand(gpustack.VerifyRepo{Dir: "/opt/r", Keyring: "/k.gpg", Packages: []string{"linux-headers-6.1.0-1-amd64"}}, "/var/lib/dpkg/status"),
		"list sources":              ListSourcesCommand,
		"installed":                 InstalledCommand([]string{"dpkg", "apt"}),
		"exists":                    ExistsCommand("/etc/it's here"),
		"download, full closure":    DownloadCommands(gpustack.BakeRepo{Packages: []string{"linux-headers-6.1.0-1-amd64"}, Closure: true}, "/opt/r.podvm-new", "apt-get -q").Script(),
		"download, named only":      DownloadCommands(gpustack.BakeRepo{Packages: []string{"linux-headers-6.1.0-1-amd64"}}, "/opt/r.podvm-new", "apt-get -q").Script(),
	} {
		shellcheck.Check(t, name, "#!/bin/sh\n"+cmd+"\n")
	}
}
