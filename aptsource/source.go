// Package aptsource is the one home of apt sources: the Source type, the
// parsers of both sources.list(5) formats, deb822 rendering, and the
// mirror policy, which takes a build's archive from the build host's own
// apt configuration instead of naming one.
package aptsource

import (
	"bufio"
	"fmt"
	"path"
	"strings"
)

// Source is one apt source: a deb822 stanza, or one line of a .list file.
type Source struct {
	Types         []string // "deb", "deb-src"; rendered as deb when empty
	URIs          []string
	Suites        []string
	Components    []string // empty for a flat repository
	Architectures []string
	// SignedBy is a keyring path or an inline armored key block; "" trusts
	// apt's global keyrings.
	SignedBy string
	Disabled bool
	Origin   string // the file it came from
}

// Deb822 renders the source as one deb822 stanza.
func (s Source) Deb822() string {
	var b strings.Builder
	types := s.Types
	if len(types) == 0 {
		types = []string{"deb"}
	}
	fmt.Fprintf(&b, "Types: %s\n", strings.Join(types, " "))
	fmt.Fprintf(&b, "URIs: %s\n", strings.Join(s.URIs, " "))
	fmt.Fprintf(&b, "Suites: %s\n", strings.Join(s.Suites, " "))
	if len(s.Components) > 0 {
		fmt.Fprintf(&b, "Components: %s\n", strings.Join(s.Components, " "))
	}
	if len(s.Architectures) > 0 {
		fmt.Fprintf(&b, "Architectures: %s\n", strings.Join(s.Architectures, " "))
	}
	if s.Disabled {
		b.WriteString("Enabled: no\n")
	}
	switch {
	case strings.Contains(s.SignedBy, "\n"):
		// An inline key (apt >= 2.4): continuation lines, an empty one
		// spelled " .".
		b.WriteString("Signed-By:\n")
		for _, line := range strings.Split(strings.TrimRight(s.SignedBy, "\n"), "\n") {
			line = strings.TrimRight(line, " \r")
			if line == "" {
				line = "."
			}
			fmt.Fprintf(&b, " %s\n", line)
		}
	case s.SignedBy != "":
		fmt.Fprintf(&b, "Signed-By: %s\n", s.SignedBy)
	}
	return b.String()
}

// Render renders sources as a deb822 file, after a comment header.
func Render(header string, sources []Source) string {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimRight(header, "\n"), "\n") {
		if header != "" {
			fmt.Fprintf(&b, "# %s\n", l)
		}
	}
	for i, s := range sources {
		if i > 0 || header != "" {
			b.WriteString("\n")
		}
		b.WriteString(s.Deb822())
	}
	return b.String()
}

// ParseFile parses a sources file by its name: deb822 for *.sources, the
// one-line format otherwise.
func ParseFile(name, text string) ([]Source, error) {
	if strings.HasSuffix(name, ".sources") {
		return ParseDeb822(name, text)
	}
	return ParseOneLine(name, text), nil
}

// ParseOneLine reads the one-line format of sources.list(5):
//
//	deb [ option=value ... ] uri suite [component ...]
//
// Lines it cannot read are skipped, as apt would refuse them anyway.
func ParseOneLine(origin, text string) []Source {
	var out []Source
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) < 3 {
			continue
		}
		s := Source{Types: []string{fields[0]}, Origin: origin}
		rest := fields[1:]
		if strings.HasPrefix(rest[0], "[") {
			// Options run to the closing bracket: "[a=b c=d]" and
			// "[ a=b ]" are both written.
			opts := strings.Join(rest, " ")
			end := strings.IndexByte(opts, ']')
			if end < 0 {
				continue
			}
			for _, o := range strings.Fields(strings.Trim(opts[:end], "[ ")) {
				k, v, ok := strings.Cut(o, "=")
				if !ok {
					continue
				}
				switch strings.ToLower(k) {
				case "signed-by":
					s.SignedBy = v
				case "arch":
					s.Architectures = strings.Split(v, ",")
				}
			}
			rest = strings.Fields(opts[end+1:])
		}
		if len(rest) < 2 {
			continue
		}
		s.URIs, s.Suites, s.Components = []string{rest[0]}, []string{rest[1]}, rest[2:]
		out = append(out, s)
	}
	return out
}

// ParseDeb822 reads the deb822 format of sources.list(5): stanzas of
// "Field: value" lines separated by blank lines, "#" comment lines, and
// continuation lines (an inline Signed-By key) that start with white
// space. It returns every stanza it read and the first malformed line as
// an error.
func ParseDeb822(origin, text string) ([]Source, error) {
	var out []Source
	var firstErr error
	fields := map[string]string{}
	var last string
	flush := func() {
		defer clear(fields)
		last = ""
		if len(fields) == 0 {
			return
		}
		out = append(out, Source{
			Types:         strings.Fields(fields["types"]),
			URIs:          strings.Fields(fields["uris"]),
			Suites:        strings.Fields(fields["suites"]),
			Components:    strings.Fields(fields["components"]),
			Architectures: strings.Fields(fields["architectures"]),
			SignedBy:      strings.TrimSpace(fields["signed-by"]),
			Disabled:      strings.EqualFold(strings.TrimSpace(fields["enabled"]), "no"),
			Origin:        origin,
		})
	}
	fail := func(n int, format string, args ...any) {
		if firstErr == nil {
			firstErr = fmt.Errorf("%s:%d: %s", origin, n, fmt.Sprintf(format, args...))
		}
	}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "#"):
		case strings.TrimSpace(line) == "":
			flush()
		case line[0] == ' ' || line[0] == '\t':
			if last == "" {
				fail(n, "continuation line without a field")
				continue
			}
			fields[last] += "\n" + strings.TrimSpace(line)
		default:
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				fail(n, "not a deb822 field: %q", line)
				continue
			}
			last = strings.ToLower(strings.TrimSpace(k))
			fields[last] = strings.TrimSpace(v)
		}
	}
	flush()
	if err := sc.Err(); err != nil && firstErr == nil {
		firstErr = fmt.Errorf("%s: %w", origin, err)
	}
	return out, firstErr
}

// OwnFile reports whether a sources file is one that podvm tools wrote,
// which a rerun must not take for the image's own.
func OwnFile(name string) bool { return strings.HasPrefix(path.Base(name), "podvm-") }
