package gpu

import (
	"bufio"
	"fmt"
	"github.com/podvm-gpu/packer-plugin-podvm/gpustack"
	"path"
	"slices"
	"strings"
)

// componentsSources is the file the provisioner writes to enable more
// components of the image's own archive. The image's files are left alone.
const componentsSources = "/etc/apt/sources.list.d/podvm-archive-components.sources"

// cmdListSources prints every apt source file of the image, each after a
// marker line naming it, so one round trip reads them all.
const cmdListSources = `for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do ` +
	`[ -f "$f" ] || continue; echo "` + sourceMarker + `$f"; cat "$f"; echo; done`

const sourceMarker = "#### podvm-gpu source file: "

// sourceEntry is one enabled "deb" source, from either format.
type sourceEntry struct {
	File       string
	URI        string
	Suites     []string
	Components []string
	SignedBy   string
}

// parseSourceFiles splits the output of cmdListSources and parses each file.
func parseSourceFiles(out string) ([]sourceEntry, error) {
	var entries []sourceEntry
	var file string
	var body strings.Builder
	finish := func() error {
		if file == "" {
			return nil
		}
		var es []sourceEntry
		var err error
		if strings.HasSuffix(file, ".sources") {
			es, err = parseDeb822Sources(file, body.String())
		} else {
			es = parseOneLineSources(file, body.String())
		}
		entries = append(entries, es...)
		body.Reset()
		return err
	}
	for _, l := range strings.SplitAfter(out, "\n") {
		if name, ok := strings.CutPrefix(l, sourceMarker); ok {
			if err := finish(); err != nil {
				return nil, err
			}
			file = strings.TrimSpace(name)
			continue
		}
		body.WriteString(l)
	}
	return entries, finish()
}

// parseOneLineSources reads the classic format:
// deb [ opt=val ... ] uri suite [component ...]
func parseOneLineSources(file, text string) []sourceEntry {
	var out []sourceEntry
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "deb" {
			continue
		}
		e := sourceEntry{File: file}
		rest := f[1:]
		if strings.HasPrefix(rest[0], "[") {
			// Options may be written "[a=b c=d]" or "[ a=b ]".
			opts := strings.Join(rest, " ")
			end := strings.IndexByte(opts, ']')
			if end < 0 {
				continue
			}
			for _, o := range strings.Fields(strings.Trim(opts[:end], "[ ")) {
				if k, v, ok := strings.Cut(o, "="); ok && strings.EqualFold(k, "signed-by") {
					e.SignedBy = v
				}
			}
			rest = strings.Fields(opts[end+1:])
		}
		if len(rest) < 2 {
			continue
		}
		e.URI, e.Suites, e.Components = rest[0], []string{rest[1]}, rest[2:]
		out = append(out, e)
	}
	return out
}

// parseDeb822Sources reads the deb822 format, one stanza per entry.
func parseDeb822Sources(file, text string) ([]sourceEntry, error) {
	var out []sourceEntry
	fields := map[string]string{}
	var last string
	flush := func() {
		defer clear(fields)
		if len(fields) == 0 {
			return
		}
		if v, ok := fields["enabled"]; ok && strings.EqualFold(strings.TrimSpace(v), "no") {
			return
		}
		if !slices.Contains(strings.Fields(fields["types"]), "deb") {
			return
		}
		signedBy := strings.TrimSpace(fields["signed-by"])
		if strings.Contains(signedBy, "\n") {
			// An inline key block: not a file the archive can share.
			signedBy = "(inline key)"
		}
		for _, uri := range strings.Fields(fields["uris"]) {
			out = append(out, sourceEntry{
				File:       file,
				URI:        uri,
				Suites:     strings.Fields(fields["suites"]),
				Components: strings.Fields(fields["components"]),
				SignedBy:   signedBy,
			})
		}
	}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, "#"):
		case strings.TrimSpace(l) == "":
			flush()
			last = ""
		case l[0] == ' ' || l[0] == '\t':
			if last == "" {
				return nil, fmt.Errorf("%s:%d: continuation line without a field", file, n)
			}
			fields[last] += "\n" + strings.TrimSpace(l)
		default:
			k, v, ok := strings.Cut(l, ":")
			if !ok {
				return nil, fmt.Errorf("%s:%d: not a deb822 field: %q", file, n, l)
			}
			last = strings.ToLower(strings.TrimSpace(k))
			fields[last] = strings.TrimSpace(v)
		}
	}
	flush()
	return out, sc.Err()
}

// archiveEntries picks the image's own distro archive from its sources.
// Entries signed by the archive keyring are it (cloud images and Ubuntu
// write Signed-By). Only when there are none, unsigned entries (trusted
// through trusted.gpg.d, as debootstrap writes them) count if every suite is
// the image's codename or codename-something and they carry "main", which
// the distro archives always do and e.g. Docker's "stable" repository does
// not. Our own files are skipped, so a rerun computes the same result.
func archiveEntries(entries []sourceEntry, keyring, codename string) []sourceEntry {
	var signed, unsigned []sourceEntry
	for _, e := range entries {
		if e.File == componentsSources || strings.HasPrefix(path.Base(e.File), "podvm-") {
			continue
		}
		switch {
		case e.SignedBy == keyring:
			signed = append(signed, e)
		case e.SignedBy == "" && codename != "" && allSuitesOf(e.Suites, codename) && slices.Contains(e.Components, "main"):
			unsigned = append(unsigned, e)
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

// componentsDeb822 renders the extra source: for each archive entry, the
// wanted components it lacks, for the same URI and suites, with the same
// Signed-By as the entry (apt refuses one URI and suite with two different
// Signed-By values). Empty when nothing is missing.
func componentsDeb822(archive []sourceEntry, want []string) string {
	type stanza struct {
		uri, signedBy string
		suites        []string
		missing       []string
	}
	var stanzas []*stanza
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
		i := slices.IndexFunc(stanzas, func(s *stanza) bool {
			return s.uri == e.URI && s.signedBy == e.SignedBy && slices.Equal(s.missing, missing)
		})
		if i < 0 {
			stanzas = append(stanzas, &stanza{uri: e.URI, signedBy: e.SignedBy, missing: missing})
			i = len(stanzas) - 1
		}
		for _, su := range e.Suites {
			if !slices.Contains(stanzas[i].suites, su) {
				stanzas[i].suites = append(stanzas[i].suites, su)
			}
		}
	}
	if len(stanzas) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("# Written by podvm-gpu: components of the image's archive the GPU stack needs.\n")
	for i, s := range stanzas {
		if i > 0 {
			b.WriteString("\n")
		}
		b.WriteString(gpustack.AptSource{URI: s.uri, Suites: s.suites, Components: s.missing, Keyring: s.signedBy}.Deb822())
	}
	return b.String()
}
