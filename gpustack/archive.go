package gpustack

import (
	"fmt"
	"strings"

	"github.com/podvm-gpu/packer-plugin-podvm/distro"
)

// LookupRelease returns the target facts of a supported release named by
// its version ("13", "24.04") or codename ("trixie", "noble"), for back
// ends that render before any image exists (the mkosi generator).
func LookupRelease(id, rel, arch string) (Target, error) {
	if r, ok := distro.Lookup(id, rel); ok {
		if _, ok := releases[r.ID+"-"+r.Version]; ok {
			return Target{Distro: r.ID, Version: r.Version, Codename: r.Codename, Arch: arch}, nil
		}
	}
	return Target{}, fmt.Errorf("unsupported release %s %s; supported: %s", id, rel, supported())
}

// ArchiveSources lists the distro's own archive for the target, signed by
// the distro's archive keyring: the main component of the release and its
// updates from mirror, then the security suite from securityMirror. Back
// ends that must spell the archive out use it (mkosi: a sandbox sources
// file replaces mkosi's built-in list).
//
// The package names no archive host: mirror is required (callers take it
// from their configuration or the build host's apt sources, see package
// aptsource). An empty securityMirror leaves the security suite out, so the
// sources then carry no security updates.
func ArchiveSources(t Target, mirror, securityMirror string) ([]AptSource, error) {
	r, ok := releases[t.Distro+"-"+t.Version]
	if !ok {
		return nil, fmt.Errorf("unsupported target %s %s; supported: %s", t.Distro, t.Version, supported())
	}
	if mirror == "" {
		return nil, fmt.Errorf("mirror: required for %s: give the URL of a %s archive mirror that carries %s (no default archive is built in)", t, r.ID, r.Codename)
	}
	kr := r.ArchiveKeyring()
	srcs := []AptSource{
		{Name: r.ID, URI: strings.TrimSuffix(mirror, "/"), Suites: r.Suites(), Components: []string{"main"}, Keyring: kr, Key: Key{InImage: true}},
	}
	if securityMirror != "" {
		srcs = append(srcs, AptSource{Name: r.ID + "-security", URI: strings.TrimSuffix(securityMirror, "/"), Suites: []string{r.SecuritySuite()}, Components: []string{"main"}, Keyring: kr, Key: Key{InImage: true}})
	}
	return srcs, nil
}
