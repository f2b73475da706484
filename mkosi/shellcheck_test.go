package mkosi

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podvm-gpu/packer-plugin-podvm/internal/shellcheck"
)

// TestTreesShellcheck holds every shell script of the golden trees (the
// build, postinst and finalize scripts mkosi runs, and the scripts they
// install into the image) to sh -n and shellcheck: they run only in an
// image build. The fragments in scripts/ are checked there, in the scripts
// they are part of: each must appear in one.
func TestTreesShellcheck(t *testing.T) {
	shellcheck.Require(t)
	n := 0
	var rendered strings.Builder
	for _, c := range treeCases {
		for _, f := range c.render(t, goldenBin, "") {
			if !isShellScript(f) {
				continue
			}
			n++
			rendered.Write(f.Data)
			shellcheck.Check(t, c.name()+": "+f.Path, string(f.Data))
		}
	}
	// The user's keys and passphrases: lines the golden trees lack.
	dir := t.TempDir()
	key, cert := filepath.Join(dir, "m.key"), filepath.Join(dir, "m.pem")
	for _, f := range []string{key, cert} {
		if err := os.WriteFile(f, []byte("placeholder\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p := plan(t, "debian", "13", map[string]string{
		"nvidia_container_toolkit_repo_keyring": filepath.Join("testdata", "toolkit-key.asc"),
		"nvidia_module_signing":                 "key",
		"nvidia_module_signing_key":             key,
		"nvidia_module_signing_cert":            cert,
		"nvidia_module_signing_passphrase_env":  "MODPASS",
		"local_repo":                            "yes",
		"local_repo_signing_key":                key,
		"local_repo_passphrase_env":             "REPOPASS",
	})
	// And a repository without the dependency closure (download-only).
	none := plan(t, "debian", "13", map[string]string{
		"nvidia_container_toolkit_repo_keyring": filepath.Join("testdata", "toolkit-key.asc"),
		"local_repo":                            "yes",
		"local_repo_closure":                    "none",
	})
	// The user keys' plan once more, as a layer of a tree of several images.
	for name, c := range map[string]Config{
		"user keys":               {Plan: p},
		"local_repo_closure=none": {Plan: none},
		"layer (--into)":          {Plan: p, Into: &Layer{ImageDir: "mkosi.images/system"}},
	} {
		c.Bin, c.HTTPClient = goldenBin, noNetwork
		files, err := Render(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if isShellScript(f) {
				n++
				rendered.Write(f.Data)
				shellcheck.Check(t, name+": "+f.Path, string(f.Data))
			}
		}
	}
	fragments, _ := filepath.Glob(filepath.Join("scripts", "*.sh"))
	if len(fragments) == 0 {
		t.Fatal("no scripts/*.sh")
	}
	for _, p := range fragments {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(rendered.String(), string(data)) {
			t.Errorf("%s is in no script of the golden trees, so nothing checks it", p)
		}
	}
	if n == 0 {
		t.Fatal("the trees hold no shell script")
	}
}

// isShellScript reports whether f starts with a #! line naming a shell, or
// is named as a script without one.
func isShellScript(f File) bool {
	first, _, _ := strings.Cut(string(f.Data), "\n")
	if strings.HasPrefix(first, "#!") {
		return strings.HasSuffix(first, "/sh") || strings.HasSuffix(first, "/bash") || strings.Contains(first, "/sh ") || strings.Contains(first, "bash ")
	}
	return strings.HasSuffix(f.Path, ".sh")
}
