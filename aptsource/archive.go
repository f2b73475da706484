package aptsource

import (
	"slices"
	"strings"
)

// ArchiveOf picks the image's own distro archive from its sources: enabled
// deb entries signed by the archive keyring (cloud images and Ubuntu write
// Signed-By). Only when there are none, unsigned entries (trusted through
// trusted.gpg.d, as debootstrap writes them) count if every suite is the
// image's codename or codename-something and they carry "main", which the
// distro archives always do and e.g. Docker's "stable" repository does not.
// Files podvm wrote are skipped, so a rerun computes the same result.
func ArchiveOf(sources []Source, keyring, codename string) []Source {
	var signed, unsigned []Source
	for _, s := range sources {
		if OwnFile(s.Origin) || s.Disabled || !slices.Contains(s.Types, "deb") {
			continue
		}
		switch {
		case s.SignedBy == keyring:
			signed = append(signed, s)
		case s.SignedBy == "" && codename != "" && allSuitesOf(s.Suites, codename) && slices.Contains(s.Components, "main"):
			unsigned = append(unsigned, s)
		}
	}
	if len(signed) > 0 {
		return signed
	}
	return unsigned
}

func allSuitesOf(suites []string, codename string) bool {
	for _, s := range suites {
		if s != codename && !strings.HasPrefix(s, codename+"-") && !strings.HasPrefix(s, codename+"/") {
			return false
		}
	}
	return len(suites) > 0
}

// MissingComponents are the sources that add the wanted components an
// archive's entries lack: for each URI, the same suites and the same
// Signed-By as the entry (apt refuses one URI and suite with two different
// Signed-By values). None when nothing is missing.
func MissingComponents(archive []Source, want []string) []Source {
	var out []Source
	for _, e := range archive {
		var missing []string
		for _, c := range want {
			if !slices.Contains(e.Components, c) {
				missing = append(missing, c)
			}
		}
		if len(missing) == 0 {
			continue
		}
		for _, uri := range e.URIs {
			i := slices.IndexFunc(out, func(s Source) bool {
				return s.URIs[0] == uri && s.SignedBy == e.SignedBy && slices.Equal(s.Components, missing)
			})
			if i < 0 {
				out = append(out, Source{Types: []string{"deb"}, URIs: []string{uri}, Components: missing, SignedBy: e.SignedBy})
				i = len(out) - 1
			}
			for _, su := range e.Suites {
				if !slices.Contains(out[i].Suites, su) {
					out[i].Suites = append(out[i].Suites, su)
				}
			}
		}
	}
	return out
}
