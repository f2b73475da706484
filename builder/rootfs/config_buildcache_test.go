package rootfs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The build cache settings: HCL first, else the environment variables the
// provisioner and the generator read, checked by the same parsers; a bad
// value names the setting, the value and what is allowed.
func TestPrepareBuildCache(t *testing.T) {
	tests := []struct {
		name     string
		raw      map[string]interface{}
		env      map[string]string
		mode     string
		dir      string
		max      int64
		wantErrs []string
	}{
		{name: "defaults", mode: "auto", max: 4 << 30},
		{name: "hcl", raw: map[string]interface{}{"build_cache": "No", "build_cache_dir": "/srv/c", "build_cache_max_size": "500MiB"},
			mode: "no", dir: "/srv/c", max: 500 << 20},
		{name: "environment, any case", env: map[string]string{"PODVM_BUILD_CACHE": "NO", "PODVM_BUILD_CACHE_DIR": "/srv/e", "PODVM_BUILD_CACHE_MAX_SIZE": "0"},
			mode: "no", dir: "/srv/e", max: 0},
		{name: "hcl over environment", raw: map[string]interface{}{"build_cache": "yes", "build_cache_max_size": "1G"},
			env: map[string]string{"PODVM_BUILD_CACHE": "no", "PODVM_BUILD_CACHE_MAX_SIZE": "2G"}, mode: "yes", max: 1 << 30},
		{name: "bad mode", raw: map[string]interface{}{"build_cache": "off"},
			wantErrs: []string{`build_cache: "off" is not allowed; allowed: auto, yes, no`}},
		{name: "bad mode from the environment", env: map[string]string{"PODVM_BUILD_CACHE": "maybe"},
			wantErrs: []string{`build_cache: "maybe" is not allowed`}},
		{name: "bad size", raw: map[string]interface{}{"build_cache_max_size": "4gb"},
			wantErrs: []string{`build_cache_max_size: size "4gb": unknown unit "gb"; allowed: a size such as 4GiB`}},
		{name: "bad size from the environment", env: map[string]string{"PODVM_BUILD_CACHE_MAX_SIZE": "-3"},
			wantErrs: []string{`build_cache_max_size: size "-3": not a whole number`}},
		{name: "bad dir", raw: map[string]interface{}{"build_cache_dir": "/srv/a\nb"},
			wantErrs: []string{"build_cache_dir: "}},
		{name: "every bad value at once", raw: map[string]interface{}{"build_cache": "x", "build_cache_max_size": "y"},
			wantErrs: []string{"build_cache: \"x\"", "build_cache_max_size: size \"y\""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := fakeHost()
			h.getenv = func(k string) string { return tt.env[k] }
			raw := map[string]interface{}{"suite": "trixie"}
			for k, v := range tt.raw {
				raw[k] = v
			}
			c, err := prepare(t, h, raw)
			if len(tt.wantErrs) > 0 {
				if err == nil {
					t.Fatalf("Prepare accepted %v %v", tt.raw, tt.env)
				}
				for _, w := range tt.wantErrs {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error lacks %q:\n%v", w, err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.BuildCache != tt.mode || c.BuildCacheDir != tt.dir || c.buildCacheMax != tt.max {
				t.Errorf("build_cache %q, build_cache_dir %q, max %d; want %q, %q, %d", c.BuildCache, c.BuildCacheDir, c.buildCacheMax, tt.mode, tt.dir, tt.max)
			}
		})
	}
}

// The upgrade's deb cache follows the prepared settings: off with
// build_cache=no (any case in the input) or skip_cache, and refused with a
// message for an untrusted directory.
func TestDebStoreFollowsSettings(t *testing.T) {
	dir := t.TempDir()
	open := filepath.Join(dir, "open")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		raw  map[string]interface{}
		on   bool
		say  string
	}{
		{"auto", map[string]interface{}{"build_cache_dir": dir}, true, ""},
		{"yes", map[string]interface{}{"build_cache": "YES", "build_cache_dir": dir}, true, ""},
		{"no", map[string]interface{}{"build_cache": "NO", "build_cache_dir": dir}, false, ""},
		{"skip_cache", map[string]interface{}{"skip_cache": true, "build_cache_dir": dir}, false, ""},
		{"untrusted", map[string]interface{}{"build_cache_dir": open}, false, "deb cache: off: build cache " + open + ": untrusted cache path: writable by group or others"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			raw := map[string]interface{}{"suite": "trixie"}
			for k, v := range tt.raw {
				raw[k] = v
			}
			c, err := prepare(t, fakeHost(), raw)
			if err != nil {
				t.Fatal(err)
			}
			ui := &testUi{}
			if got := debStore(c, ui) != nil; got != tt.on {
				t.Errorf("deb cache on = %v, want %v", got, tt.on)
			}
			if !strings.Contains(ui.output(), tt.say) {
				t.Errorf("ui lacks %q:\n%s", tt.say, ui.output())
			}
		})
	}
}
