// Command webdocs lays out docs that `packer-sdc renderdocs` rendered (the
// partials included) the way HashiCorp's integrations registry reads a
// plugin's .web-docs directory:
//
//	README.md                          the plugin's page, from docs/README.md
//	components/<type>/<name>/README.md from docs/<type>s/<name>.mdx
//
// A component page loses its front matter and its H1, which the registry
// makes itself. Links relative to a page in docs/ would point nowhere on the
// registry, so they become absolute links into the repository on GitHub.
// scripts/web-docs.sh runs it; metadata.hcl is written by hand.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// componentDirs maps docs/ folders to the registry's component types.
var componentDirs = map[string]string{
	"builders":        "builder",
	"provisioners":    "provisioner",
	"post-processors": "post-processor",
	"datasources":     "data-source",
}

func main() {
	src := flag.String("src", "", "docs rendered by packer-sdc renderdocs")
	dst := flag.String("dst", "", "directory to write the registry layout into")
	base := flag.String("base", "", "URL that repository paths are joined to, such as https://github.com/ORG/REPO/blob/main")
	flag.Parse()
	if *src == "" || *dst == "" || *base == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: webdocs -src RENDERED -dst DIR -base URL")
		os.Exit(2)
	}
	if err := run(*src, *dst, strings.TrimSuffix(*base, "/")); err != nil {
		fmt.Fprintln(os.Stderr, "webdocs:", err)
		os.Exit(1)
	}
}

func run(src, dst, base string) error {
	readme, err := os.ReadFile(filepath.Join(src, "README.md"))
	if err != nil {
		return fmt.Errorf("the plugin page: %w", err)
	}
	out, err := rewriteLinks(readme, "docs", base)
	if err != nil {
		return fmt.Errorf("docs/README.md: %w", err)
	}
	if err := write(filepath.Join(dst, "README.md"), out); err != nil {
		return err
	}
	dirs := make([]string, 0, len(componentDirs))
	for d := range componentDirs {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	found := 0
	for _, dir := range dirs {
		pages, err := filepath.Glob(filepath.Join(src, dir, "*.mdx"))
		if err != nil {
			return err
		}
		for _, p := range pages {
			name := strings.TrimSuffix(filepath.Base(p), ".mdx")
			if name == "index" {
				// The registry has no component index pages.
				continue
			}
			rel := path.Join("docs", dir, name+".mdx")
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			page, err := componentPage(b, path.Dir(rel), base)
			if err != nil {
				return fmt.Errorf("%s: %w", rel, err)
			}
			if err := write(filepath.Join(dst, "components", componentDirs[dir], name, "README.md"), page); err != nil {
				return err
			}
			found++
		}
	}
	if found == 0 {
		return fmt.Errorf("no component pages under %s", src)
	}
	return nil
}

func write(file string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	return os.WriteFile(file, b, 0o644)
}

// componentPage strips the front matter and the first H1, then rewrites
// the links of a page that lives in repository folder dir.
func componentPage(b []byte, dir, base string) ([]byte, error) {
	body, err := stripFrontMatter(b)
	if err != nil {
		return nil, err
	}
	body = stripTitle(body)
	return rewriteLinks(body, dir, base)
}

func stripFrontMatter(b []byte) ([]byte, error) {
	if !bytes.HasPrefix(b, []byte("---\n")) {
		return nil, errors.New("no front matter (a page starts with ---)")
	}
	end := bytes.Index(b[4:], []byte("\n---\n"))
	if end < 0 {
		return nil, errors.New("front matter is not closed with ---")
	}
	return b[4+end+len("\n---\n"):], nil
}

// stripTitle drops leading blank lines and the H1 after them, and the
// blank lines that follow it.
func stripTitle(b []byte) []byte {
	b = bytes.TrimLeft(b, "\n")
	if bytes.HasPrefix(b, []byte("# ")) {
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		} else {
			b = nil
		}
	}
	return bytes.TrimLeft(b, "\n")
}

// inlineLink matches the target of a Markdown inline link, ](target).
var inlineLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// rewriteLinks makes the links of a page in repository folder dir absolute:
// base plus the path in the repository. Links with a scheme and anchors in
// the same page stay as they are.
func rewriteLinks(b []byte, dir, base string) ([]byte, error) {
	var errs []error
	out := inlineLink.ReplaceAllFunc(b, func(m []byte) []byte {
		target := string(inlineLink.FindSubmatch(m)[1])
		abs, err := absolute(target, dir, base)
		if err != nil {
			errs = append(errs, err)
			return m
		}
		return []byte("](" + abs + ")")
	})
	return out, errors.Join(errs...)
}

func absolute(target, dir, base string) (string, error) {
	if strings.HasPrefix(target, "#") || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return target, nil
	}
	p, anchor, _ := strings.Cut(target, "#")
	if anchor != "" {
		anchor = "#" + anchor
	}
	trailing := strings.HasSuffix(p, "/")
	if strings.HasPrefix(p, "/") {
		// Relative to the repository's root, as GitHub reads it.
		p = path.Clean(strings.TrimPrefix(p, "/"))
	} else {
		p = path.Join(dir, p)
	}
	if p == "." || p == ".." || strings.HasPrefix(p, "../") {
		return "", fmt.Errorf("link %q leaves the repository", target)
	}
	if trailing {
		p += "/"
	}
	return base + "/" + p + anchor, nil
}
