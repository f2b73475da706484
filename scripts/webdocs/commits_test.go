package main

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

var (
	// citedCommit is a commit a page cites: a hexadecimal-looking word
	// after "commit", "commits" or "at" ("read at commit a22dbf67",
	// "values.yaml at a22dbf67"), in backticks or not. Upper-case digits
	// and any length are caught here so that the test can refuse them.
	citedCommit = regexp.MustCompile("(?i)\\b(commits?|at)(\\s+commit)?\\s+`?([0-9a-z]{6,})\\b")
	hexWord     = regexp.MustCompile(`^[0-9a-fA-F]+$`)
	wellFormed  = regexp.MustCompile(`^[0-9a-f]{7,40}$`)
	// listedCommit is a commit in docs/upstream.md: a backticked word of
	// hexadecimal digits in a table row.
	listedCommit = regexp.MustCompile("`([0-9a-fA-F]{7,})`")
)

// withdrawn are abbreviations once cited that name no commit of the
// repository they were cited for.
var withdrawn = map[string]string{
	"06faaf0c": "not a commit of NVIDIA/gpu-operator; cite a22dbf67",
	"04744073": "not a commit of NVIDIA/gpu-operator; cite a22dbf67",
}

// citations returns the commit-like words of a page's text with their line
// numbers. After a bare "at", a word needs a letter and a digit, so that
// "at 1600000000" (a time) is not taken for a commit.
func citations(text string) map[string][]int {
	out := map[string][]int{}
	for i, line := range strings.Split(text, "\n") {
		for _, m := range citedCommit.FindAllStringSubmatch(line, -1) {
			w := m[3]
			if !hexWord.MatchString(w) || !strings.ContainsAny(w, "0123456789") {
				continue
			}
			if strings.EqualFold(m[1], "at") && m[2] == "" && !strings.ContainsAny(strings.ToLower(w), "abcdef") {
				continue
			}
			out[w] = append(out[w], i+1)
		}
	}
	return out
}

func TestCitations(t *testing.T) {
	got := citations("read at commit a22dbf67 and values.yaml at `a22dbf67`\n" +
		"at 1600000000, commit ABCDEF12, at least, commits 0123abc, at commit 04744073\n" +
		"the 00000000 digest, at a22dbf67f0\n")
	want := map[string][]int{"a22dbf67": {1, 1}, "ABCDEF12": {2}, "0123abc": {2}, "04744073": {2}, "a22dbf67f0": {3}}
	if len(got) != len(want) {
		t.Fatalf("citations = %v, want %v", got, want)
	}
	for w, lines := range want {
		if len(got[w]) != len(lines) {
			t.Errorf("citations[%q] = %v, want %v", w, got[w], lines)
		}
	}
}

// TestCitedCommits checks every commit cited in README.md, docs/ and
// example/: well-formed, listed in docs/upstream.md with the same
// abbreviation, never cited as both a commit and a longer or shorter
// abbreviation of it, and none of the withdrawn ones.
func TestCitedCommits(t *testing.T) {
	root := repoRoot(t)
	upstream, err := os.ReadFile(filepath.Join(root, "docs/upstream.md"))
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, m := range listedCommit.FindAllStringSubmatch(string(upstream), -1) {
		if !wellFormed.MatchString(m[1]) {
			t.Errorf("docs/upstream.md: %q is not 7 to 40 lower-case hexadecimal digits", m[1])
		}
		listed[m[1]] = true
	}
	if len(listed) == 0 {
		t.Fatal("docs/upstream.md lists no commits: the pattern or the page is wrong")
	}

	where := map[string][]string{} // commit -> "page:line" of each citation
	for _, rel := range userDocs(t, root) {
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		for w, lines := range citations(string(b)) {
			for _, n := range lines {
				where[w] = append(where[w], rel+":"+itoa(n))
			}
		}
		for w, why := range withdrawn {
			if strings.Contains(string(b), w) {
				t.Errorf("%s cites %s: %s", rel, w, why)
			}
		}
	}
	for w := range listed {
		where[w] = append(where[w], "docs/upstream.md")
	}
	var all []string
	for w := range where {
		all = append(all, w)
	}
	sort.Strings(all)
	for _, w := range all {
		at := strings.Join(where[w], ", ")
		if !wellFormed.MatchString(w) {
			t.Errorf("%s: commit %q is not 7 to 40 lower-case hexadecimal digits", at, w)
			continue
		}
		if !listed[w] {
			t.Errorf("%s: commit %s is not listed in docs/upstream.md", at, w)
		}
		for _, o := range all {
			if o != w && strings.HasPrefix(o, w) {
				t.Errorf("one commit cited two ways: %s (%s) and %s (%s); use one abbreviation everywhere", w, at, o, strings.Join(where[o], ", "))
			}
		}
	}
}
