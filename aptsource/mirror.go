package aptsource

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// Dir is where apt keeps its configuration on the build host.
const Dir = "/etc/apt"

// distroSuites are the names each distro's archive serves releases under.
// They tell a distro's archive apart from other apt sources on the host
// (vendor repositories, another distro's archive), whose dists cannot
// install the distro.
var distroSuites = map[string][]string{
	"debian": {
		"buzz", "rex", "bo", "hamm", "slink", "potato", "woody", "sarge", "etch",
		"lenny", "squeeze", "wheezy", "jessie", "stretch", "buster", "bullseye",
		"bookworm", "trixie", "forky", "duke", "sid",
		"oldoldstable", "oldstable", "stable", "testing", "unstable", "experimental",
	},
	"ubuntu": {
		"warty", "hoary", "breezy", "dapper", "edgy", "feisty", "gutsy", "hardy",
		"intrepid", "jaunty", "karmic", "lucid", "maverick", "natty", "oneiric",
		"precise", "quantal", "raring", "saucy", "trusty", "utopic", "vivid",
		"wily", "xenial", "yakkety", "zesty", "artful", "bionic", "cosmic",
		"disco", "eoan", "focal", "groovy", "hirsute", "impish", "jammy",
		"kinetic", "lunar", "mantic", "noble", "oracular", "plucky", "questing",
		"devel",
	},
}

// rollingSuites name releases that move continually; they take no
// -updates or -security suite alongside.
var rollingSuites = []string{"sid", "unstable", "testing", "experimental", "rc-buggy"}

// legacySecurity are the Debian releases before bullseye, which published
// security updates as <release>/updates.
var legacySecurity = []string{"squeeze", "wheezy", "jessie", "stretch", "buster"}

// UpdatesSuites are the archive suites a release's apt sources list: the
// release and, unless it is rolling, its point updates.
func UpdatesSuites(release string) []string {
	if slices.Contains(rollingSuites, release) {
		return []string{release}
	}
	return []string{release, release + "-updates"}
}

// SecuritySuite is the suite release's security updates are published
// under ("trixie-security", "buster/updates", "noble-security"), or ""
// when it has none.
func SecuritySuite(release string) string {
	switch {
	case release == "" || slices.Contains(rollingSuites, release):
		return ""
	case slices.Contains(legacySecurity, release):
		return release + "/updates"
	}
	return release + "-security"
}

// securityRelease returns the release a security suite serves, in either
// form SecuritySuite writes.
func securityRelease(suite string) (string, bool) {
	if rel, ok := strings.CutSuffix(suite, "-security"); ok {
		return rel, true
	}
	return strings.CutSuffix(suite, "/updates")
}

// Read returns the apt sources configured under aptDir (normally Dir):
// sources.list, then sources.list.d in name order, as apt reads them. A
// missing or unreadable file is skipped.
func Read(aptDir string) []Source {
	var sources []Source
	if data, err := os.ReadFile(filepath.Join(aptDir, "sources.list")); err == nil {
		sources = append(sources, ParseOneLine(filepath.Join(aptDir, "sources.list"), string(data))...)
	}
	// apt reads sources.list.d in name order; ignored names (.disabled,
	// .save, editor backups) are skipped, as apt does.
	entries, _ := os.ReadDir(filepath.Join(aptDir, "sources.list.d"))
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	for _, name := range names {
		p := filepath.Join(aptDir, "sources.list.d", name)
		if !strings.HasSuffix(name, ".list") && !strings.HasSuffix(name, ".sources") {
			continue
		}
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// What parses is used; a broken stanza is apt's to report.
		srcs, _ := ParseFile(p, string(data))
		sources = append(sources, srcs...)
	}
	return sources
}

// ArchiveMirror picks distro's archive ("debian", "ubuntu") from sources:
// an enabled deb source with an http, https or file URI, one of the
// distro's release suites and the main component. A source listing suite
// itself wins over the first one found. It returns the URI without a
// trailing slash and where it was found, or "" and "" when there is none.
func ArchiveMirror(sources []Source, distro, suite string) (uri, origin string) {
	known := distroSuites[distro]
	return pick(sources, suite, func(s string) bool { return slices.Contains(known, s) })
}

// SecurityMirror picks distro's security archive from sources as
// ArchiveMirror picks the archive, except that the source must list a
// security suite of one of the distro's releases ("<release>-security",
// or "<release>/updates" before bullseye); one listing SecuritySuite(suite)
// wins. suite is the release suite ("trixie"), not the security suite.
func SecurityMirror(sources []Source, distro, suite string) (uri, origin string) {
	known := distroSuites[distro]
	return pick(sources, SecuritySuite(suite), func(s string) bool {
		rel, ok := securityRelease(s)
		return ok && slices.Contains(known, rel)
	})
}

// pick returns the first usable URI of an enabled deb source with the
// main component and a suite that isDistro accepts, preferring a source
// that lists want.
func pick(sources []Source, want string, isDistro func(string) bool) (uri, origin string) {
	for _, wantSuite := range []bool{true, false} {
		for _, s := range sources {
			if s.Disabled || !slices.Contains(s.Types, "deb") || !slices.Contains(s.Components, "main") {
				continue
			}
			if !slices.ContainsFunc(s.Suites, isDistro) || (wantSuite && !slices.Contains(s.Suites, want)) {
				continue
			}
			for _, u := range s.URIs {
				if UsableURI(u) {
					return strings.TrimSuffix(u, "/"), "the host's apt sources, " + s.Origin
				}
			}
		}
	}
	return "", ""
}

// UsableURI reports whether u is a mirror URI that debootstrap and a
// plain apt can fetch from: http or https with a host, or file with a path.
func UsableURI(u string) bool {
	p, err := url.Parse(u)
	if err != nil {
		return false
	}
	switch p.Scheme {
	case "http", "https":
		return p.Host != ""
	case "file":
		return p.Path != ""
	}
	// cdrom:, mirror+file:, tor+http: and the like are apt transports
	// debootstrap does not speak.
	return false
}

// DistroMirror is distro's archive among sources as ArchiveMirror finds
// it, else the first usable URI of an enabled deb source: what debootstrap
// wrote into a tree's sources.list when it was given no mirror.
func DistroMirror(sources []Source, distro, suite string) string {
	if m, _ := ArchiveMirror(sources, distro, suite); m != "" {
		return m
	}
	for _, s := range sources {
		if s.Disabled || !slices.Contains(s.Types, "deb") {
			continue
		}
		for _, u := range s.URIs {
			if UsableURI(u) {
				return strings.TrimSuffix(u, "/")
			}
		}
	}
	return ""
}

// CheckMirror says why m is not a mirror URL that debootstrap and a plain
// apt fetch from (http or https with a host, file with a path, no white
// space), or nil.
func CheckMirror(m string) error {
	u, err := url.Parse(m)
	if err != nil {
		return fmt.Errorf("is not a URL: %v", errors.Unwrap(err))
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "file":
		return errors.New(`is not a URL debootstrap can fetch from; use a URL with scheme "http", "https" or "file"`)
	case u.Scheme != "file" && u.Host == "":
		return errors.New("has no host; use a URL such as http://HOST/debian")
	case u.Scheme == "file" && u.Path == "":
		return errors.New("has no path; use a URL such as file:///srv/mirror/debian")
	case strings.ContainsAny(m, " \t\n"):
		return errors.New("contains white space")
	}
	return nil
}

// Setting is a mirror setting as a user gave it (or not), named as the
// user knows it ("mirror", "--security-mirror").
type Setting struct {
	Name, Value string
	Set         bool
}

// Mirror is the mirror a build takes and where it came from; URL is ""
// when there is none.
type Mirror struct{ URL, Origin string }

// Pick is the mirror policy of every build: a setting the user gave wins,
// checked, without a trailing slash; else the build host's apt sources
// under aptDir name it: distro's archive for suite or, with security, its
// security archive. Where neither has one, the caller decides what that
// means (debootstrap's default, an error, no security suite).
func Pick(aptDir, distro, suite string, s Setting, security bool, host func() []Source) (Mirror, error) {
	if s.Set {
		if s.Value == "" {
			return Mirror{Origin: s.Name + " (empty)"}, nil
		}
		if err := CheckMirror(s.Value); err != nil {
			return Mirror{}, fmt.Errorf("%s: %q %w", s.Name, s.Value, err)
		}
		return Mirror{URL: strings.TrimSuffix(s.Value, "/"), Origin: "the " + s.Name + " setting"}, nil
	}
	if host == nil {
		host = func() []Source { return Read(aptDir) }
	}
	var m Mirror
	if security {
		m.URL, m.Origin = SecurityMirror(host(), distro, suite)
	} else {
		m.URL, m.Origin = ArchiveMirror(host(), distro, suite)
	}
	return m, nil
}
