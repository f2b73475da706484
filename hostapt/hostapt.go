// Package hostapt reads the build host's apt configuration (normally
// /etc/apt) and finds the distro archives in it, so that tools which need
// a mirror take the one the host already uses instead of naming one.
package hostapt

import (
	"bufio"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// Dir is where apt keeps its configuration on the build host.
const Dir = "/etc/apt"

// Source is one apt source: a deb822 stanza, or one line of a .list file.
type Source struct {
	Types      []string
	URIs       []string
	Suites     []string
	Components []string
	Enabled    bool
	Origin     string // file it came from
}

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
	if f, err := os.Open(filepath.Join(aptDir, "sources.list")); err == nil {
		sources = append(sources, parseOneLine(f, f.Name())...)
		f.Close()
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
		var parse func(io.Reader, string) []Source
		switch {
		case strings.HasSuffix(name, ".list"):
			parse = parseOneLine
		case strings.HasSuffix(name, ".sources"):
			parse = parseDeb822
		default:
			continue
		}
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		sources = append(sources, parse(f, p)...)
		f.Close()
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
			if !s.Enabled || !slices.Contains(s.Types, "deb") || !slices.Contains(s.Components, "main") {
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

// parseOneLine reads the one-line format of sources.list(5):
//
//	deb [ option=value ... ] uri suite [component ...]
func parseOneLine(r io.Reader, origin string) []Source {
	var out []Source
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		fields := strings.Fields(line)
		if len(fields) < 3 {
			continue
		}
		typ, rest := fields[0], fields[1:]
		if strings.HasPrefix(rest[0], "[") {
			// Options run to the field that closes the bracket; "[arch=amd64]"
			// and "[ arch=amd64 ]" are both written.
			for len(rest) > 0 {
				f := rest[0]
				rest = rest[1:]
				if strings.HasSuffix(f, "]") {
					break
				}
			}
		}
		if len(rest) < 2 {
			continue
		}
		out = append(out, Source{
			Types:      []string{typ},
			URIs:       []string{rest[0]},
			Suites:     []string{rest[1]},
			Components: rest[2:],
			Enabled:    true,
			Origin:     origin,
		})
	}
	return out
}

// parseDeb822 reads the deb822 format of sources.list(5): stanzas of
// "Field: value" lines separated by blank lines, "#" comment lines, and
// continuation lines (an inline Signed-By key) that start with white space.
func parseDeb822(r io.Reader, origin string) []Source {
	var out []Source
	fields := map[string]string{}
	var last string
	flush := func() {
		if len(fields) == 0 {
			return
		}
		s := Source{
			Types:      strings.Fields(fields["types"]),
			URIs:       strings.Fields(fields["uris"]),
			Suites:     strings.Fields(fields["suites"]),
			Components: strings.Fields(fields["components"]),
			Enabled:    !strings.EqualFold(strings.TrimSpace(fields["enabled"]), "no"),
			Origin:     origin,
		}
		out = append(out, s)
		fields = map[string]string{}
		last = ""
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "#"):
			continue
		case strings.TrimSpace(line) == "":
			flush()
		case line[0] == ' ' || line[0] == '\t':
			if last != "" {
				fields[last] += " " + strings.TrimSpace(line)
			}
		default:
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			last = strings.ToLower(strings.TrimSpace(k))
			fields[last] = strings.TrimSpace(v)
		}
	}
	flush()
	return out
}
