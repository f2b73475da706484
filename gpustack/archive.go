package gpustack

import (
	"fmt"
	"strings"
)

// LookupRelease returns the target facts of a supported release named by
// its version ("13", "24.04") or codename ("trixie", "noble"), for back
// ends that render before any image exists (the mkosi generator).
func LookupRelease(distro, rel, arch string) (Target, error) {
	for _, r := range releases {
		if r.distro == distro && (r.version == rel || r.codename == rel) {
			return Target{Distro: r.distro, Version: r.version, Codename: r.codename, Arch: arch}, nil
		}
	}
	return Target{}, fmt.Errorf("unsupported release %s %s; supported: %s", distro, rel, supported())
}

// ArchiveSources lists the distro's own archive for the target: the main
// component of the release, its updates and its security suite, signed by
// the distro's archive keyring. Back ends that must spell the archive out
// use it (mkosi: a sandbox sources file replaces mkosi's built-in list).
// A non-empty mirror replaces the default archive URL; the security suite
// keeps its own URL unless securityMirror is set, as the distros publish it
// separately.
func ArchiveSources(t Target, mirror, securityMirror string) ([]AptSource, error) {
	r, ok := releases[t.Distro+"-"+t.Version]
	if !ok {
		return nil, fmt.Errorf("unsupported target %s %s; supported: %s", t.Distro, t.Version, supported())
	}
	main, security := r.family.archiveURLs(t.Arch)
	if mirror != "" {
		main = strings.TrimSuffix(mirror, "/")
	}
	if securityMirror != "" {
		security = strings.TrimSuffix(securityMirror, "/")
	}
	kr := r.family.archiveKeyring()
	return []AptSource{
		{Name: r.distro, URI: main, Suites: []string{r.codename, r.codename + "-updates"}, Components: []string{"main"}, Keyring: kr, Key: Key{InImage: true}},
		{Name: r.distro + "-security", URI: security, Suites: []string{r.codename + "-security"}, Components: []string{"main"}, Keyring: kr, Key: Key{InImage: true}},
	}, nil
}
