package mkosi

import (
	"fmt"
	"strings"
	"unicode"
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

// pathLists are the list settings the renderer fills with host paths.
// mkosi reads every path in them through Python's os.path.expandvars,
// which replaces $NAME and ${NAME} whenever NAME is set in its
// environment, and BuildSources= splits each item into source and target
// at the first ':'. mkosi 25 has no escape for either (parse_path,
// make_tree_parser in mkosi/config.py), so such paths are refused.
var pathLists = map[string]bool{"BuildSources": true, "ExtraSearchPaths": true, "SkeletonTrees": true}

// CheckPath says whether mkosi reads the host path p in a path list as
// written: it has no '$', ':', whitespace or control character. ':' is
// refused in every path list, not only BuildSources=, so one rule serves
// each host path the tree names. The
// generator calls it for each setting that names a host path mkosi
// mounts, so the error can name the setting; the renderer checks the
// lists again whatever their origin.
func CheckPath(p string) error {
	if i := strings.IndexAny(p, "$:"); i >= 0 {
		what := "expands '$' as an environment variable"
		if p[i] == ':' {
			what = "splits a mount into source and target at ':'"
		}
		return fmt.Errorf("path %q holds '%c': mkosi %s and has no escape for it; use a path without '$' or ':'", p, p[i], what)
	}
	if strings.IndexFunc(p, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		return fmt.Errorf("path %q holds whitespace or a control character, which mkosi strips or splits on; use a path without them", p)
	}
	return nil
}

// pathItem checks one item of a path list. A BuildSources= item is
// source[:target], where the renderer's targets are plain names: a
// second ':' can only come from the source.
func pathItem(key, item string) error {
	if key != "BuildSources" {
		return CheckPath(item)
	}
	src, tgt, ok := strings.Cut(item, ":")
	if ok && strings.Contains(tgt, ":") {
		i := strings.LastIndex(item, ":")
		src, tgt = item[:i], item[i+1:]
	}
	if err := CheckPath(src); err != nil {
		return err
	}
	if ok {
		if err := CheckPath(tgt); err != nil {
			return fmt.Errorf("target: %w", err)
		}
	}
	return nil
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
		if err == nil && pathLists[key] {
			err = pathItem(key, it)
		}
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
