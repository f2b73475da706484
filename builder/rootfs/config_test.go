package rootfs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"
	"golang.org/x/sys/unix"

	"github.com/podvm-gpu/packer-plugin-podvm/chroot/chroottest"
	"github.com/podvm-gpu/packer-plugin-podvm/distro"
)

// fakeHost is a root amd64 host with every tool, working in /work/tpl, and
// the apt configuration in testdata/apt/plain. Its environment is empty
// but for PODVM_BUILD_CACHE_DIR, which TestMain points away from the
// user's build cache.
func fakeHost() host {
	return host{
		euid:     0,
		arch:     "amd64",
		lookPath: func(name string) (string, error) { return "/usr/bin/" + name, nil },
		getwd:    func() (string, error) { return "/work/tpl", nil },
		getenv: func(k string) string {
			if k == "PODVM_BUILD_CACHE_DIR" {
				return os.Getenv(k)
			}
			return ""
		},
		aptDir: "testdata/apt/plain",
	}
}

func prepare(t *testing.T, h host, raw map[string]interface{}) (*Config, error) {
	t.Helper()
	var c Config
	err := c.Prepare(h, raw)
	return &c, err
}

func TestPrepareDefaults(t *testing.T) {
	c, err := prepare(t, fakeHost(), map[string]interface{}{
		"suite":             "trixie",
		"packer_build_name": "base",
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.SourceType != "debootstrap" {
		t.Errorf("source_type default %q", c.SourceType)
	}
	if !reflect.DeepEqual(c.Components, []string{"main"}) {
		t.Errorf("components default %q", c.Components)
	}
	if c.Arch != "amd64" {
		t.Errorf("arch default %q", c.Arch)
	}
	if c.Mirror != "http://mirror.example/debian" {
		t.Errorf("mirror from the host's apt sources: %q", c.Mirror)
	}
	if !c.AptSources.True() || !c.Upgrade.True() {
		t.Errorf("apt_sources %v, upgrade %v: both default to true with debootstrap", c.AptSources.ToString(), c.Upgrade.ToString())
	}
	if c.SecurityMirror != "http://security.example/debian-security" || !strings.Contains(c.securityOrigin, "testdata/apt/plain/sources.list") {
		t.Errorf("security_mirror from the host's apt sources: %q (%s)", c.SecurityMirror, c.securityOrigin)
	}
	if w := c.warnings(); len(w) != 0 {
		t.Errorf("warnings with a security mirror: %q", w)
	}
	if c.CacheDir != "/var/cache/podvm-rootfs" {
		t.Errorf("cache_dir default %q", c.CacheDir)
	}
	wd, _ := os.Getwd()
	if want := filepath.Join(wd, "output-base"); c.OutputDirectory != want {
		t.Errorf("output_directory default %q, want %q", c.OutputDirectory, want)
	}

	h := fakeHost()
	h.getenv = func(k string) string {
		if k == "PODVM_CACHE" {
			return "/srv/podvm-cache"
		}
		return ""
	}
	h.aptDir = "testdata/apt/none"
	c, err = prepare(t, h, map[string]interface{}{"suite": "trixie"})
	if err != nil {
		t.Fatal(err)
	}
	if c.CacheDir != "/srv/podvm-cache/rootfs" {
		t.Errorf("cache_dir with PODVM_CACHE: %q", c.CacheDir)
	}
	if c.Mirror != "" || !strings.Contains(c.mirrorOrigin, "debootstrap's default") {
		t.Errorf("no host mirror: mirror %q (%s)", c.Mirror, c.mirrorOrigin)
	}
	if c.SecurityMirror != "" {
		t.Errorf("no host security mirror: security_mirror %q", c.SecurityMirror)
	}
	want := "the image gets no security updates: no Debian security archive was found in the host's apt sources (testdata/apt/none), and security_mirror is not set, so its apt sources have no trixie-security suite"
	if w := c.warnings(); len(w) != 1 || w[0] != want {
		t.Errorf("warnings without a security mirror: %q, want %q", w, want)
	}
}

func TestPrepareFormatDefaults(t *testing.T) {
	tests := []struct {
		format, image, tarball, cmdline string
		tools                           []string
	}{
		{"", "", "", "", nil},
		{"tar", "", "/work/tpl/output-base.tar.zst", "", nil},
		{"raw", "/work/tpl/output-base.raw", "", distro.KernelCmdline, []string{"sfdisk", "mkfs.ext4", "mkfs.vfat", "mcopy"}},
		{"qcow2", "/work/tpl/output-base.qcow2", "", distro.KernelCmdline, []string{"sfdisk", "qemu-img"}},
		{"vhd", "/work/tpl/output-base.vhd", "", distro.KernelCmdline, []string{"qemu-img"}},
	}
	for _, tt := range tests {
		t.Run("format "+tt.format, func(t *testing.T) {
			h := fakeHost()
			raw := map[string]interface{}{"suite": "trixie", "packer_build_name": "base", "output_directory": "/work/tpl/output-base"}
			if tt.format != "" {
				raw["format"] = tt.format
			}
			c, err := prepare(t, h, raw)
			if err != nil {
				t.Fatal(err)
			}
			if c.OutputImage != tt.image || c.OutputTarball != tt.tarball || c.KernelCmdline != tt.cmdline {
				t.Errorf("output_image %q, output_tarball %q, kernel_cmdline %q; want %q, %q, %q", c.OutputImage, c.OutputTarball, c.KernelCmdline, tt.image, tt.tarball, tt.cmdline)
			}
			// Each tool the format needs is named when the host lacks it.
			h.lookPath = func(name string) (string, error) { return "", errors.New("not found") }
			problems := strings.Join(c.hostProblems(h), "\n")
			for _, tool := range tt.tools {
				if !strings.Contains(problems, tool+" not found in PATH") {
					t.Errorf("host problems lack %s:\n%s", tool, problems)
				}
			}
			if tt.format == "" && strings.Contains(problems, "sfdisk") {
				t.Errorf("a directory build asks for disk tools:\n%s", problems)
			}
		})
	}
}

func TestPrepareAptDefaults(t *testing.T) {
	dir := t.TempDir()
	tree := filepath.Join(dir, "tree")
	if err := os.Mkdir(tree, 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name                string
		raw                 map[string]interface{}
		aptSources, upgrade bool
		security            string
	}{
		{"debootstrap", map[string]interface{}{"suite": "trixie"}, true, true, "http://security.example/debian-security"},
		{"explicit security mirror", map[string]interface{}{"suite": "trixie", "security_mirror": "https://sec.example/debian-security"},
			true, true, "https://sec.example/debian-security"},
		{"debootstrap, both off", map[string]interface{}{"suite": "trixie", "apt_sources": false, "upgrade": false}, false, false, ""},
		{"debootstrap, upgrade only", map[string]interface{}{"suite": "trixie", "apt_sources": false}, false, true, ""},
		{"sid has no security suite", map[string]interface{}{"suite": "sid"}, true, true, ""},
		{"directory", map[string]interface{}{"source_type": "directory", "source_path": tree}, false, false, ""},
		{"directory, apt_sources off", map[string]interface{}{"source_type": "directory", "source_path": tree, "apt_sources": false}, false, false, ""},
		{"directory, upgrade", map[string]interface{}{"source_type": "directory", "source_path": tree, "upgrade": true}, false, true, ""},
		{"directory, upgrade as a string", map[string]interface{}{"source_type": "directory", "source_path": tree, "upgrade": "true"}, false, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := prepare(t, fakeHost(), tt.raw)
			if err != nil {
				t.Fatal(err)
			}
			if c.AptSources.True() != tt.aptSources || c.Upgrade.True() != tt.upgrade {
				t.Errorf("apt_sources %s, upgrade %s; want %v, %v", c.AptSources.ToString(), c.Upgrade.ToString(), tt.aptSources, tt.upgrade)
			}
			if c.SecurityMirror != tt.security {
				t.Errorf("security_mirror %q, want %q", c.SecurityMirror, tt.security)
			}
			if w := c.warnings(); len(w) != 0 {
				t.Errorf("warnings: %q", w)
			}
		})
	}
}

func TestPrepareAcceptsGoodConfigs(t *testing.T) {
	dir := t.TempDir()
	keyring := filepath.Join(dir, "archive.gpg")
	tarball := filepath.Join(dir, "base.tar.zst")
	tree := filepath.Join(dir, "tree")
	for _, f := range []string{keyring, tarball} {
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(tree, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, raw := range map[string]map[string]interface{}{
		"full debootstrap": {
			"suite": "trixie", "mirror": "https://mirror.example/debian/", "variant": "minbase",
			"components": []string{"main", "contrib", "non-free", "non-free-firmware"},
			"include":    []string{"linux-image-amd64", "g++", "libstdc++6", "ca-certificates"},
			"keyring":    keyring, "arch": "i386", "cache_dir": filepath.Join(dir, "cache"),
			"skip_cache": true, "output_directory": filepath.Join(dir, "out"),
			"output_tarball": filepath.Join(dir, "out.tar.gz"),
		},
		"file mirror":  {"suite": "bookworm", "mirror": "file:///srv/mirror/debian", "variant": "buildd"},
		"tarball":      {"source_type": "tarball", "source_path": tarball},
		"directory":    {"source_type": "directory", "source_path": tree, "output_tarball": filepath.Join(dir, "x.tar.zst")},
		"stable alias": {"suite": "stable"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := prepare(t, fakeHost(), raw); err != nil {
				t.Errorf("unexpected error: %v", err)
			}
		})
	}
}

func TestPrepareRejectsBadInput(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file.txt")
	zip := filepath.Join(dir, "base.zip")
	tree := filepath.Join(dir, "tree")
	for _, f := range []string{file, zip} {
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(tree, 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")

	tests := []struct {
		name string
		raw  map[string]interface{}
		want []string // each must appear in the error
	}{
		{"unknown source type", map[string]interface{}{"source_type": "docker"},
			[]string{`source_type: "docker" is not a source type`, `"debootstrap", "tarball" or "directory"`}},
		{"missing suite", map[string]interface{}{},
			[]string{`suite: required with source_type "debootstrap"`, `"trixie"`}},
		{"bad suite", map[string]interface{}{"suite": "Trixie!"},
			[]string{`suite: "Trixie!" is not a suite name`}},
		{"suite with slash", map[string]interface{}{"suite": "../etc"},
			[]string{`suite: "../etc" is not a suite name`}},
		{"mirror scheme", map[string]interface{}{"suite": "trixie", "mirror": "ftp://mirror.example/debian"},
			[]string{`mirror: "ftp://mirror.example/debian" is not a URL debootstrap can fetch from`, `"http", "https" or "file"`}},
		{"mirror without host", map[string]interface{}{"suite": "trixie", "mirror": "http:///debian"},
			[]string{`mirror: "http:///debian" has no host`}},
		{"mirror relative", map[string]interface{}{"suite": "trixie", "mirror": "mirror.example/debian"},
			[]string{`mirror: "mirror.example/debian" is not a URL debootstrap can fetch from`}},
		{"mirror garbage", map[string]interface{}{"suite": "trixie", "mirror": "http://[::1"},
			[]string{`mirror: "http://[::1" is not a URL`}},
		{"file mirror without path", map[string]interface{}{"suite": "trixie", "mirror": "file://"},
			[]string{`mirror: "file://" has no path`}},
		{"format", map[string]interface{}{"suite": "trixie", "format": "vmdk"},
			[]string{`format: "vmdk" is not an output format`, `"directory", "tar", "raw", "qcow2" or "vhd"`}},
		{"disk size unit", map[string]interface{}{"suite": "trixie", "format": "qcow2", "disk_size": "4GB"},
			[]string{`disk_size: "4GB" is not a size`, `"3072M" or "4G"`}},
		{"disk size zero", map[string]interface{}{"suite": "trixie", "format": "raw", "disk_size": "0G"},
			[]string{`disk_size: "0G" is not a size`}},
		{"disk setting without a disk", map[string]interface{}{"suite": "trixie", "disk_size": "4G"},
			[]string{`disk_size: only used with format "raw", "qcow2" or "vhd", not "directory"`}},
		{"root in kernel_cmdline", map[string]interface{}{"suite": "trixie", "format": "qcow2", "kernel_cmdline": "quiet root=/dev/sda2"},
			[]string{`kernel_cmdline: "quiet root=/dev/sda2" sets root=`}},
		{"kernel_cmdline lines", map[string]interface{}{"suite": "trixie", "format": "qcow2", "kernel_cmdline": "quiet\nsplash"},
			[]string{`kernel_cmdline: "quiet\nsplash": control character U+000A`, "printable text on one line"}},
		{"image inside output", map[string]interface{}{"suite": "trixie", "format": "raw", "output_directory": out, "output_image": out + "/disk.raw"},
			[]string{`output_image: "` + out + `/disk.raw" is inside output_directory`}},
		{"image is a directory", map[string]interface{}{"suite": "trixie", "format": "raw", "output_directory": out, "output_image": tree},
			[]string{`output_image: "` + tree + `" is a directory`}},
		{"variant", map[string]interface{}{"suite": "trixie", "variant": "fakechroot"},
			[]string{`variant: "fakechroot" is not a debootstrap variant`, `"minbase" or "buildd"`}},
		{"component", map[string]interface{}{"suite": "trixie", "components": []string{"main", "Non Free"}},
			[]string{`components: "Non Free" is not a component name`}},
		{"duplicate component", map[string]interface{}{"suite": "trixie", "components": []string{"main", "main"}},
			[]string{`components: "main" is listed twice`}},
		{"include with comma", map[string]interface{}{"suite": "trixie", "include": []string{"vim,curl"}},
			[]string{`include: "vim,curl" is not a Debian package name`}},
		{"include upper case", map[string]interface{}{"suite": "trixie", "include": []string{"Vim"}},
			[]string{`include: "Vim" is not a Debian package name`}},
		{"include one letter", map[string]interface{}{"suite": "trixie", "include": []string{"a"}},
			[]string{`include: "a" is not a Debian package name`}},
		{"duplicate include", map[string]interface{}{"suite": "trixie", "include": []string{"curl", "curl"}},
			[]string{`include: "curl" is listed twice`}},
		{"missing keyring", map[string]interface{}{"suite": "trixie", "keyring": filepath.Join(dir, "nope.gpg")},
			[]string{`keyring: "` + filepath.Join(dir, "nope.gpg") + `": no such file or directory`}},
		{"keyring directory", map[string]interface{}{"suite": "trixie", "keyring": dir},
			[]string{`keyring: "` + dir + `" is not a regular file`}},
		{"foreign arch", map[string]interface{}{"suite": "trixie", "arch": "arm64"},
			[]string{`arch: "arm64" cannot be built on this amd64 host`, `"amd64" or "i386"`}},
		{"bad arch", map[string]interface{}{"suite": "trixie", "arch": "x86_64!"},
			[]string{`arch: "x86_64!" cannot be built`}},
		{"source_path with debootstrap", map[string]interface{}{"suite": "trixie", "source_path": tree},
			[]string{`source_path: "` + tree + `" is only used with source_type "tarball" or "directory"`}},
		{"tarball without path", map[string]interface{}{"source_type": "tarball"},
			[]string{`source_path: required with source_type "tarball"`}},
		{"tarball missing", map[string]interface{}{"source_type": "tarball", "source_path": filepath.Join(dir, "no.tar")},
			[]string{`no.tar": no such file or directory`}},
		{"tarball extension", map[string]interface{}{"source_type": "tarball", "source_path": zip},
			[]string{`is not a tarball this builder reads`, `".tar", ".tar.gz", ".tgz" or ".tar.zst"`}},
		{"tarball is a directory", map[string]interface{}{"source_type": "tarball", "source_path": tree},
			[]string{`is not a regular file; source_type "tarball" needs a tarball`}},
		{"directory is a file", map[string]interface{}{"source_type": "directory", "source_path": file},
			[]string{`is not a directory; source_type "directory" needs one`}},
		{"debootstrap settings with tarball", map[string]interface{}{
			"source_type": "tarball", "source_path": file + ".tar", "suite": "trixie", "mirror": "http://m.example/debian",
			"variant": "minbase", "components": []string{"main"}, "include": []string{"curl"}, "keyring": file},
			[]string{`suite: only used with source_type "debootstrap", not "tarball"`, `mirror: only used`,
				`variant: only used`, `components: only used`, `include: only used`, `keyring: only used`}},
		{"output is root", map[string]interface{}{"suite": "trixie", "output_directory": "/"},
			[]string{`output_directory: "/" is the host's root`}},
		{"output contains cwd", map[string]interface{}{"suite": "trixie", "output_directory": "/work"},
			[]string{`output_directory: "/work" contains the current directory "/work/tpl"`}},
		{"output overlaps source", map[string]interface{}{"source_type": "directory", "source_path": tree, "output_directory": filepath.Join(tree, "out")},
			[]string{`output_directory: "` + filepath.Join(tree, "out") + `" overlaps source_path`}},
		{"source inside output", map[string]interface{}{"source_type": "directory", "source_path": tree, "output_directory": dir},
			[]string{`overlaps source_path`}},
		{"tarball inside output", map[string]interface{}{"source_type": "tarball", "source_path": zip, "output_directory": dir},
			[]string{`source_path: "` + zip + `" is inside output_directory`}},
		{"output overlaps cache", map[string]interface{}{"suite": "trixie", "output_directory": out, "cache_dir": filepath.Join(out, "cache")},
			[]string{`output_directory: "` + out + `" overlaps cache_dir`}},
		{"cache is a file", map[string]interface{}{"suite": "trixie", "cache_dir": file},
			[]string{`cache_dir: "` + file + `" exists and is not a directory`}},
		{"output tarball extension", map[string]interface{}{"suite": "trixie", "output_tarball": filepath.Join(dir, "x.tar.xz")},
			[]string{`output_tarball: "` + filepath.Join(dir, "x.tar.xz") + `" has no supported extension`, `".tar.zst" or ".tar.gz"`}},
		{"output tarball inside output", map[string]interface{}{"suite": "trixie", "output_directory": out, "output_tarball": filepath.Join(out, "x.tar.zst")},
			[]string{`output_tarball: "` + filepath.Join(out, "x.tar.zst") + `" is inside output_directory`}},
		{"output tarball is a directory", map[string]interface{}{"suite": "trixie", "output_tarball": filepath.Join(dir, "d.tar.gz")},
			[]string{`output_tarball: "` + filepath.Join(dir, "d.tar.gz") + `" is a directory`}},
		{"security mirror scheme", map[string]interface{}{"suite": "trixie", "security_mirror": "ftp://security.example/debian-security"},
			[]string{`security_mirror: "ftp://security.example/debian-security" is not a URL debootstrap can fetch from`}},
		{"security mirror without host", map[string]interface{}{"suite": "trixie", "security_mirror": "https:///debian-security"},
			[]string{`security_mirror: "https:///debian-security" has no host`}},
		{"security mirror without apt_sources", map[string]interface{}{"suite": "trixie", "apt_sources": false, "security_mirror": "http://security.example/debian-security"},
			[]string{`security_mirror: only used with apt_sources = true`}},
		{"security mirror for sid", map[string]interface{}{"suite": "sid", "security_mirror": "http://security.example/debian-security"},
			[]string{`security_mirror: suite "sid" has no security suite`}},
		{"apt_sources not a bool", map[string]interface{}{"suite": "trixie", "apt_sources": "sometimes"},
			[]string{`apt_sources`}},
		{"apt settings with directory", map[string]interface{}{
			"source_type": "directory", "source_path": tree, "apt_sources": true, "security_mirror": "http://security.example/debian-security"},
			[]string{`apt_sources: only used with source_type "debootstrap", not "directory"`, `security_mirror: only used with source_type "debootstrap", not "directory"`}},
		{"unknown setting", map[string]interface{}{"suite": "trixie", "sweet": "trixie"},
			[]string{`sweet`}},
	}
	if err := os.Mkdir(filepath.Join(dir, "d.tar.gz"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := prepare(t, fakeHost(), tt.raw)
			if err == nil {
				t.Fatalf("no error; want %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestHostProblems(t *testing.T) {
	h := fakeHost()
	c, err := prepare(t, h, map[string]interface{}{"suite": "trixie"})
	if err != nil {
		t.Fatal(err)
	}
	if p := c.hostProblems(h); len(p) != 0 {
		t.Errorf("problems on a good host: %q", p)
	}
	h.euid = 1000
	h.lookPath = func(name string) (string, error) { return "", errors.New("not found") }
	// Validation itself passes: packer validate works without root.
	if _, err := prepare(t, h, map[string]interface{}{"suite": "trixie"}); err != nil {
		t.Fatalf("Prepare as non-root: %v", err)
	}
	got := strings.Join(c.hostProblems(h), "\n")
	for _, w := range []string{
		"podvm-rootfs must run as root",
		"run packer build with sudo",
		"chroot not found in PATH",
		"tar not found in PATH",
		"debootstrap not found in PATH: the podvm-rootfs builder needs it; install the debootstrap package",
	} {
		if !strings.Contains(got, w) {
			t.Errorf("problems lack %q:\n%s", w, got)
		}
	}
	c.SourceType = sourceDirectory
	if strings.Contains(strings.Join(c.hostProblems(h), "\n"), "debootstrap not found") {
		t.Error("debootstrap required for a directory source")
	}

	// Run refuses to start, before touching anything.
	b := &Builder{config: *c, testHost: &h}
	out := filepath.Join(t.TempDir(), "out")
	b.config.OutputDirectory = out
	_, err = b.Run(context.Background(), &testUi{}, &commandHook{})
	if err == nil || !strings.Contains(err.Error(), "must run as root") {
		t.Errorf("Run as non-root: %v", err)
	}
	if _, err := os.Stat(lockPath(out)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Run as non-root touched the host (%v)", err)
	}
}

// All problems come back at once, not one per packer run.
func TestPrepareReportsEveryError(t *testing.T) {
	_, err := prepare(t, fakeHost(), map[string]interface{}{
		"suite":           "Bad Suite",
		"variant":         "huge",
		"components":      []string{"MAIN"},
		"include":         []string{"A"},
		"mirror":          "gopher://x",
		"output_tarball":  "x.zip",
		"security_mirror": "gopher://y",
	})
	var me *packersdk.MultiError
	if !errors.As(err, &me) {
		t.Fatalf("want a MultiError, got %T: %v", err, err)
	}
	if len(me.Errors) != 7 {
		t.Errorf("got %d errors, want 7:\n%v", len(me.Errors), err)
	}
}

func TestDebianArch(t *testing.T) {
	for goarch, want := range map[string]string{"amd64": "amd64", "arm64": "arm64", "386": "i386", "arm": "armhf", "ppc64le": "ppc64el", "s390x": "s390x", "riscv64": "riscv64"} {
		if got := debianArch(goarch); got != want {
			t.Errorf("debianArch(%s) = %s, want %s", goarch, got, want)
		}
	}
}

func TestQuoteList(t *testing.T) {
	for _, tt := range []struct {
		in   []string
		want string
	}{
		{[]string{"a"}, `"a"`},
		{[]string{"a", "b"}, `"a" or "b"`},
		{[]string{"a", "b", "c"}, `"a", "b" or "c"`},
	} {
		if got := quoteList(tt.in); got != tt.want {
			t.Errorf("quoteList(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

// Whoever can write the base-tree cache chooses the root of later images,
// so cache_dir follows the build caches' owner and mode rules.
func TestPrepareCacheDirTrust(t *testing.T) {
	chroottest.RequireRoot(t)
	dir := t.TempDir()
	mk := func(name string, mode os.FileMode, uid int) string {
		p := filepath.Join(dir, name)
		must(t, os.Mkdir(p, 0o700))
		must(t, os.Chmod(p, mode))
		must(t, os.Chown(p, uid, uid))
		return p
	}
	good := mk("good", 0o755, 0)
	link := filepath.Join(dir, "link")
	must(t, os.Symlink(good, link))
	tests := []struct {
		name  string
		cache string
		extra map[string]interface{}
		want  string // "" when accepted
	}{
		{"root's 0755", good, nil, ""},
		{"missing", filepath.Join(dir, "new"), nil, ""},
		{"owned by nobody, 0777", mk("nobody777", 0o777, 65534), nil, "owned by uid 65534"},
		{"owned by nobody", mk("nobody", 0o755, 65534), nil, "owned by uid 65534"},
		{"writable by others", mk("world", 0o777, 0), nil, "writable by group or others (mode 0777)"},
		{"sticky and writable by others", mk("sticky", 0o1777, 0), nil, "writable by group or others"},
		{"writable by group", mk("group", 0o775, 0), nil, "writable by group or others (mode 0775)"},
		{"a link", link, nil, "symbolic link"},
		// The cache is left alone with skip_cache, and never used with
		// another source type.
		{"skip_cache", filepath.Join(dir, "world"), map[string]interface{}{"skip_cache": true}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw := map[string]interface{}{"suite": "trixie", "cache_dir": tt.cache}
			for k, v := range tt.extra {
				raw[k] = v
			}
			_, err := prepare(t, fakeHost(), raw)
			if tt.want == "" {
				if err != nil {
					t.Errorf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted; want an error with %q", tt.want)
			}
			for _, w := range []string{`cache_dir: "` + tt.cache + `"`, tt.want} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

// The outputs are replaced with -force and staged beside their final
// name; output_directory is removed on failure and with -force, after
// killing every process whose root lies below it. None of them may be a
// device, a kernel or runtime file system, or a system directory.
func TestPrepareRefusesSystemOutputs(t *testing.T) {
	chroottest.RequireRoot(t)
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.raw")
	must(t, unix.Mkfifo(fifo, 0o600))
	devLink := filepath.Join(dir, "sda.raw")
	must(t, os.Symlink("/dev/null", devLink))
	devDir := filepath.Join(dir, "devdir")
	must(t, os.Symlink("/dev", devDir))
	rootLink := filepath.Join(dir, "root")
	must(t, os.Symlink("/", rootLink))
	must(t, os.WriteFile(filepath.Join(dir, "fifo.txt"), nil, 0o644))
	must(t, unix.Mkfifo(fifo+".tar.zst", 0o600))
	disk := func(image string) map[string]interface{} {
		return map[string]interface{}{"suite": "trixie", "format": "raw", "output_directory": filepath.Join(dir, "out"), "output_image": image}
	}
	tarball := func(tb string) map[string]interface{} {
		return map[string]interface{}{"suite": "trixie", "output_directory": filepath.Join(dir, "out"), "output_tarball": tb}
	}
	outDir := func(out string) map[string]interface{} {
		return map[string]interface{}{"suite": "trixie", "output_directory": out}
	}
	tests := []struct {
		name string
		raw  map[string]interface{}
		want []string // "" when accepted
	}{
		{"image in a new directory", disk(filepath.Join(dir, "new", "disk.raw")), nil},
		{"image over a regular file", disk(filepath.Join(dir, "fifo.txt")), nil},
		{"image a block device", disk("/dev/sda"), []string{`output_image: "/dev/sda"`, "in /dev"}},
		{"image below /dev", disk("/dev/shm/disk.raw"), []string{`output_image: "/dev/shm/disk.raw"`, "in /dev"}},
		{"image below /proc", disk("/proc/self/cwd/disk.raw"), []string{`output_image: "/proc/self/cwd/disk.raw"`, "in /proc"}},
		{"image below /sys", disk("/sys/disk.raw"), []string{`output_image: "/sys/disk.raw"`, "in /sys"}},
		{"image below /run", disk("/run/disk.raw"), []string{`output_image: "/run/disk.raw"`, "in /run"}},
		{"image a link to a device", disk(devLink), []string{`output_image: "` + devLink + `"`, "character device"}},
		{"image a FIFO", disk(fifo), []string{`output_image: "` + fifo + `"`, "an existing FIFO"}},
		{"image through a link to /dev", disk(filepath.Join(devDir, "sda")), []string{`output_image: "` + filepath.Join(devDir, "sda") + `"`, "in /dev"}},
		{"tarball in /dev", tarball("/dev/null.tar.zst"), []string{`output_tarball: "/dev/null.tar.zst"`, "in /dev"}},
		{"tarball in /run", tarball("/run/x.tar.zst"), []string{`output_tarball: "/run/x.tar.zst"`, "in /run"}},
		{"tarball a FIFO", tarball(fifo + ".tar.zst"), []string{`output_tarball: "` + fifo + `.tar.zst"`, "an existing FIFO"}},
		{"directory below /dev", outDir("/dev/shm/out"), []string{`output_directory: "/dev/shm/out"`, "in /dev"}},
		{"directory below /proc", outDir("/proc/out"), []string{`output_directory: "/proc/out"`, "in /proc"}},
		{"directory below /run", outDir("/run/out"), []string{`output_directory: "/run/out"`, "in /run"}},
		{"directory /var/lib", outDir("/var/lib"), []string{`output_directory: "/var/lib": a system directory`}},
		{"directory below /etc", outDir("/etc/ssh"), []string{`output_directory: "/etc/ssh"`, "in /etc, the host's own system"}},
		{"directory below /usr", outDir("/usr/lib/x86_64-linux-gnu"), []string{`output_directory: "/usr/lib/x86_64-linux-gnu"`, "in /usr"}},
		{"directory below dpkg's state", outDir("/var/lib/dpkg/info"), []string{`output_directory: "/var/lib/dpkg/info"`, "in /var/lib/dpkg"}},
		{"directory below /usr/local", outDir("/usr/local/podvm/rootfs"), nil},
		{"image over /etc/shadow", disk("/etc/shadow"), []string{`output_image: "/etc/shadow"`, "in /etc"}},
		{"tarball below /boot", tarball("/boot/x.tar.zst"), []string{`output_tarball: "/boot/x.tar.zst"`, "in /boot"}},
		{"directory /var", outDir("/var"), []string{`output_directory: "/var": a system directory`}},
		{"directory /usr", outDir("/usr"), []string{`output_directory: "/usr": a system directory`}},
		{"directory /etc", outDir("/etc"), []string{`output_directory: "/etc": a system directory`}},
		{"directory /home", outDir("/home"), []string{`output_directory: "/home": a system directory`}},
		{"directory a home", outDir("/home/alice"), []string{`output_directory: "/home/alice": a user's home directory`}},
		{"directory containers' state", outDir("/var/lib/machines/web"), []string{`output_directory: "/var/lib/machines/web": in /var/lib/machines`, "containers"}},
		{"directory docker", outDir("/var/lib/docker"), []string{`output_directory: "/var/lib/docker"`}},
		{"directory a link to /", outDir(rootLink), []string{`output_directory: "` + rootLink + `": resolves to "/", the host's root`}},
		{"directory through a link to /", outDir(filepath.Join(rootLink, "var")), []string{`resolves to "/var", a system directory`}},
		{"directory dedicated below /var/lib", outDir("/var/lib/podvm-test-out"), nil},
		{"directory dedicated", outDir(filepath.Join(dir, "rootfs")), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := prepare(t, fakeHost(), tt.raw)
			if len(tt.want) == 0 {
				if err != nil {
					t.Errorf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted; want an error with %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

// A disk smaller than the ESP, the GPTs and the root's headroom for the
// smallest tree fails only at the disk step, after the whole build.
func TestPrepareDiskSizeMinimum(t *testing.T) {
	tests := []struct {
		size string
		ok   bool
	}{
		{"1M", false}, {"64M", false}, {"1G", false}, {"1281M", false},
		{"1282M", true}, {"2G", true}, {"auto", true}, {"", true},
	}
	for _, tt := range tests {
		t.Run(tt.size, func(t *testing.T) {
			_, err := prepare(t, fakeHost(), map[string]interface{}{"suite": "trixie", "format": "qcow2", "disk_size": tt.size})
			if tt.ok {
				if err != nil {
					t.Errorf("refused: %v", err)
				}
				return
			}
			want := `disk_size: "` + tt.size + `" is below the minimum of 1282M`
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("error %v; want %q", err, want)
			}
		})
	}
	// The minimum is what newLayout accepts for an empty tree.
	if _, err := newLayout(minDiskSize, 0, espSize, "amd64", "u"); err != nil {
		t.Errorf("newLayout refuses the minimum: %v", err)
	}
	if _, err := newLayout(minDiskSize-mib, 0, espSize, "amd64", "u"); err == nil {
		t.Error("newLayout accepts less than the minimum")
	}
}

// Every string setting refuses control characters (a carriage return ends
// a line of the image's apt sources or boot entry) and absurd lengths, up
// front, with one error that names the setting.
func TestPrepareRefusesControlCharactersAndLengths(t *testing.T) {
	dir := t.TempDir()
	tree := filepath.Join(dir, "tree")
	must(t, os.Mkdir(tree, 0o755))
	long := func(prefix string, n int) string { return prefix + strings.Repeat("a", n) }
	base := func(extra map[string]interface{}) map[string]interface{} {
		raw := map[string]interface{}{"suite": "trixie", "output_directory": filepath.Join(dir, "out")}
		for k, v := range extra {
			raw[k] = v
		}
		return raw
	}
	disk := func(k string, v interface{}) map[string]interface{} {
		return base(map[string]interface{}{"format": "raw", k: v})
	}
	tests := []struct {
		name, key string
		raw       map[string]interface{}
		want      string
	}{
		{"suite CR", "suite", base(map[string]interface{}{"suite": "trixie\rx"}), "control character U+000D"},
		{"suite long", "suite", base(map[string]interface{}{"suite": long("t", 200)}), "bytes long"},
		{"mirror CR", "mirror", base(map[string]interface{}{"mirror": "http://m.example/debian\rdeb http://evil/ x main"}), "control character U+000D"},
		{"mirror long", "mirror", base(map[string]interface{}{"mirror": long("http://m.example/", 5000)}), "bytes long"},
		{"security_mirror LF", "security_mirror", base(map[string]interface{}{"security_mirror": "http://s.example/debian-security\nx"}), "control character U+000A"},
		{"variant ESC", "variant", base(map[string]interface{}{"variant": "minbase\x1b"}), "control character U+001B"},
		{"components CR", "components", base(map[string]interface{}{"components": []string{"main\r"}}), "control character U+000D"},
		{"components too many", "components", base(map[string]interface{}{"components": manyNames(300)}), "more than the 64 allowed"},
		{"include DEL", "include", base(map[string]interface{}{"include": []string{"curl\x7f"}}), "control character U+007F"},
		{"include long", "include", base(map[string]interface{}{"include": []string{long("p", 300)}}), "bytes long"},
		{"include too many", "include", base(map[string]interface{}{"include": manyNames(5000)}), "more than the 1000 allowed"},
		{"keyring NUL", "keyring", base(map[string]interface{}{"keyring": "/etc/apt/k\x00.gpg"}), "control character U+0000"},
		{"arch tab", "arch", base(map[string]interface{}{"arch": "amd64\t"}), "control character U+0009"},
		{"cache_dir CR", "cache_dir", base(map[string]interface{}{"cache_dir": dir + "/c\rx"}), "control character U+000D"},
		{"PODVM_CACHE CR", "cache_dir", base(nil), "PODVM_CACHE=\"/srv/cache\\r/x\": control character U+000D"},
		{"cache_dir long", "cache_dir", base(map[string]interface{}{"cache_dir": dir + "/" + long("c", 5000)}), "bytes long"},
		{"output_directory CR", "output_directory", base(map[string]interface{}{"output_directory": dir + "/o\rx"}), "control character U+000D"},
		{"output_directory long", "output_directory", base(map[string]interface{}{"output_directory": dir + "/" + long("o", 5000)}), "bytes long"},
		{"output_tarball LF", "output_tarball", base(map[string]interface{}{"output_tarball": dir + "/x\n.tar.zst"}), "control character U+000A"},
		{"output_image long", "output_image", disk("output_image", dir+"/"+long("i", 5000)+".raw"), "bytes long"},
		{"kernel_cmdline CR", "kernel_cmdline", disk("kernel_cmdline", "quiet\rsplash"), "control character U+000D"},
		{"kernel_cmdline long", "kernel_cmdline", disk("kernel_cmdline", long("x=", 2000)), "bytes long"},
		{"disk_size long", "disk_size", disk("disk_size", long("1", 100)+"G"), "bytes long"},
		{"format CR", "format", base(map[string]interface{}{"format": "raw\r"}), "control character U+000D"},
		{"source_type CR", "source_type", map[string]interface{}{"source_type": "tarball\r"}, "control character U+000D"},
		{"source_path CR", "source_path", map[string]interface{}{"source_type": "directory", "source_path": tree + "\r"}, "control character U+000D"},
	}
	envHost := fakeHost()
	envHost.getenv = func(k string) string {
		if k == "PODVM_CACHE" {
			return "/srv/cache\r/x"
		}
		return ""
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := fakeHost()
			if tt.name == "PODVM_CACHE CR" {
				h = envHost
			}
			_, err := prepare(t, h, tt.raw)
			if err == nil {
				t.Fatalf("accepted; want %s: ... %s", tt.key, tt.want)
			}
			var me *packersdk.MultiError
			if !errors.As(err, &me) {
				t.Fatalf("want a MultiError, got %T: %v", err, err)
			}
			var mine []string
			for _, e := range me.Errors {
				if strings.HasPrefix(e.Error(), tt.key+": ") {
					mine = append(mine, e.Error())
				}
			}
			if len(mine) != 1 || !strings.Contains(mine[0], tt.want) {
				t.Errorf("errors about %s: %q; want one with %q\nall: %v", tt.key, mine, tt.want, err)
			}
			if len(err.Error()) > 2000 {
				t.Errorf("the error quotes the whole value (%d bytes)", len(err.Error()))
			}
		})
	}
}

func manyNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "p" + strconv.Itoa(i) + "x"
	}
	return out
}
