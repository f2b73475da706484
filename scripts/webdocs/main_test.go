package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const base = "https://github.com/o/r/blob/main"

func TestAbsolute(t *testing.T) {
	for _, tc := range []struct {
		target, dir, want string
		wantErr           bool
	}{
		{"settings.md", "docs", base + "/docs/settings.md", false},
		{"../README.md", "docs", base + "/README.md", false},
		{"builders/", "docs", base + "/docs/builders/", false},
		{"../settings.md#env", "docs/provisioners", base + "/docs/settings.md#env", false},
		{"/docs/settings.md", "docs/provisioners", base + "/docs/settings.md", false},
		{"../../example/local/", "docs/builders", base + "/example/local/", false},
		{"#options", "docs", "#options", false},
		{"https://developer.hashicorp.com/packer", "docs", "https://developer.hashicorp.com/packer", false},
		{"mailto:a@b", "docs", "mailto:a@b", false},
		{"../../README.md", "docs", "", true},
		{"..", "docs", "", true},
	} {
		got, err := absolute(tc.target, tc.dir, base)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("absolute(%q, %q) = %q, %v; want %q, error %v", tc.target, tc.dir, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestComponentPage(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
		wantErr        bool
	}{
		{
			name: "front matter and title go, links become absolute",
			in:   "---\npage_title: x\nnav_title: x\n---\n\n# x provisioner\n\nType: `x`\n\nSee [settings](../settings.md) and [HCL](https://hcl.example/).\n",
			want: "Type: `x`\n\nSee [settings](" + base + "/docs/settings.md) and [HCL](https://hcl.example/).\n",
		},
		{
			name: "no title",
			in:   "---\na: b\n---\nText.\n",
			want: "Text.\n",
		},
		{name: "no front matter", in: "# x\n", wantErr: true},
		{name: "unclosed front matter", in: "---\na: b\n# x\n", wantErr: true},
		{name: "link out of the repository", in: "---\na: b\n---\n[x](../../../x)\n", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := componentPage([]byte(tc.in), "docs/provisioners", base)
			if tc.wantErr {
				if err == nil {
					t.Errorf("no error; got %q", got)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Errorf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestRunLayout(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	for name, body := range map[string]string{
		"README.md":            "# Plugin\n\n[Builder](builders/b.mdx)\n",
		"builders/b.mdx":       "---\nnav_title: b\n---\n\n# b builder\n\nBuilds.\n",
		"builders/index.mdx":   "---\nnav_title: all\n---\n\n# builders\n",
		"provisioners/p.mdx":   "---\nnav_title: p\n---\n\n# p provisioner\n\nProvisions.\n",
		"guides/unrelated.mdx": "---\n---\n",
	} {
		if err := os.MkdirAll(filepath.Join(src, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := run(src, dst, base); err != nil {
		t.Fatal(err)
	}
	var files []string
	err := filepath.WalkDir(dst, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dst, p)
			files = append(files, rel)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "README.md components/builder/b/README.md components/provisioner/p/README.md"
	if got := strings.Join(files, " "); got != want {
		t.Errorf("files: %s; want %s", got, want)
	}
	readme, _ := os.ReadFile(filepath.Join(dst, "README.md"))
	if !strings.Contains(string(readme), "]("+base+"/docs/builders/b.mdx)") {
		t.Errorf("README.md links not rewritten: %s", readme)
	}
	page, _ := os.ReadFile(filepath.Join(dst, "components/builder/b/README.md"))
	if string(page) != "Builds.\n" {
		t.Errorf("builder page: %q", page)
	}
}
