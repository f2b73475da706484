package mkosi

import (
	"fmt"
	"strings"
)

// iniValue escapes s for a mkosi configuration file. mkosi's parser cuts a
// line at the first '#' with no way to escape it, strips surrounding
// whitespace, treats indented lines as continuations and expands '%'
// specifiers, so '%' is doubled and the rest is refused.
func iniValue(s string) (string, error) {
	if strings.ContainsAny(s, "#\n\r") {
		return "", fmt.Errorf("value %q: mkosi configuration values cannot hold '#' or line breaks", s)
	}
	if strings.TrimSpace(s) != s {
		return "", fmt.Errorf("value %q: mkosi strips leading and trailing whitespace", s)
	}
	return strings.ReplaceAll(s, "%", "%%"), nil
}

// iniItem escapes one element of a list setting, where whitespace and
// commas separate elements.
func iniItem(s string) (string, error) {
	if s == "" || strings.ContainsAny(s, " \t,") {
		return "", fmt.Errorf("list item %q: mkosi lists are separated by whitespace and commas", s)
	}
	return iniValue(s)
}

// section is one [Section] of a mkosi configuration file.
type section struct {
	name string
	keys []kv
}

type kv struct{ key, value string }

// iniFile renders sections, with a leading comment. Each value must
// already be escaped.
func iniFile(comment string, sections ...section) string {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimRight(comment, "\n"), "\n") {
		b.WriteString(strings.TrimRight("# "+l, " ") + "\n")
	}
	for _, s := range sections {
		if len(s.keys) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n[%s]\n", s.name)
		for _, e := range s.keys {
			fmt.Fprintf(&b, "%s=%s\n", e.key, e.value)
		}
	}
	return b.String()
}

// setter collects settings of a section, escaping values and remembering
// the first error, so rendering code stays linear.
type setter struct {
	sec *section
	err *error
}

func (s setter) set(key, value string) {
	v, err := iniValue(value)
	if err != nil {
		if *s.err == nil {
			*s.err = fmt.Errorf("%s=: %w", key, err)
		}
		return
	}
	s.sec.keys = append(s.sec.keys, kv{key, v})
}

// list sets a list setting. mkosi splits these on commas and line breaks
// (Environment= on spaces), never on spaces within an item.
func (s setter) list(key string, items []string) {
	if len(items) == 0 {
		return
	}
	out := make([]string, 0, len(items))
	for _, it := range items {
		v, err := iniItem(it)
		if err != nil {
			if *s.err == nil {
				*s.err = fmt.Errorf("%s=: %w", key, err)
			}
			return
		}
		out = append(out, v)
	}
	sep := ","
	if key == "Environment" {
		sep = " "
	}
	s.sec.keys = append(s.sec.keys, kv{key, strings.Join(out, sep)})
}
