package mkosi

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podvm-gpu/packer-plugin-podvm/modcache"
)

// TestConfigureHashSeed runs the standalone tree's mkosi.configure on the
// configuration each mkosi version gives it (its --json summary of the
// tree, which is the JSON a configure script reads): the ext4 options carry
// the hash seed from Seed=, an ext4 setting of the user's is left alone,
// and mkosi reads the result back.
func TestConfigureHashSeed(t *testing.T) {
	const seed = "0e5a3c1f-6b5d-4c39-9d1e-3b7f2a6c8d40"
	if _, err := exec.LookPath("jq"); err != nil {
		t.Fatalf("jq: %v (one of HOST_PACKAGES; make deps)", err)
	}
	dir := t.TempDir()
	c := treeCase{distro: "debian", release: "13", gpu: "yes"}
	cache := t.TempDir()
	// mkosi checks that BuildSources= exist: the module cache among them.
	if err := os.MkdirAll(modcache.Dir(cache), 0o755); err != nil {
		t.Fatal(err)
	}
	files := c.render(t, filepath.Join(t.TempDir(), "packer-plugin-podvm"), cache)
	if err := Write(dir, files, false); err != nil {
		t.Fatal(err)
	}
	// Without jq the script says so and hands the configuration back as
	// it came.
	t.Run("no jq", func(t *testing.T) {
		bin := t.TempDir()
		for _, tool := range []string{"sh", "cat"} {
			p, err := exec.LookPath(tool)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(p, filepath.Join(bin, tool)); err != nil {
				t.Fatal(err)
			}
		}
		in := `{"Seed":"` + seed + `","Environment":{}}`
		cmd := exec.Command(filepath.Join(bin, "sh"), filepath.Join(dir, "mkosi.configure"))
		cmd.Env = []string{"PATH=" + bin}
		cmd.Stdin = strings.NewReader(in)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil || string(out) != in || !strings.Contains(stderr.String(), "jq not found") {
			t.Errorf("without jq: %v, printed %q, said %q; want the input back and a word on stderr", err, out, stderr.String())
		}
	})
	for _, m := range parsingMkosis(t) {
		for _, tc := range []struct {
			name, user, want string
		}{
			{"seed", "", "-E discard,lazy_itable_init=1,hash_seed=" + seed},
			{"user's options", "-Ehash_seed=" + seed + ",nodiscard", "-Ehash_seed=" + seed + ",nodiscard"},
		} {
			t.Run(m.name+"/"+tc.name, func(t *testing.T) {
				args := []string{"--seed=" + seed}
				if tc.user != "" {
					args = append(args, "--environment=SYSTEMD_REPART_MKFS_OPTIONS_EXT4="+tc.user)
				}
				out, _ := runMkosi(t, m.argv, dir, append(args, "--json", "summary")...)
				var s struct{ Images []json.RawMessage }
				if err := json.Unmarshal(out, &s); err != nil || len(s.Images) == 0 {
					t.Fatalf("summary: %v\n%s", err, out)
				}
				cmd := exec.Command(filepath.Join(dir, "mkosi.configure"))
				cmd.Stdin = bytes.NewReader(s.Images[len(s.Images)-1])
				cmd.Stderr = os.Stderr
				conf, err := cmd.Output()
				if err != nil {
					t.Fatalf("mkosi.configure: %v", err)
				}
				var got struct {
					Seed        string
					Environment map[string]string
				}
				if err := json.Unmarshal(conf, &got); err != nil {
					t.Fatalf("mkosi.configure printed no configuration: %v\n%s", err, conf)
				}
				if got.Seed != seed || got.Environment["SYSTEMD_REPART_MKFS_OPTIONS_EXT4"] != tc.want {
					t.Errorf("Seed %q, SYSTEMD_REPART_MKFS_OPTIONS_EXT4 %q; want %q, %q", got.Seed, got.Environment["SYSTEMD_REPART_MKFS_OPTIONS_EXT4"], seed, tc.want)
				}
				// What mkosi does with a configure script's output.
				py := exec.Command("python3", "-c", "import sys; from mkosi.config import Config; c = Config.from_json(sys.stdin.read()); print(c.environment['SYSTEMD_REPART_MKFS_OPTIONS_EXT4'])")
				py.Env = append(os.Environ(), m.argv[0])
				py.Stdin = bytes.NewReader(conf)
				back, err := py.CombinedOutput()
				if err != nil || string(bytes.TrimSpace(back)) != tc.want {
					t.Errorf("mkosi %s reads the configure script's output as %q (%v); want %q", m.name, back, err, tc.want)
				}
			})
		}
	}
}
