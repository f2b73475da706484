package mkosi

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podvm-gpu/packer-plugin-podvm/modcache"
)

// TestPathListsRefuseWhatMkosiReads covers the characters mkosi gives a
// meaning in a path list with no escape: ':' splits BuildSources= into
// source and target at its first occurrence, and '$' expands an
// environment variable in every path. Whitespace and line breaks end or
// split the value.
func TestPathListsRefuseWhatMkosiReads(t *testing.T) {
	tests := []struct {
		key   string
		items []string
		want  string // "" for accepted
	}{
		{"BuildSources", []string{".", "/var/cache/podvm/modules:podvm-module-cache"}, ""},
		{"BuildSources", []string{"../..", "/home/u/odd%dir@+=~:podvm-module-key"}, ""},
		{"BuildSources", []string{".", "/tmp/a:b:podvm-module-cache"}, `"/tmp/a:b" holds ':'`},
		{"BuildSources", []string{".", "/tmp/$HOME/c:podvm-module-cache"}, `"/tmp/$HOME/c" holds '$'`},
		{"BuildSources", []string{".", "/tmp/${X}:podvm-module-cache"}, "holds '$'"},
		{"BuildSources", []string{".", "/tmp/a\vb:podvm-module-cache"}, "whitespace or a control character"},
		{"BuildSources", []string{".", "/tmp/a\u00a0b:podvm-module-cache"}, "whitespace or a control character"},
		{"BuildSources", []string{".", "/tmp/a b:podvm-module-cache"}, "separated by whitespace"},
		{"BuildSources", []string{".", "/tmp/a\nb:podvm-module-cache"}, "line breaks"},
		{"ExtraSearchPaths", []string{"/opt/podvm/bin"}, ""},
		{"ExtraSearchPaths", []string{"/opt/$USER/bin"}, "holds '$'"},
		// One rule for every host path in a list.
		{"ExtraSearchPaths", []string{"/opt/a:b/bin"}, "holds ':'"},
		// Not path lists: '$' and ':' mean nothing to mkosi there.
		{"Packages", []string{"linux-image-6.1:amd64"}, ""},
	}
	for _, tt := range tests {
		var sec section
		var err error
		setter{&sec, &err}.list(tt.key, tt.items)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s=%q: %v", tt.key, tt.items, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), tt.key+"=")):
			t.Errorf("%s=%q: got %v, want an error naming the setting and saying %q", tt.key, tt.items, err, tt.want)
		}
	}
}

// TestRenderRefusesCacheDirMkosiMisreads renders a tree whose module cache
// lies below a directory with ':' or '$' in its name: written unchanged
// into BuildSources=, mkosi would mount another directory (or none).
func TestRenderRefusesCacheDirMkosiMisreads(t *testing.T) {
	for _, name := range []string{"a:b", "$HOME", "x${PWD}"} {
		cache := filepath.Join(t.TempDir(), name)
		settings := map[string]string{
			"enable_nvidia_gpu": "yes", "source_date_epoch": "1700000000", "build_cache_dir": cache,
			"nvidia_container_toolkit_repo_keyring": filepath.Join("testdata", "toolkit-key.asc"),
			securityMirrorKey:                       exampleMirror("debian") + "-security",
		}
		_, err := Render(context.Background(), Config{Plan: plan(t, "debian", "13", settings), Bin: "/usr/local/bin/packer-plugin-podvm", HTTPClient: noNetwork})
		if err == nil || !strings.Contains(err.Error(), "BuildSources=") || !strings.Contains(err.Error(), modcache.Dir(cache)) {
			t.Errorf("build_cache_dir %q: got %v, want BuildSources= refused naming the directory", cache, err)
		}
	}
}

// TestMkosiReadsBuildSources has real mkosi read back the BuildSources=
// the renderer accepts, odd characters and all, so what is not refused
// reaches mkosi as the very path.
func TestMkosiReadsBuildSources(t *testing.T) {
	argv := needMkosi(t)
	dir := t.TempDir()
	src := filepath.Join(t.TempDir(), "odd%dir@+=~é")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	var sec section
	var err error
	s := setter{&sec, &err}
	s.list("BuildSources", []string{".", src + ":podvm-x"})
	if err != nil {
		t.Fatal(err)
	}
	conf := "[Distribution]\nDistribution=debian\nRelease=trixie\n" + strings.TrimPrefix(iniFile("test", section{"Build", sec.keys}), "# test\n")
	if err := os.WriteFile(filepath.Join(dir, "mkosi.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _ := runMkosi(t, argv, dir, "--json", "summary")
	var got struct {
		Images []struct {
			BuildSources []struct{ Source, Target string }
		}
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("summary: %v\n%s", err, out)
	}
	if len(got.Images) == 0 {
		t.Fatalf("summary without images:\n%s", out)
	}
	bs := got.Images[len(got.Images)-1].BuildSources
	if len(bs) != 2 || bs[1].Source != src || bs[1].Target != "podvm-x" {
		t.Errorf("mkosi read BuildSources=%q as %+v, want %s at podvm-x", sec.keys, bs, src)
	}
}
