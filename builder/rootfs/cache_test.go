package rootfs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
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
	if rec, err := os.ReadFile(entry + ".sha256"); err != nil || string(rec) != fileSHA256(t, entry)+"  "+filepath.Base(entry)+"\n" {
		t.Errorf("digest record %q (%v), want the entry's SHA256 and name", rec, err)
	}
	if left, _ := filepath.Glob(filepath.Join(cache, ".*")); len(left) > 0 {
		t.Errorf("staging left in the cache: %q", left)
	}

	// Warm: no debootstrap.
	out = build(t, "warm")
	if !strings.Contains(out, "Unpacking the cached base tree "+entry) || strings.Contains(out, "Running debootstrap") {
		t.Errorf("warm build did not use the cache:\n%s", out)
	}
	if args2, _ := os.ReadFile(argsFile); string(args2) != string(args) {
		t.Error("warm build ran debootstrap")
	}

	// A damaged entry no longer has its recorded SHA256: it is dropped and
	// the tree bootstrapped afresh.
	if err := os.WriteFile(entry, []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	out = build(t, "damaged")
	if !strings.Contains(out, "refusing the cache entry "+entry+": SHA256 mismatch") || !strings.Contains(out, "Running debootstrap") {
		t.Errorf("damaged entry:\n%s", out)
	}
	if fi, err := os.Stat(entry); err != nil || fi.Size() < 1000 {
		t.Errorf("the entry was not rewritten: %v", err)
	}
}

// buildThroughCache runs a debootstrap build into out with cache as
// cache_dir, through the fake debootstrap, and returns the build's output.
func buildThroughCache(t *testing.T, cache, out string) (string, error) {
	t.Helper()
	b := &Builder{}
	h := fakeHost()
	h.getwd = os.Getwd
	if err := b.config.Prepare(h, map[string]interface{}{
		"suite": "trixie", "variant": "minbase", "mirror": "file:///srv/mirror/debian",
		"cache_dir": cache, "output_directory": out, "apt_sources": false, "upgrade": false,
	}); err != nil {
		return "", err
	}
	ui := &testUi{}
	_, err := b.Run(context.Background(), ui, &commandHook{})
	assertTornDown(t, out)
	return ui.output(), err
}

func fileSHA256(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// A base tree is unpacked only when its SHA256 matches the one the builder
// recorded when it wrote the entry. A tarball planted under the entry's
// predictable name, one whose digest does not match, and links in place
// of either file are refused with a message that says why, and the tree is
// bootstrapped afresh.
func TestBuildRefusesUnverifiedCacheEntry(t *testing.T) {
	chroottest.RequireRoot(t)
	src := chroottest.BusyboxRoot(t)
	fakeDebootstrap(t, src)

	// The attacker's tree: the busybox tree and a marker.
	evil := filepath.Join(t.TempDir(), "evil")
	if out, err := exec.Command("cp", "-a", src, evil).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(evil, "planted"), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	evilTar := filepath.Join(t.TempDir(), "evil.tar.zst")
	if err := createTarball(context.Background(), evil, evilTar); err != nil {
		t.Fatal(err)
	}
	evilSum := fileSHA256(t, evilTar)
	copyFile := func(t *testing.T, from, to string) {
		t.Helper()
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	tests := []struct {
		name  string
		plant func(t *testing.T, entry string)
		want  string
	}{
		{"no recorded digest", func(t *testing.T, entry string) {
			copyFile(t, evilTar, entry)
		}, "has no recorded SHA256"},
		{"digest mismatch", func(t *testing.T, entry string) {
			copyFile(t, evilTar, entry)
			must(t, os.WriteFile(entry+".sha256", []byte(strings.Repeat("0", 64)+"  "+filepath.Base(entry)+"\n"), 0o644))
		}, "SHA256 mismatch"},
		{"digest not a digest", func(t *testing.T, entry string) {
			copyFile(t, evilTar, entry)
			must(t, os.WriteFile(entry+".sha256", []byte("../../etc/passwd\n"), 0o644))
		}, "is not a SHA256 record"},
		{"entry is a link", func(t *testing.T, entry string) {
			must(t, os.Symlink(evilTar, entry))
			must(t, os.WriteFile(entry+".sha256", []byte(evilSum+"  "+filepath.Base(entry)+"\n"), 0o644))
		}, "symbolic link"},
		{"digest is a link", func(t *testing.T, entry string) {
			copyFile(t, evilTar, entry)
			must(t, os.WriteFile(entry+".real", []byte(evilSum+"\n"), 0o644))
			must(t, os.Symlink(entry+".real", entry+".sha256"))
		}, "symbolic link"},
		{"entry writable by others", func(t *testing.T, entry string) {
			copyFile(t, evilTar, entry)
			must(t, os.Chmod(entry, 0o666))
			must(t, os.WriteFile(entry+".sha256", []byte(evilSum+"  "+filepath.Base(entry)+"\n"), 0o644))
		}, "writable by group or others"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			cache := filepath.Join(dir, "cache")
			must(t, os.Mkdir(cache, 0o755))
			c := &Config{Suite: "trixie", Variant: "minbase", Arch: "amd64", Mirror: "file:///srv/mirror/debian", Components: []string{"main"}}
			entry := filepath.Join(cache, newBaseKey(c, time.Now()).fileName())
			tt.plant(t, entry)

			out := filepath.Join(dir, "out")
			log, err := buildThroughCache(t, cache, out)
			if err != nil {
				t.Fatalf("%v\n%s", err, log)
			}
			if _, err := os.Stat(filepath.Join(out, "planted")); err == nil {
				t.Fatalf("the planted tree became the image root:\n%s", log)
			}
			for _, w := range []string{"Warning: refusing the cache entry " + entry, tt.want, "Running debootstrap"} {
				if !strings.Contains(log, w) {
					t.Errorf("output lacks %q:\n%s", w, log)
				}
			}
			// The entry is rebuilt, with a digest that matches it.
			fi, err := os.Lstat(entry)
			if err != nil || !fi.Mode().IsRegular() {
				t.Fatalf("entry not rewritten as a regular file: %v", err)
			}
			rec, err := os.ReadFile(entry + ".sha256")
			if err != nil {
				t.Fatalf("no digest written for the rebuilt entry: %v", err)
			}
			if want := fileSHA256(t, entry) + "  " + filepath.Base(entry) + "\n"; string(rec) != want {
				t.Errorf("digest record %q, want %q", rec, want)
			}

			// And the next build uses it.
			log, err = buildThroughCache(t, cache, filepath.Join(dir, "warm"))
			if err != nil {
				t.Fatalf("%v\n%s", err, log)
			}
			if !strings.Contains(log, "Unpacking the cached base tree "+entry) || strings.Contains(log, "Running debootstrap") {
				t.Errorf("the rebuilt entry was not used:\n%s", log)
			}
		})
	}
}
