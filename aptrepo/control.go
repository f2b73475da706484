package aptrepo

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Field is one field of a deb822 control paragraph. Value holds the text
// after the colon with surrounding blanks removed; a multi-line value keeps
// its continuation lines, each after a "\n" and with its leading blank, so
// that the paragraph can be written back as it was.
type Field struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Paragraph is a control paragraph: fields in the order they were written.
type Paragraph []Field

// Get returns the value of the named field (names are case-insensitive, as
// in deb822) and whether it is present.
func (p Paragraph) Get(name string) (string, bool) {
	for _, f := range p {
		if strings.EqualFold(f.Name, name) {
			return f.Value, true
		}
	}
	return "", false
}

// Value returns the named field's value, or "" when it is absent.
func (p Paragraph) Value(name string) string {
	v, _ := p.Get(name)
	return v
}

// errControl marks a control paragraph that does not parse.
var errControl = errors.New("malformed control paragraph")

// ParseControl parses a single deb822 paragraph, as found in a .deb's
// control file. It is strict where leniency could let one package's fields
// leak into another's stanza of Packages: no second paragraph, no
// continuation line before the first field, no control characters, and no
// field given twice. Comment lines (starting with '#') are dropped.
func ParseControl(data []byte) (Paragraph, error) {
	var p Paragraph
	seen := make(map[string]bool)
	ended := false // a blank line after the first field ends the paragraph
	for lineNo := 1; len(data) > 0; lineNo++ {
		var line []byte
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			line, data = data, nil
		}
		line = bytes.TrimRight(line, " \t")
		if len(line) == 0 {
			if len(p) > 0 {
				ended = true
			}
			continue
		}
		if line[0] == '#' {
			continue
		}
		if ended {
			return nil, fmt.Errorf("%w: line %d: more than one paragraph", errControl, lineNo)
		}
		if i := bytes.IndexFunc(line, isControlChar); i >= 0 {
			return nil, fmt.Errorf("%w: line %d: control character %q", errControl, lineNo, line[i])
		}
		if line[0] == ' ' || line[0] == '\t' {
			if len(p) == 0 {
				return nil, fmt.Errorf("%w: line %d: continuation line before any field", errControl, lineNo)
			}
			p[len(p)-1].Value += "\n" + string(line)
			continue
		}
		name, value, ok := bytes.Cut(line, []byte{':'})
		if !ok {
			return nil, fmt.Errorf("%w: line %d: no colon in %q", errControl, lineNo, truncate(line, 40))
		}
		if !validFieldName(name) {
			return nil, fmt.Errorf("%w: line %d: bad field name %q", errControl, lineNo, truncate(name, 40))
		}
		key := strings.ToLower(string(name))
		if seen[key] {
			return nil, fmt.Errorf("%w: line %d: field %s given twice", errControl, lineNo, name)
		}
		seen[key] = true
		p = append(p, Field{Name: string(name), Value: string(bytes.TrimLeft(value, " \t"))})
	}
	if len(p) == 0 {
		return nil, fmt.Errorf("%w: no fields", errControl)
	}
	return p, nil
}

// isControlChar reports the characters that have no business in a control
// file. Tab is allowed; newline never reaches here; CR would let a stanza
// look different to apt than it does to us.
func isControlChar(r rune) bool {
	return (r < 0x20 && r != '\t') || r == 0x7f
}

// validFieldName follows deb822: printable US-ASCII except colon, not
// starting with '#' or '-'.
func validFieldName(name []byte) bool {
	if len(name) == 0 || name[0] == '#' || name[0] == '-' {
		return false
	}
	for _, c := range name {
		if c <= ' ' || c >= 0x7f || c == ':' {
			return false
		}
	}
	return true
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}

// appendTo writes the paragraph in deb822 form, without the blank line that
// separates it from the next.
func (p Paragraph) appendTo(b []byte) []byte {
	for _, f := range p {
		b = append(b, f.Name...)
		b = append(b, ':')
		if f.Value != "" && f.Value[0] != '\n' {
			b = append(b, ' ')
		}
		b = append(b, f.Value...)
		b = append(b, '\n')
	}
	return b
}

var (
	// Debian policy 5.6.1; two characters at least.
	packageNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+$`)
	// Debian policy 5.6.12, loosely: the characters a version may hold.
	// Ordering is not our business, only that the value is one safe token.
	versionRE = regexp.MustCompile(`^[0-9A-Za-z.+~:-]+$`)
	archRE    = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)
)

// identity returns Package, Version and Architecture, checked to be single
// well-formed tokens, since they end up in file names and apt's cache keys.
func (p Paragraph) identity() (name, version, arch string, err error) {
	get := func(field string, re *regexp.Regexp) (string, error) {
		v, ok := p.Get(field)
		if !ok || v == "" {
			return "", fmt.Errorf("missing %s field", field)
		}
		if !re.MatchString(v) {
			return "", fmt.Errorf("bad %s field %q", field, truncate([]byte(v), 60))
		}
		return v, nil
	}
	if name, err = get("Package", packageNameRE); err != nil {
		return
	}
	if version, err = get("Version", versionRE); err != nil {
		return
	}
	arch, err = get("Architecture", archRE)
	return
}
