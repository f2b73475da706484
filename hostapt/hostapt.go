package rootfs

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

// aptSource is one apt source: a deb822 stanza, or one line of a .list
// file.
type aptSource struct {
	types      []string
	uris       []string
	suites     []string
	components []string
	enabled    bool
	origin     string // file it came from
}

// debianSuites are the names the Debian archive serves releases under.
// They tell a Debian archive apart from other apt sources on the host
// (vendor repositories, an Ubuntu archive), whose dists debootstrap
// cannot bootstrap Debian from.
var debianSuites = []string{
	"buzz", "rex", "bo", "hamm", "slink", "potato", "woody", "sarge", "etch",
	"lenny", "squeeze", "wheezy", "jessie", "stretch", "buster", "bullseye",
	"bookworm", "trixie", "forky", "duke", "sid",
	"oldoldstable", "oldstable", "stable", "testing", "unstable", "experimental",
}

// hostMirror returns the first Debian archive URI in the apt configuration
// under aptDir (normally /etc/apt), preferring one that lists suite, and a
// description of where it was found. With none found it returns "" and
// says that debootstrap's default applies.
func hostMirror(aptDir, suite string) (mirror, origin string) {
	var sources []aptSource
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
		var parse func(io.Reader, string) []aptSource
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
	if m, o := debianMirror(sources, suite); m != "" {
		return m, o
	}
	return "", "debootstrap's default (no Debian archive found in " + aptDir + ")"
}

// debianMirror picks a Debian archive from sources: an enabled deb source
// with an http, https or file URI, a Debian suite and the main component.
// A source listing suite itself wins over the first one found.
func debianMirror(sources []aptSource, suite string) (mirror, origin string) {
	for _, wantSuite := range []bool{true, false} {
		for _, s := range sources {
			if !s.enabled || !slices.Contains(s.types, "deb") || !slices.Contains(s.components, "main") {
				continue
			}
			debian := slices.ContainsFunc(s.suites, func(x string) bool { return slices.Contains(debianSuites, x) })
			if !debian || (wantSuite && !slices.Contains(s.suites, suite)) {
				continue
			}
			for _, u := range s.uris {
				if usableMirror(u) {
					return strings.TrimSuffix(u, "/"), "the host's apt sources, " + s.origin
				}
			}
		}
	}
	return "", ""
}

func usableMirror(u string) bool {
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
func parseOneLine(r io.Reader, origin string) []aptSource {
	var out []aptSource
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
		out = append(out, aptSource{
			types:      []string{typ},
			uris:       []string{rest[0]},
			suites:     []string{rest[1]},
			components: rest[2:],
			enabled:    true,
			origin:     origin,
		})
	}
	return out
}

// parseDeb822 reads the deb822 format of sources.list(5): stanzas of
// "Field: value" lines separated by blank lines, "#" comment lines, and
// continuation lines (an inline Signed-By key) that start with white space.
func parseDeb822(r io.Reader, origin string) []aptSource {
	var out []aptSource
	fields := map[string]string{}
	var last string
	flush := func() {
		if len(fields) == 0 {
			return
		}
		s := aptSource{
			types:      strings.Fields(fields["types"]),
			uris:       strings.Fields(fields["uris"]),
			suites:     strings.Fields(fields["suites"]),
			components: strings.Fields(fields["components"]),
			enabled:    !strings.EqualFold(strings.TrimSpace(fields["enabled"]), "no"),
			origin:     origin,
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
