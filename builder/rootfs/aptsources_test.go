package rootfs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/packer-plugin-sdk/template/config"

	"github.com/podvm-gpu/packer-plugin-podvm/chroot/chroottest"
	"github.com/podvm-gpu/packer-plugin-podvm/distro"
)

func TestRenderSources(t *testing.T) {
	const header = "# Written by the podvm-rootfs builder (apt_sources).\n"
	tests := []struct {
		name                    string
		suite, mirror, security string
		components              []string
		signedBy                string
		want                    string
	}{
		{"stable with security", "trixie", "http://mirror.example/debian/", "http://security.example/debian-security",
			[]string{"main"}, distro.DebianArchiveKeyring, header + `
Types: deb
URIs: http://mirror.example/debian
Suites: trixie trixie-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://security.example/debian-security
Suites: trixie-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
`},
		{"components", "bookworm", "file:///srv/mirror/debian", "https://security.example/debian-security/",
			[]string{"main", "contrib", "non-free-firmware"}, distro.DebianArchiveKeyring, header + `
Types: deb
URIs: file:///srv/mirror/debian
Suites: bookworm bookworm-updates
Components: main contrib non-free-firmware
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: https://security.example/debian-security
Suites: bookworm-security
Components: main contrib non-free-firmware
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
`},
		{"no security mirror", "trixie", "http://mirror.example/debian", "",
			[]string{"main"}, distro.DebianArchiveKeyring, header + `
Types: deb
URIs: http://mirror.example/debian
Suites: trixie trixie-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
`},
		{"sid has no updates or security", "sid", "http://mirror.example/debian", "http://security.example/debian-security",
			[]string{"main"}, distro.DebianArchiveKeyring, header + `
Types: deb
URIs: http://mirror.example/debian
Suites: sid
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
`},
		{"testing", "testing", "http://mirror.example/debian", "",
			[]string{"main"}, distro.DebianArchiveKeyring, header + `
Types: deb
URIs: http://mirror.example/debian
Suites: testing
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
`},
		{"mirror keyring", "trixie", "http://private.example/debian", "http://security.example/debian-security",
			[]string{"main"}, mirrorKeyringPath, header + `
Types: deb
URIs: http://private.example/debian
Suites: trixie trixie-updates
Components: main
Signed-By: /etc/apt/keyrings/podvm-rootfs-mirror.gpg

Types: deb
URIs: http://security.example/debian-security
Suites: trixie-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
`},
		{"legacy security suite", "buster", "http://archive.example/debian", "http://archive.example/debian-security",
			[]string{"main"}, distro.DebianArchiveKeyring, header + `
Types: deb
URIs: http://archive.example/debian
Suites: buster buster-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://archive.example/debian-security
Suites: buster/updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := renderSources(imageSources(tt.suite, tt.mirror, tt.security, tt.components, tt.signedBy))
			if got != tt.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, tt.want)
			}
		})
	}
}

// writeTree makes a tree with the given files (mode 0644) under a temp dir.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, data := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestWriteAptSources(t *testing.T) {
	chroottest.RequireRoot(t) // the file is chowned to root
	keyring := filepath.Join(t.TempDir(), "mirror.gpg")
	if err := os.WriteFile(keyring, []byte("binary keyring"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		cfg      Config
		tree     map[string]string
		want     []string // each in debian.sources
		say      []string // each in the output
		keyring  bool
		errWants string
	}{
		{"mirror and security", Config{Suite: "trixie", Mirror: "http://mirror.example/debian", mirrorOrigin: "the mirror setting",
			SecurityMirror: "http://security.example/debian-security", securityOrigin: "the security_mirror setting", Components: []string{"main"}},
			map[string]string{"etc/apt/sources.list": "deb http://mirror.example/debian trixie main\n"},
			[]string{"URIs: http://mirror.example/debian\nSuites: trixie trixie-updates\n", "URIs: http://security.example/debian-security\nSuites: trixie-security\n"},
			[]string{"Wrote /etc/apt/sources.list.d/debian.sources: trixie trixie-updates from http://mirror.example/debian (from the mirror setting)",
				"Security updates: trixie-security from http://security.example/debian-security (from the security_mirror setting)"}, false, ""},
		{"debootstrap's default mirror", Config{Suite: "trixie", mirrorOrigin: "debootstrap's default",
			SecurityMirror: "http://security.example/debian-security", Components: []string{"main"}},
			map[string]string{"etc/apt/sources.list": "deb http://default.example/debian trixie main\n"},
			[]string{"URIs: http://default.example/debian\nSuites: trixie trixie-updates\n"},
			[]string{"from http://default.example/debian (from the mirror debootstrap wrote into /etc/apt/sources.list)"}, false, ""},
		{"default mirror, unknown suite name", Config{Suite: "podvm", Components: []string{"main"}, SourceType: sourceDebootstrap, AptSources: config.TriTrue},
			map[string]string{"etc/apt/sources.list": "deb http://default.example/debian podvm main\n"},
			[]string{"URIs: http://default.example/debian\nSuites: podvm podvm-updates\n"},
			[]string{"Warning: the image gets no security updates"}, false, ""},
		{"default mirror, none in the tree", Config{Suite: "trixie", Components: []string{"main"}},
			map[string]string{"etc/apt/apt.conf.d/.keep": ""}, nil, nil, false,
			"debootstrap used its default mirror and the tree's /etc/apt/sources.list names none; set mirror"},
		{"no security mirror", Config{Suite: "trixie", Mirror: "http://mirror.example/debian", Components: []string{"main"},
			SourceType: sourceDebootstrap, AptSources: config.TriTrue, securityOrigin: "no Debian security archive was found in the host's apt sources (/etc/apt)"},
			map[string]string{"etc/apt/sources.list": "deb http://mirror.example/debian trixie main\n"},
			[]string{"Suites: trixie trixie-updates\n"},
			[]string{"ERROR Warning: the image gets no security updates: no Debian security archive was found in the host's apt sources (/etc/apt), and security_mirror is not set, so its apt sources have no trixie-security suite"}, false, ""},
		{"sid", Config{Suite: "sid", Mirror: "http://mirror.example/debian", Components: []string{"main"}},
			map[string]string{"etc/apt/sources.list": "deb http://mirror.example/debian sid main\n"},
			[]string{"Suites: sid\n"}, []string{"No security suite: sid has none"}, false, ""},
		{"mirror keyring", Config{Suite: "trixie", Mirror: "http://private.example/debian", Keyring: keyring, Components: []string{"main"}},
			map[string]string{"etc/apt/sources.list": "deb http://private.example/debian trixie main\n"},
			[]string{"Signed-By: /etc/apt/keyrings/podvm-rootfs-mirror.gpg\n"}, nil, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := writeTree(t, tt.tree)
			ui := &testUi{}
			err := writeAptSources(&tt.cfg, ui, root)
			if tt.errWants != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errWants) {
					t.Fatalf("error %v, want %q", err, tt.errWants)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(root, "etc/apt/sources.list.d/debian.sources")
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				if !strings.Contains(string(data), w) {
					t.Errorf("debian.sources lacks %q:\n%s", w, data)
				}
			}
			fi, _ := os.Stat(p)
			if uid, gid := ownerOf(fi); fi.Mode().Perm() != 0o644 || uid != 0 || gid != 0 {
				t.Errorf("debian.sources: mode %v owner %d:%d, want 0644 root:root", fi.Mode(), uid, gid)
			}
			if _, err := os.Lstat(filepath.Join(root, "etc/apt/sources.list")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("debootstrap's sources.list is still there (%v)", err)
			}
			for _, w := range tt.say {
				if !strings.Contains(ui.output(), w) {
					t.Errorf("output lacks %q:\n%s", w, ui.output())
				}
			}
			kp := filepath.Join(root, "etc/apt/keyrings/podvm-rootfs-mirror.gpg")
			kd, kerr := os.ReadFile(kp)
			if tt.keyring {
				if kerr != nil || string(kd) != "binary keyring" {
					t.Errorf("mirror keyring in the tree: %q, %v", kd, kerr)
				} else if fi, _ := os.Stat(kp); fi.Mode().Perm() != 0o644 {
					t.Errorf("mirror keyring mode %v", fi.Mode())
				}
			} else if kerr == nil {
				t.Error("mirror keyring installed without the keyring setting")
			}
		})
	}
}

// A debian.sources that is a symlink out of the tree is replaced, not
// written through.
func TestWriteAptSourcesReplacesLink(t *testing.T) {
	chroottest.RequireRoot(t)
	root := writeTree(t, map[string]string{"etc/apt/sources.list": "deb http://mirror.example/debian trixie main\n"})
	outside := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(outside, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "etc/apt/sources.list.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "etc/apt/sources.list.d/debian.sources")); err != nil {
		t.Fatal(err)
	}
	cfg := &Config{Suite: "trixie", Mirror: "http://mirror.example/debian", Components: []string{"main"}}
	if err := writeAptSources(cfg, &testUi{}, root); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(outside); string(data) != "keep" {
		t.Errorf("wrote through a link out of the tree: %q", data)
	}
	if fi, err := os.Lstat(filepath.Join(root, "etc/apt/sources.list.d/debian.sources")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("debian.sources not a regular file: %v", err)
	}
}

// fakeAptGet puts an apt-get into the busybox tree root that records its
// arguments in /var/log/apt-get.calls and, when its arguments contain
// failOn, fails as apt does.
func fakeAptGet(t *testing.T, root, failOn string) {
	t.Helper()
	script := `#!/bin/sh
mkdir -p /var/log
echo "$DEBIAN_FRONTEND $*" >> /var/log/apt-get.calls
# Nothing to download: the deb cache has nothing to do.
case "$*" in *--print-uris*) exit 0;; esac
`
	if failOn != "" {
		script += `case "$*" in *` + failOn + `*)
	for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do echo "progress $i"; done
	echo "E: Sub-process /usr/bin/dpkg returned an error code (1)" >&2
	exit 100;;
esac
`
	}
	script += "echo \"Reading package lists... Done\"\n"
	if err := os.WriteFile(filepath.Join(root, "bin/apt-get"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}

// assertAptSources checks the tree's apt sources after apt_sources.
func assertAptSources(t *testing.T, root, mirror, security string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "etc/apt/sources.list.d/debian.sources"))
	if err != nil {
		t.Fatal(err)
	}
	want := renderSources(imageSources("trixie", mirror, security, []string{"main"}, distro.DebianArchiveKeyring))
	if string(data) != want {
		t.Errorf("debian.sources:\n%s\nwant:\n%s", data, want)
	}
	if _, err := os.Lstat(filepath.Join(root, "etc/apt/sources.list")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("debootstrap's sources.list is still there (%v)", err)
	}
}

// assertAptGetCalls checks that the upgrade ran, noninteractive and in order.
func assertAptGetCalls(t *testing.T, root string) {
	t.Helper()
	data, _ := os.ReadFile(filepath.Join(root, "var/log/apt-get.calls"))
	calls := slices.Clone(upgradeCommands)
	// The deb cache asks what the upgrade would download first.
	calls = slices.Insert(calls, upgradeDownloads, upgradeCommands[upgradeDownloads]+" --print-uris -qq")
	want := "noninteractive " + strings.Join(calls, "\nnoninteractive ") + "\n"
	want = strings.ReplaceAll(want, "noninteractive apt-get ", "noninteractive ")
	if string(data) != want {
		t.Errorf("apt-get calls:\n%s\nwant:\n%s", data, want)
	}
}

// upgrade = true on a directory tree uses the tree's own sources and
// writes none; a failing apt-get fails the build with the command, its exit
// status and the last lines of its output, before any provisioner.
func TestBuildUpgrade(t *testing.T) {
	t.Run("success", func(t *testing.T) {
		f := newFixture(t, map[string]interface{}{"upgrade": true})
		fakeAptGet(t, f.builder.config.SourcePath, "")
		ui := &testUi{}
		if _, err := f.run(context.Background(), ui, &commandHook{commands: []string{"true"}}); err != nil {
			t.Fatalf("%v\n%s", err, ui.output())
		}
		assertAptGetCalls(t, f.out)
		if _, err := os.Stat(filepath.Join(f.out, "etc/apt/sources.list.d/debian.sources")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("apt sources written into a directory tree (%v)", err)
		}
		for _, w := range []string{"Running apt-get -q update...", "Reading package lists... Done", "Upgrading the tree's packages: done in"} {
			if !strings.Contains(ui.output(), w) {
				t.Errorf("output lacks %q:\n%s", w, ui.output())
			}
		}
	})
	t.Run("failure", func(t *testing.T) {
		f := newFixture(t, map[string]interface{}{"upgrade": true})
		fakeAptGet(t, f.builder.config.SourcePath, "full-upgrade")
		ui := &testUi{}
		hook := &commandHook{commands: []string{"touch /etc/provisioned"}}
		_, err := f.run(context.Background(), ui, hook)
		if err == nil {
			t.Fatalf("no error\n%s", ui.output())
		}
		for _, w := range []string{"upgrade: ", `"apt-get -q -y -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold -o Dpkg::Options::=--force-unsafe-io full-upgrade" exited 100`,
			"progress 20", "E: Sub-process /usr/bin/dpkg returned an error code (1)"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error lacks %q: %v", w, err)
			}
		}
		if strings.Contains(err.Error(), "progress 1\n") {
			t.Errorf("error quotes all the output, not its tail: %v", err)
		}
		if _, err := os.Stat(f.out); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("output_directory survives a failed upgrade (%v)", err)
		}
		assertTornDown(t, f.out)
	})
}

// TestBuildUpgradeThroughDebCache runs the upgrade's download through the
// host's deb cache: the first build downloads and keeps the package, the
// second finds it in apt's archive directory before apt runs, and a
// damaged copy in the cache (same size: apt would take it) is never
// placed, so apt downloads again.
func TestBuildUpgradeThroughDebCache(t *testing.T) {
	t.Setenv("PODVM_BUILD_CACHE_DIR", t.TempDir())
	content := "package p!"
	sum := sha256.Sum256([]byte(content))
	aptGet := `#!/bin/sh
a=/var/cache/apt/archives
mkdir -p /var/log $a/partial
case "$*" in
*--print-uris*) echo "'http://mirror.example/debian/pool/main/p/p/p_1_all.deb' p_1_all.deb 10 MD5Sum:x" ;;
*full-upgrade*)
	if [ -e $a/p_1_all.deb ]; then echo "found $(cat $a/p_1_all.deb)" >> /var/log/apt-get.calls
	else printf '` + content + `' > $a/p_1_all.deb; echo downloaded >> /var/log/apt-get.calls; fi ;;
*clean*) rm -f $a/*.deb ;;
esac
`
	aptCache := `#!/bin/sh
[ "$*" = "show p=1" ] || exit 100
printf 'Package: p\nVersion: 1\nFilename: pool/main/p/p/p_1_all.deb\nSize: 10\nSHA256: ` + hex.EncodeToString(sum[:]) + `\n'
`
	build := func() (calls, output string) {
		t.Helper()
		f := newFixture(t, map[string]interface{}{"upgrade": true})
		for name, script := range map[string]string{"bin/apt-get": aptGet, "bin/apt-cache": aptCache} {
			if err := os.WriteFile(filepath.Join(f.builder.config.SourcePath, name), []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		ui := &testUi{}
		if _, err := f.run(context.Background(), ui, &commandHook{commands: []string{"true"}}); err != nil {
			t.Fatalf("%v\n%s", err, ui.output())
		}
		data, _ := os.ReadFile(filepath.Join(f.out, "var/log/apt-get.calls"))
		return string(data), ui.output()
	}
	if calls, out := build(); calls != "downloaded\n" || !strings.Contains(out, "deb cache: 0 of 1 packages from the cache") || !strings.Contains(out, "deb cache: kept 1 packages") {
		t.Errorf("first build: apt %q\n%s", calls, out)
	}
	if calls, out := build(); calls != "found "+content+"\n" || !strings.Contains(out, "deb cache: 1 of 1 packages from the cache") {
		t.Errorf("second build: apt %q\n%s", calls, out)
	}
	stored := filepath.Join(os.Getenv("PODVM_BUILD_CACHE_DIR"), "debs", "v1", hex.EncodeToString(sum[:])+".deb")
	if err := os.WriteFile(stored, []byte("package q!"), 0o644); err != nil {
		t.Fatal(err)
	}
	if calls, out := build(); calls != "downloaded\n" {
		t.Errorf("build with a damaged cached copy: apt %q\n%s", calls, out)
	}
	if got, _ := os.ReadFile(stored); string(got) != content {
		t.Errorf("the cache holds %q after the rebuild; want the good copy again", got)
	}
}
