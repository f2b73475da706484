package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// repoRoot is the checkout this test runs in: scripts/webdocs is two
// levels below it.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// userDocs are the pages a user reads, relative to the checkout: README.md,
// every .md and .mdx under docs/ and every .md under example/.
func userDocs(t *testing.T, root string) []string {
	t.Helper()
	files := []string{"README.md"}
	for _, dir := range []string{"docs", "example"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			// Build outputs, as .gitignore names them: example/mkosi/_output,
			// and a make image's example/local/output-podvm (an image tree,
			// with its packages' own docs).
			if d.IsDir() && (strings.HasPrefix(d.Name(), "_") || strings.HasPrefix(d.Name(), "output-")) {
				return filepath.SkipDir
			}
			if !d.IsDir() && (strings.HasSuffix(p, ".md") || (dir == "docs" && strings.HasSuffix(p, ".mdx"))) {
				rel, err := filepath.Rel(root, p)
				if err != nil {
					return err
				}
				files = append(files, rel)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return files
}

// proseLines returns the lines of a Markdown page outside fenced code
// blocks, with inline code spans blanked, keyed by line number.
func proseLines(text string) map[int]string {
	out := map[int]string{}
	fence := ""
	for i, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimLeft(line, " ")
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		out[i+1] = codeSpan.ReplaceAllString(line, "``")
	}
	return out
}

var (
	codeSpan = regexp.MustCompile("`[^`]*`")
	// mdLink is an inline Markdown link or image: [text](target "title").
	mdLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	// htmlAnchor is an explicit anchor: <a id="x"> or <a name="x">.
	htmlAnchor = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
	heading    = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	linkText   = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
)

// slug is GitHub's anchor for a heading: the rendered text in lower case,
// every character dropped but letters, digits, spaces, '-' and '_', and
// each space turned into '-'.
func slug(h string) string {
	h = linkText.ReplaceAllString(h, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors are the fragments a page answers to: its headings' slugs (a
// repeated one gets -1, -2, ... as on GitHub) and its explicit anchors.
func anchors(text string) map[string]bool {
	set := map[string]bool{}
	seen := map[string]int{}
	fence := ""
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimLeft(line, " ")
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		if m := heading.FindStringSubmatch(line); m != nil {
			s := slug(m[1])
			if n := seen[s]; n > 0 {
				set[s+"-"+itoa(n)] = true
			} else {
				set[s] = true
			}
			seen[s]++
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			set[m[1]] = true
		}
	}
	return set
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		"3. Images without the bind: patching the driver DaemonSet":       "3-images-without-the-bind-patching-the-driver-daemonset",
		"GPU Operator driver container":                                   "gpu-operator-driver-container",
		"4. With the proposed `repoConfig.nodeLocalPaths` (not released)": "4-with-the-proposed-repoconfignodelocalpaths-not-released",
		"Provisioner `podvm-gpu`":                                         "provisioner-podvm-gpu",
		"macOS and other non-Linux hosts":                                 "macos-and-other-non-linux-hosts",
		"See [the builder](builders/rootfs.mdx)":                          "see-the-builder",
		"local_repo_path and friends":                                     "local_repo_path-and-friends",
	} {
		if got := slug(in); got != want {
			t.Errorf("slug(%q) = %q, want %q", in, got, want)
		}
	}
	a := anchors("# A\n## B\n## B\n```\n# not a heading\n```\n<a id=\"x\"></a>\n")
	for _, want := range []string{"a", "b", "b-1", "x"} {
		if !a[want] {
			t.Errorf("anchors: %q missing from %v", want, a)
		}
	}
	if a["not-a-heading"] {
		t.Error("anchors: a line in a code block counted as a heading")
	}
}

// TestDocLinks checks every relative link of the user docs: the file or
// directory it names exists, and a #fragment names a heading (or an
// explicit anchor) of the page it points to.
func TestDocLinks(t *testing.T) {
	root := repoRoot(t)
	pages := map[string]map[string]bool{} // page -> its anchors, read once
	anchorsOf := func(p string) (map[string]bool, error) {
		if a, ok := pages[p]; ok {
			return a, nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		pages[p] = anchors(string(b))
		return pages[p], nil
	}
	checked := 0
	for _, rel := range userDocs(t, root) {
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		for n, line := range proseLines(string(b)) {
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, frag, _ := strings.Cut(target, "#")
				dest := filepath.Join(root, rel) // a bare #fragment: this page
				if file != "" {
					if strings.HasPrefix(file, "/") {
						dest = filepath.Join(root, file)
					} else {
						dest = filepath.Join(root, filepath.Dir(rel), file)
					}
				}
				checked++
				st, err := os.Stat(dest)
				if err != nil {
					t.Errorf("%s:%d: link %q: %s does not exist", rel, n, target, dest)
					continue
				}
				if frag == "" {
					continue
				}
				if st.IsDir() || !(strings.HasSuffix(dest, ".md") || strings.HasSuffix(dest, ".mdx")) {
					t.Errorf("%s:%d: link %q: a fragment on something that is not a Markdown page", rel, n, target)
					continue
				}
				a, err := anchorsOf(dest)
				if err != nil {
					t.Fatal(err)
				}
				if !a[frag] {
					t.Errorf("%s:%d: link %q: %s has no heading or anchor %q", rel, n, target, file, frag)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative links found: the page list or the link pattern is wrong")
	}
}
