package rootfs

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podvm-gpu/packer-plugin-podvm/chroot/chroottest"
)

func TestBaseKey(t *testing.T) {
	c := &Config{Suite: "trixie", Variant: "minbase", Arch: "amd64", Mirror: "http://m.example/debian",
		Components: []string{"main", "contrib"}, Include: []string{"zstd", "curl"}}
	day := time.Date(2025, 6, 1, 23, 30, 0, 0, time.FixedZone("east", 3*3600))
	k := newBaseKey(c, day)
	if k.day != "2025-06-01" {
		t.Errorf("day %q: the key must use the UTC day", k.day)
	}
	name := k.fileName()
	if !strings.HasPrefix(name, "debootstrap-trixie-minbase-amd64-2025-06-01-") || !strings.HasSuffix(name, ".tar.zst") {
		t.Errorf("file name %q", name)
	}

	same := *c
	same.Include = []string{"curl", "zstd"}
	if newBaseKey(&same, day).fileName() != name {
		t.Error("include order changed the key")
	}
	for what, change := range map[string]func(*Config){
		"suite":      func(c *Config) { c.Suite = "forky" },
		"variant":    func(c *Config) { c.Variant = "" },
		"arch":       func(c *Config) { c.Arch = "i386" },
		"mirror":     func(c *Config) { c.Mirror = "http://other.example/debian" },
		"components": func(c *Config) { c.Components = []string{"main"} },
		"include":    func(c *Config) { c.Include = []string{"curl"} },
	} {
		other := *c
		change(&other)
		if newBaseKey(&other, day).fileName() == name {
			t.Errorf("changing %s kept the key", what)
		}
	}
	if newBaseKey(c, day.Add(24*time.Hour)).hash() != k.hash() {
		t.Error("the hash must not depend on the day: pruning finds older days by it")
	}
	// Field boundaries are part of the hash: ("ab","c") != ("a","bc").
	a := baseKey{suite: "ab", variant: "c"}
	b := baseKey{suite: "a", variant: "bc"}
	if a.hash() == b.hash() {
		t.Error("ambiguous hash")
	}
	if (baseKey{}).variantName() != "default" {
		t.Error("empty variant must be named default")
	}
}

// fakeDebootstrap puts a debootstrap on PATH that records its arguments,
// copies the busybox tree src into the target and, like a debootstrap
// killed before its exit trap, leaves proc mounted there.
func fakeDebootstrap(t *testing.T, src string) (argsFile string) {
	t.Helper()
	bin := t.TempDir()
	argsFile = filepath.Join(bin, "args")
	// Called as: options... SUITE TARGET MIRROR.
	script := `#!/bin/sh
set -e
echo "$@" >> ` + argsFile + `
eval "target=\${$(($# - 1))}"
eval "mirror=\${$#}"
cp -a ` + src + `/. "$target"
mkdir -p "$target/etc/apt"
echo "deb $mirror trixie main" > "$target/etc/apt/sources.list"
echo "I: Base system installed successfully."
mount -t proc proc "$target/proc"
`
	if err := os.WriteFile(filepath.Join(bin, "debootstrap"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	return argsFile
}

func TestBuildDebootstrapThroughCache(t *testing.T) {
	chroottest.RequireRoot(t)
	src := chroottest.BusyboxRoot(t)
	fakeAptGet(t, src, "")
	argsFile := fakeDebootstrap(t, src)
	dir := t.TempDir()
	cache := filepath.Join(dir, "cache")
	if err := os.MkdirAll(cache, 0o755); err != nil {
		t.Fatal(err)
	}

	build := func(t *testing.T, name string) string {
		t.Helper()
		out := filepath.Join(dir, name)
		b := &Builder{}
		h := fakeHost()
		h.getwd = os.Getwd
		if err := b.config.Prepare(h, map[string]interface{}{
			"suite": "trixie", "variant": "minbase", "mirror": "file:///srv/mirror/debian",
			"include": []string{"curl"}, "cache_dir": cache, "output_directory": out,
		}); err != nil {
			t.Fatal(err)
		}
		ui := &testUi{}
		if _, err := b.Run(context.Background(), ui, &commandHook{commands: []string{"test -x /bin/busybox"}}); err != nil {
			t.Fatalf("%v\n%s", err, ui.output())
		}
		assertTornDown(t, out)
		// apt_sources and upgrade run on every build, cached tree or not.
		assertAptSources(t, out, "file:///srv/mirror/debian", "http://security.example/debian-security")
		assertAptGetCalls(t, out)
		return ui.output()
	}

	// An entry of the same key from an earlier day is pruned once today's
	// is saved; another key's entry stays.
	c := &Config{Suite: "trixie", Variant: "minbase", Arch: "amd64", Mirror: "file:///srv/mirror/debian", Components: []string{"main"}, Include: []string{"curl"}}
	old := filepath.Join(cache, newBaseKey(c, time.Now().Add(-48*time.Hour)).fileName())
	other := filepath.Join(cache, "debootstrap-forky-minbase-amd64-2025-01-01-0123456789abcdef.tar.zst")
	for _, f := range []string{old, other} {
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	out := build(t, "cold")
	for _, want := range []string{
		"Mirror: file:///srv/mirror/debian (from the mirror setting)",
		"Running debootstrap trixie (variant minbase, amd64, components main, including curl)",
		"Unmounted what debootstrap left mounted",
		"Saving the base tree to the cache",
		"Removed the outdated cache entry " + old,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("cold build output lacks %q:\n%s", want, out)
		}
	}
	args, _ := os.ReadFile(argsFile)
	wantArgs := "--arch=amd64 --variant=minbase --components=main --include=curl trixie " + filepath.Join(dir, "cold") + " file:///srv/mirror/debian\n"
	if string(args) != wantArgs {
		t.Errorf("debootstrap arguments:\n%q\nwant\n%q", args, wantArgs)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("another key's entry was pruned: %v", err)
	}
	entry := filepath.Join(cache, newBaseKey(c, time.Now()).fileName())
	if _, err := os.Stat(entry); err != nil {
		t.Fatalf("no cache entry: %v", err)
	}

	// Warm: no debootstrap.
	out = build(t, "warm")
	if !strings.Contains(out, "Unpacking the cached base tree "+entry) || strings.Contains(out, "Running debootstrap") {
		t.Errorf("warm build did not use the cache:\n%s", out)
	}
	if args2, _ := os.ReadFile(argsFile); string(args2) != string(args) {
		t.Error("warm build ran debootstrap")
	}

	// A damaged entry is dropped and the tree bootstrapped afresh.
	if err := os.WriteFile(entry, []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	out = build(t, "damaged")
	if !strings.Contains(out, "dropping the unusable cache entry") || !strings.Contains(out, "Running debootstrap") {
		t.Errorf("damaged entry:\n%s", out)
	}
	if fi, err := os.Stat(entry); err != nil || fi.Size() < 1000 {
		t.Errorf("the entry was not rewritten: %v", err)
	}
}
