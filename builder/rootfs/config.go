//go:generate go tool packer-sdc mapstructure-to-hcl2 -type Config

package rootfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/hashicorp/packer-plugin-sdk/common"
	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"
	"github.com/hashicorp/packer-plugin-sdk/template/config"
	"github.com/hashicorp/packer-plugin-sdk/template/interpolate"

	"github.com/podvm-gpu/packer-plugin-podvm/aptsource"
	"github.com/podvm-gpu/packer-plugin-podvm/cachedir"
	"github.com/podvm-gpu/packer-plugin-podvm/distro"
	"github.com/podvm-gpu/packer-plugin-podvm/inputcheck"
)

// Source types.
const (
	sourceDebootstrap = "debootstrap"
	sourceTarball     = "tarball"
	sourceDirectory   = "directory"
)

// Config is the podvm-rootfs builder's configuration.
type Config struct {
	common.PackerConfig `mapstructure:",squash"`

	// Where the root filesystem comes from: `debootstrap` (the default) builds
	// a fresh Debian tree, `tarball` unpacks `source_path` (.tar, .tar.gz,
	// .tgz or .tar.zst), `directory` copies the tree at `source_path`.
	SourceType string `mapstructure:"source_type"`
	// The tarball or directory to start from; only with source_type
	// `tarball` or `directory`.
	SourcePath string `mapstructure:"source_path"`

	// The Debian suite or codename to bootstrap, for example `trixie`.
	// Required with source_type `debootstrap`.
	Suite string `mapstructure:"suite"`
	// The archive to bootstrap from (http, https or file URL). Defaults to the
	// first Debian archive in the host's apt sources, else debootstrap's own
	// default.
	Mirror string `mapstructure:"mirror"`
	// debootstrap's --variant: `minbase` or `buildd`; empty for debootstrap's
	// default (required and important packages).
	Variant string `mapstructure:"variant"`
	// Archive components to enable. Defaults to `["main"]`.
	Components []string `mapstructure:"components"`
	// Extra packages debootstrap installs.
	Include []string `mapstructure:"include"`
	// An OpenPGP keyring that verifies the mirror's Release file, for a
	// mirror signed with a key the host does not trust already.
	Keyring string `mapstructure:"keyring"`
	// The Debian architecture of the tree. Defaults to the host's; the only
	// other choice is i386 on an amd64 host, which runs natively.
	Arch string `mapstructure:"arch"`

	// The Debian security archive (http, https or file URL) the image's apt
	// sources name for `<suite>-security` (`<suite>/updates` before
	// bullseye). Defaults to the first Debian
	// security archive in the host's apt sources; with none there the build
	// log warns that the image gets no security updates. Only with
	// source_type `debootstrap` and `apt_sources`; unstable, testing and
	// experimental have no security suite.
	SecurityMirror string `mapstructure:"security_mirror"`
	// Replace debootstrap's one-line /etc/apt/sources.list (the release's
	// suite alone) with /etc/apt/sources.list.d/debian.sources in deb822
	// form: `<suite>` and `<suite>-updates` from `mirror` (the mirror
	// debootstrap used, also when that was its own default), and
	// the security suite (`<suite>-security`, or `<suite>/updates` before
	// bullseye) from `security_mirror`, with `components`. Done on
	// every build, cached base tree or not, before provisioners run.
	// Defaults to `true` with source_type `debootstrap`; a tarball or
	// directory keeps its own apt sources, and setting this with them is an
	// error.
	AptSources config.Trilean `mapstructure:"apt_sources"`
	// Run `apt-get update` and a noninteractive `apt-get full-upgrade` in the
	// tree before provisioners run, so the image has the release's security
	// and point updates (a newer kernel among them). Defaults to `true` with
	// source_type `debootstrap` and `false` with a tarball or directory,
	// whose own apt sources it uses when set.
	Upgrade config.Trilean `mapstructure:"upgrade"`

	// Where bootstrapped base trees are cached as tarballs, keyed by suite,
	// variant, components, include, arch, mirror and the UTC day, each with
	// its SHA256 beside it (`<tarball>.sha256`); an entry whose SHA256 does
	// not match, or that has none, is removed and bootstrapped afresh. The
	// directory must be owned by root or the user running the build and
	// writable by nobody else, and not be a symbolic link. Defaults to
	// $PODVM_CACHE/rootfs, else /var/cache/podvm-rootfs.
	CacheDir string `mapstructure:"cache_dir"`
	// Always run debootstrap and leave the cache alone.
	SkipCache bool `mapstructure:"skip_cache"`

	// The build caches shared with the podvm-gpu provisioner and the mkosi
	// generator (the same setting there): the upgrade's .debs are kept in
	// `build_cache_dir`/debs and checked against the archive's hashes
	// before apt sees them. `auto` or `yes`: used; `no`: none; any case.
	// Defaults to $PODVM_BUILD_CACHE, else `auto`.
	BuildCache string `mapstructure:"build_cache"`
	// The build caches' directory on the build host. It must be owned by
	// root or the user running the build and writable by nobody else.
	// Defaults to $PODVM_BUILD_CACHE_DIR, else $PODVM_CACHE, else
	// `$XDG_CACHE_HOME/podvm`, else `~/.cache/podvm`.
	BuildCacheDir string `mapstructure:"build_cache_dir"`
	// Bound of each build cache, such as `4GiB` or `500MiB`: the least
	// recently used entries go first; `0`: no bound. Defaults to
	// $PODVM_BUILD_CACHE_MAX_SIZE, else `4GiB`.
	BuildCacheMaxSize string `mapstructure:"build_cache_max_size"`
	// buildCacheMax is BuildCacheMaxSize in bytes.
	buildCacheMax int64

	// The directory the root filesystem is built in and left in. It must not
	// exist or be empty, unless packer runs with -force. A failed build, and
	// -force, remove it after killing every process whose root lies below
	// it, so it must be a directory of the build's own: not a system
	// directory (/, /usr, /var, /var/lib, /etc, /home, ...), a home, a
	// directory of containers' state or anything in /dev, /proc, /sys or
	// /run. Defaults to `output-<build name>`.
	OutputDirectory string `mapstructure:"output_directory"`
	// Also pack the finished tree into this tarball: .tar.zst or .tar.gz.
	// Defaults to `<output_directory>.tar.zst` with format `tar`.
	OutputTarball string `mapstructure:"output_tarball"`

	// What the build leaves: `directory` (the default) the tree in
	// output_directory; `tar` the tree and a tarball of it (output_tarball);
	// `raw`, `qcow2` or `vhd` the tree and a bootable disk image of it
	// (output_image): GPT, an EFI system partition with systemd-boot and
	// the tree's kernels, and an ext4 root found by its partition UUID.
	// `vhd` is a fixed-size VHD with a whole number of MiB, as Azure takes.
	// The disk is made in user space (sfdisk, mkfs.ext4 -d, mtools,
	// qemu-img): no loop device and no mount.
	Format string `mapstructure:"format"`
	// The disk image to write with a disk format: a regular file or a new
	// name, outside /dev, /proc, /sys and /run. Defaults to
	// `<output_directory>.<raw|qcow2|vhd>`.
	OutputImage string `mapstructure:"output_image"`
	// The disk's virtual size with a disk format: `auto` (the default: the
	// tree plus a quarter and 1 GiB, in steps of 256 MiB) or a whole
	// number of MiB or GiB such as `3072M` or `8G`, at least `1282M` (the
	// EFI system partition, the partition tables and 1 GiB of root).
	DiskSize string `mapstructure:"disk_size"`
	// Kernel command line of the disk's boot entries, after
	// `root=PARTUUID=<root> rw`. Defaults to a console on the screen and
	// on the first serial port: `console=tty0 console=ttyS0,115200n8`.
	KernelCmdline string `mapstructure:"kernel_cmdline"`

	diskBytes int64

	// mirrorOrigin says where Mirror came from, for the build log.
	mirrorOrigin string
	// securityOrigin says where SecurityMirror came from, or why there is
	// none, for the build log.
	securityOrigin string
	ctx            interpolate.Context
}

// host is what validation needs to know about the machine it runs on, so
// that tests can describe another one.
type host struct {
	euid     int
	arch     string // Debian architecture name
	lookPath func(string) (string, error)
	getwd    func() (string, error)
	getenv   func(string) string
	aptDir   string // normally /etc/apt
}

func realHost() host {
	return host{
		euid:     os.Geteuid(),
		arch:     debianArch(runtime.GOARCH),
		lookPath: exec.LookPath,
		getwd:    os.Getwd,
		getenv:   os.Getenv,
		aptDir:   aptsource.Dir,
	}
}

// debianArch maps a Go architecture to Debian's name for it. The plugin
// runs on the build host, so its GOARCH is the host's.
func debianArch(goarch string) string {
	switch goarch {
	case "386":
		return "i386"
	case "arm":
		return "armhf"
	case "ppc64le":
		return "ppc64el"
	case "mips64le":
		return "mips64el"
	case "loong64":
		return "loong64"
	}
	return goarch
}

const defaultCacheDir = "/var/cache/podvm-rootfs"

var (
	// Debian suite and codename names; also safe in a file name.
	suiteRE = regexp.MustCompile(`^[a-z][a-z0-9.-]*$`)
	// Debian policy 5.6.7: lower case, digits, + - . ; at least two long.
	packageRE   = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+$`)
	componentRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)
	archRE      = regexp.MustCompile(`^[a-z0-9]+$`)
)

var (
	sourceTypes     = []string{sourceDebootstrap, sourceTarball, sourceDirectory}
	variants        = []string{"minbase", "buildd"}
	inputTarballs   = []string{".tar", ".tar.gz", ".tgz", ".tar.zst"}
	outputTarballs  = []string{".tar.zst", ".tar.gz"}
	debootstrapOnly = []string{"suite", "mirror", "variant", "components", "include", "keyring", "security_mirror", "apt_sources"}
)

// hostProblems says what the host lacks to run a build of c: root, and the
// tools the build calls. Prepare reports them as warnings, so that packer
// validate works unprivileged (linting templates in CI, say); Run refuses
// to start with any of them.
func (c *Config) hostProblems(h host) []string {
	var out []string
	if h.euid != 0 {
		out = append(out, "podvm-rootfs must run as root: it runs debootstrap, chroot and mount (run packer build with sudo)")
	}
	tools := []string{"chroot", "tar", "cp"}
	if c.SourceType == sourceDebootstrap {
		tools = append(tools, "debootstrap")
	}
	if c.isDisk() {
		tools = append(tools, "sfdisk", "mkfs.ext4", "mkfs.vfat", "mmd", "mcopy")
		if c.Format != formatRaw {
			tools = append(tools, "qemu-img")
		}
	}
	for _, tool := range tools {
		if _, err := h.lookPath(tool); err != nil {
			hint := ""
			if h, ok := toolPackages[tool]; ok {
				hint = "; install the " + h + " package"
			}
			out = append(out, fmt.Sprintf("%s not found in PATH: the podvm-rootfs builder needs it%s", tool, hint))
		}
	}
	return out
}

// Prepare decodes raws into c, fills in defaults and validates every
// setting, reporting all problems at once.
func (c *Config) Prepare(h host, raws ...interface{}) error {
	err := config.Decode(c, &config.DecodeOpts{
		PluginType:         "podvm-rootfs",
		Interpolate:        true,
		InterpolateContext: &c.ctx,
	}, raws...)
	if err != nil {
		return err
	}
	// Defaults come after Decode: with HCL2 input Decode zeroes the struct.
	var errs *packersdk.MultiError
	appendErr := func(format string, a ...any) {
		errs = packersdk.MultiErrorAppend(errs, fmt.Errorf(format, a...))
	}
	// Control characters and lengths come first, as the values were given.
	// A setting refused there is not judged again below: every later
	// check would only repeat the complaint in other words.
	refused := c.checkText(appendErr)
	add := func(format string, a ...any) {
		err := fmt.Errorf(format, a...)
		if key, _, ok := strings.Cut(err.Error(), ":"); ok && refused[key] {
			return
		}
		errs = packersdk.MultiErrorAppend(errs, err)
	}

	if c.SourceType == "" {
		c.SourceType = sourceDebootstrap
	}
	switch c.SourceType {
	case sourceDebootstrap:
		c.prepareDebootstrap(h, add)
	case sourceTarball, sourceDirectory:
		c.prepareExisting(add)
		c.AptSources = config.TriFalse
		if c.Upgrade != config.TriTrue {
			c.Upgrade = config.TriFalse
		}
	default:
		add("source_type: %q is not a source type; use one of %s", c.SourceType, quoteList(sourceTypes))
	}

	c.prepareCache(h, add)
	c.prepareBuildCache(h, add)
	c.prepareFormat(add)
	c.prepareOutput(h, add)

	if errs != nil && len(errs.Errors) > 0 {
		return errs
	}
	return nil
}

// Caps on the builder's strings. Suite, variant, architecture and format
// names are a few bytes; a component or package name is short; a URL may
// be long but not beyond what a proxy or a log line takes. The kernel
// takes a command line of at most 2047 bytes on amd64 and arm64
// (COMMAND_LINE_SIZE), of which the builder's "root=PARTUUID=<uuid> rw "
// takes 54.
const (
	maxName       = 64
	maxPackage    = 128
	maxURL        = 2048
	maxCmdline    = 2047 - len("root=PARTUUID=00000000-0000-0000-0000-000000000000 rw ")
	maxComponents = 64
	maxInclude    = 1000
)

// checkText refuses control characters and absurd lengths in every string
// setting, with inputcheck's rules, through add; it returns the settings
// it refused.
func (c *Config) checkText(add func(string, ...any)) map[string]bool {
	refused := map[string]bool{}
	check := func(key, v string, err error) {
		if err != nil {
			add("%s: %s: %v", key, quoteShort(v), err)
			refused[key] = true
		}
	}
	for _, s := range []struct {
		key, v string
		max    int
	}{
		{"source_type", c.SourceType, maxName},
		{"suite", c.Suite, maxName},
		{"variant", c.Variant, maxName},
		{"arch", c.Arch, maxName},
		{"format", c.Format, maxName},
		{"disk_size", c.DiskSize, maxName},
		{"mirror", c.Mirror, maxURL},
		{"security_mirror", c.SecurityMirror, maxURL},
		{"kernel_cmdline", c.KernelCmdline, maxCmdline},
	} {
		if s.v != "" {
			check(s.key, s.v, inputcheck.Text(s.v, s.max))
		}
	}
	for _, s := range []struct{ key, v string }{
		{"source_path", c.SourcePath},
		{"keyring", c.Keyring},
		{"cache_dir", c.CacheDir},
		{"build_cache_dir", c.BuildCacheDir},
		{"output_directory", c.OutputDirectory},
		{"output_tarball", c.OutputTarball},
		{"output_image", c.OutputImage},
	} {
		if s.v != "" {
			check(s.key, s.v, inputcheck.HostPath(s.v))
		}
	}
	for _, l := range []struct {
		key         string
		v           []string
		max, maxLen int
	}{
		{"components", c.Components, maxComponents, maxName},
		{"include", c.Include, maxInclude, maxPackage},
	} {
		if len(l.v) > l.max {
			add("%s: %d entries, more than the %d allowed", l.key, len(l.v), l.max)
			refused[l.key] = true
			continue
		}
		for _, v := range l.v {
			check(l.key, v, inputcheck.Text(v, l.maxLen))
		}
	}
	return refused
}

// quoteShort quotes v for a message, cut short when it is long: an error
// must not repeat a value of many kilobytes.
func quoteShort(v string) string {
	const show = 64
	if len(v) <= show+16 {
		return fmt.Sprintf("%q", v)
	}
	return fmt.Sprintf("%q... (%d bytes)", v[:show], len(v))
}

func (c *Config) prepareDebootstrap(h host, add func(string, ...any)) {
	if c.SourcePath != "" {
		add("source_path: %q is only used with source_type %q or %q, not %q", c.SourcePath, sourceTarball, sourceDirectory, sourceDebootstrap)
	}
	switch {
	case c.Suite == "":
		add("suite: required with source_type %q; set a Debian suite or codename such as \"trixie\"", sourceDebootstrap)
	case !suiteRE.MatchString(c.Suite):
		add("suite: %q is not a suite name; use lower-case letters, digits, '.' and '-', such as \"trixie\"", c.Suite)
	}

	// The host's apt sources, read at most once per Prepare.
	hostSources := sync.OnceValue(func() []aptsource.Source { return aptsource.Read(h.aptDir) })
	if m, err := aptsource.Pick(h.aptDir, "debian", c.Suite, aptsource.Setting{Name: "mirror", Value: c.Mirror, Set: c.Mirror != ""}, false, hostSources); err != nil {
		add("%v", err)
	} else {
		c.Mirror, c.mirrorOrigin = m.URL, m.Origin
		if c.Mirror == "" {
			c.mirrorOrigin = "debootstrap's default (no Debian archive found in " + h.aptDir + ")"
		}
	}

	if c.Variant != "" && !slices.Contains(variants, c.Variant) {
		add("variant: %q is not a debootstrap variant this builder supports; use %s, or leave it empty for debootstrap's default", c.Variant, quoteList(variants))
	}

	if len(c.Components) == 0 {
		c.Components = []string{"main"}
	}
	checkNames("components", c.Components, componentRE, "a component name (lower-case letters, digits and '-', such as \"non-free-firmware\")", add)
	checkNames("include", c.Include, packageRE, "a Debian package name (lower-case letters, digits, '+', '-' and '.')", add)

	if c.Keyring != "" {
		if fi, err := os.Stat(c.Keyring); err != nil {
			add("keyring: %q: %v", c.Keyring, errors.Unwrap(err))
		} else if !fi.Mode().IsRegular() {
			add("keyring: %q is not a regular file; give an OpenPGP keyring file", c.Keyring)
		}
	}

	if c.Arch == "" {
		c.Arch = h.arch
	}
	allowed := []string{h.arch}
	if h.arch == "amd64" {
		// An amd64 kernel runs i386 binaries natively: no emulation needed.
		allowed = append(allowed, "i386")
	}
	if !archRE.MatchString(c.Arch) || !slices.Contains(allowed, c.Arch) {
		add("arch: %q cannot be built on this %s host; use %s (building for other architectures needs emulation, which this builder does not set up)", c.Arch, h.arch, quoteList(allowed))
	}

	if c.AptSources == config.TriUnset {
		c.AptSources = config.TriTrue
	}
	if c.Upgrade == config.TriUnset {
		c.Upgrade = config.TriTrue
	}
	c.prepareSecurity(h.aptDir, hostSources, add)
}

// prepareSecurity validates security_mirror, or finds the host's security
// archive, for the security stanza of the image's apt sources.
func (c *Config) prepareSecurity(aptDir string, hostSources func() []aptsource.Source, add func(string, ...any)) {
	if c.SecurityMirror != "" {
		m, err := aptsource.Pick(aptDir, "debian", c.Suite, aptsource.Setting{Name: "security_mirror", Value: c.SecurityMirror, Set: true}, true, hostSources)
		if err != nil {
			add("%v", err)
		} else {
			c.SecurityMirror, c.securityOrigin = m.URL, m.Origin
		}
		switch {
		case !c.AptSources.True():
			add("security_mirror: only used with apt_sources = true; the tree keeps debootstrap's sources.list")
		case c.Suite != "" && aptsource.SecuritySuite(c.Suite) == "":
			add("security_mirror: suite %q has no security suite; remove security_mirror", c.Suite)
		}
		return
	}
	if !c.AptSources.True() || aptsource.SecuritySuite(c.Suite) == "" {
		return
	}
	m, _ := aptsource.Pick(aptDir, "debian", c.Suite, aptsource.Setting{Name: "security_mirror"}, true, hostSources)
	c.SecurityMirror, c.securityOrigin = m.URL, m.Origin
	if c.SecurityMirror == "" {
		c.securityOrigin = "no Debian security archive was found in the host's apt sources (" + aptDir + ")"
	}
}

// warnings are settings that work but that a user should know about;
// Prepare returns them and the build log repeats them.
func (c *Config) warnings() []string {
	if c.SourceType == sourceDebootstrap && c.AptSources.True() && c.SecurityMirror == "" && aptsource.SecuritySuite(c.Suite) != "" {
		return []string{fmt.Sprintf("the image gets no security updates: %s, and security_mirror is not set, so its apt sources have no %s suite", c.securityOrigin, aptsource.SecuritySuite(c.Suite))}
	}
	return nil
}

func (c *Config) prepareExisting(add func(string, ...any)) {
	for _, key := range debootstrapOnly {
		if c.isSet(key) {
			add("%s: only used with source_type %q, not %q", key, sourceDebootstrap, c.SourceType)
		}
	}
	if c.SourcePath == "" {
		add("source_path: required with source_type %q", c.SourceType)
		return
	}
	abs, err := filepath.Abs(c.SourcePath)
	if err != nil {
		add("source_path: %q: %v", c.SourcePath, err)
		return
	}
	c.SourcePath = abs
	fi, err := os.Stat(abs)
	if err != nil {
		add("source_path: %q: %v", c.SourcePath, errors.Unwrap(err))
		return
	}
	switch c.SourceType {
	case sourceTarball:
		if !fi.Mode().IsRegular() {
			add("source_path: %q is not a regular file; source_type %q needs a tarball", c.SourcePath, sourceTarball)
		} else if tarSuffix(abs, inputTarballs) == "" {
			add("source_path: %q is not a tarball this builder reads; use a file ending in %s", c.SourcePath, quoteList(inputTarballs))
		}
	case sourceDirectory:
		if !fi.IsDir() {
			add("source_path: %q is not a directory; source_type %q needs one", c.SourcePath, sourceDirectory)
		}
	}
}

func (c *Config) isSet(key string) bool {
	switch key {
	case "suite":
		return c.Suite != ""
	case "mirror":
		return c.Mirror != ""
	case "variant":
		return c.Variant != ""
	case "components":
		return len(c.Components) > 0
	case "include":
		return len(c.Include) > 0
	case "keyring":
		return c.Keyring != ""
	case "security_mirror":
		return c.SecurityMirror != ""
	case "apt_sources":
		// apt_sources = false asks for what a tarball or directory gets anyway.
		return c.AptSources.True()
	}
	return false
}

func (c *Config) prepareCache(h host, add func(string, ...any)) {
	if c.CacheDir == "" {
		if env := h.getenv("PODVM_CACHE"); env != "" {
			if err := inputcheck.HostPath(env); err != nil {
				add("cache_dir: PODVM_CACHE=%s: %v", quoteShort(env), err)
				return
			}
			c.CacheDir = filepath.Join(env, "rootfs")
		} else {
			c.CacheDir = defaultCacheDir
		}
	}
	abs, err := filepath.Abs(c.CacheDir)
	if err != nil {
		add("cache_dir: %q: %v", c.CacheDir, err)
		return
	}
	c.CacheDir = abs
	if c.SourceType != sourceDebootstrap || c.SkipCache {
		// The cache is never read nor written: only its shape matters.
		if fi, err := os.Stat(abs); err == nil && !fi.IsDir() {
			add("cache_dir: %q exists and is not a directory", c.CacheDir)
		}
		return
	}
	// Whoever can write the cache chooses the root of every later image
	// built from it: the build caches' owner and mode rules apply. A
	// missing directory is made by the build, as root, with mode 0755.
	fi, err := os.Lstat(abs)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		add("cache_dir: %q: %v", c.CacheDir, err)
	case !fi.IsDir() && fi.Mode()&fs.ModeSymlink == 0:
		add("cache_dir: %q exists and is not a directory", c.CacheDir)
	default:
		if err := cachedir.Check(fi, true); err != nil {
			add("cache_dir: %q: %v", c.CacheDir, err)
		}
	}
}

// prepareBuildCache fills the build cache settings from their environment
// variables, as the provisioner and the generator do, and checks them with
// the same parsers (cachedir). The directory's owner and mode are checked
// when the cache is opened: a cache that fails them is skipped, not fatal.
func (c *Config) prepareBuildCache(h host, add func(string, ...any)) {
	for _, s := range []struct {
		v   *string
		env string
	}{
		{&c.BuildCache, cachedir.EnvMode},
		{&c.BuildCacheDir, cachedir.EnvDir},
		{&c.BuildCacheMaxSize, cachedir.EnvMaxSize},
	} {
		if *s.v == "" {
			*s.v = h.getenv(s.env)
		}
	}
	mode, err := cachedir.ParseMode(c.BuildCache)
	if err != nil {
		add("%v", err)
	}
	c.BuildCache = mode
	if c.buildCacheMax, err = cachedir.ParseMaxSize(c.BuildCacheMaxSize); err != nil {
		add("%v", err)
	}
	if c.BuildCacheDir != "" {
		if err := inputcheck.HostPath(c.BuildCacheDir); err != nil {
			add("build_cache_dir: %s: %v", quoteShort(c.BuildCacheDir), err)
		}
	}
}

// toolPackages names the Debian package of each host tool a build may need.
var toolPackages = map[string]string{
	"debootstrap": "debootstrap",
	"sfdisk":      "fdisk",
	"mkfs.ext4":   "e2fsprogs",
	"mkfs.vfat":   "dosfstools",
	"mmd":         "mtools",
	"mcopy":       "mtools",
	"qemu-img":    "qemu-utils",
}

func (c *Config) isDisk() bool { return slices.Contains(diskFormats, c.Format) }

// prepareFormat checks format and the disk settings; output names are
// filled in by prepareOutput, which knows the output directory.
func (c *Config) prepareFormat(add func(string, ...any)) {
	if c.Format == "" {
		c.Format = formatDirectory
	}
	if !slices.Contains(formats, c.Format) {
		add("format: %q is not an output format; use one of %s", c.Format, quoteList(formats))
		return
	}
	if !c.isDisk() {
		for key, v := range map[string]string{"output_image": c.OutputImage, "disk_size": c.DiskSize, "kernel_cmdline": c.KernelCmdline} {
			if v != "" {
				add("%s: only used with format %s, not %q", key, quoteList(diskFormats), c.Format)
			}
		}
		return
	}
	n, err := parseDiskSize(c.DiskSize)
	if err != nil {
		add("disk_size: %q %v", c.DiskSize, err)
	} else if n != 0 && n < minDiskSize {
		add("disk_size: %q is below the minimum of %dM (an EFI system partition of %dM, %dM for the partition tables and at least %dM of root file system); use \"auto\" or at least %dM",
			c.DiskSize, minDiskSize/mib, espSize/mib, 2*mib/mib, gib/mib, minDiskSize/mib)
	}
	c.diskBytes = n
	if c.KernelCmdline == "" {
		c.KernelCmdline = distro.KernelCmdline
	}
	// Control characters, a second line among them, were refused by
	// checkText.
	if hasRootOption(c.KernelCmdline) {
		add("kernel_cmdline: %q sets root=; the builder sets root=PARTUUID=<root partition> itself, remove it", c.KernelCmdline)
	}
}

func hasRootOption(cmdline string) bool {
	for _, f := range strings.Fields(cmdline) {
		if strings.HasPrefix(f, "root=") {
			return true
		}
	}
	return false
}

func (c *Config) prepareOutput(h host, add func(string, ...any)) {
	if c.OutputDirectory == "" {
		c.OutputDirectory = "output-" + c.PackerBuildName
	}
	abs, err := filepath.Abs(c.OutputDirectory)
	if err != nil {
		add("output_directory: %q: %v", c.OutputDirectory, err)
		return
	}
	out := abs
	c.OutputDirectory = abs
	// The directory is removed when a build fails or runs with -force, so it
	// must not hold anything else of value.
	if out == "/" {
		add("output_directory: %q is the host's root; use a directory of its own", out)
	} else if err := checkOutputDir(out, h.getenv("HOME")); err != nil {
		add("output_directory: %q: %v", out, err)
	}
	if wd, err := h.getwd(); err == nil && within(wd, out) {
		add("output_directory: %q contains the current directory %q, which a failed build would delete; use a directory of its own", out, wd)
	}
	if c.SourceType == sourceDirectory && c.SourcePath != "" && (within(c.SourcePath, out) || within(out, c.SourcePath)) {
		add("output_directory: %q overlaps source_path %q; they must be separate trees", out, c.SourcePath)
	}
	if c.SourceType == sourceTarball && within(c.SourcePath, out) {
		add("source_path: %q is inside output_directory %q, which the build replaces", c.SourcePath, out)
	}
	if within(c.CacheDir, out) || within(out, c.CacheDir) {
		add("output_directory: %q overlaps cache_dir %q; they must be separate", out, c.CacheDir)
	}
	if c.isDisk() {
		c.prepareImage(out, add)
	}
	if c.Format == formatTar && c.OutputTarball == "" {
		c.OutputTarball = out + ".tar.zst"
	}
	if c.OutputTarball == "" {
		return
	}
	tb, err := filepath.Abs(c.OutputTarball)
	if err != nil {
		add("output_tarball: %q: %v", c.OutputTarball, err)
		return
	}
	c.OutputTarball = tb
	if tarSuffix(tb, outputTarballs) == "" {
		add("output_tarball: %q has no supported extension; use a name ending in %s", c.OutputTarball, quoteList(outputTarballs))
	}
	if within(tb, out) {
		add("output_tarball: %q is inside output_directory %q; it would pack itself", tb, out)
	}
	if fi, err := os.Stat(tb); err == nil && fi.IsDir() {
		add("output_tarball: %q is a directory; give a file name", tb)
	} else if err := checkOutputFile(tb); err != nil {
		add("output_tarball: %q: %v", tb, err)
	}
}

func (c *Config) prepareImage(out string, add func(string, ...any)) {
	if c.OutputImage == "" {
		c.OutputImage = out + "." + c.Format
	}
	img, err := filepath.Abs(c.OutputImage)
	if err != nil {
		add("output_image: %q: %v", c.OutputImage, err)
		return
	}
	c.OutputImage = img
	if within(img, out) {
		add("output_image: %q is inside output_directory %q; it would be packed into itself", img, out)
	}
	if fi, err := os.Stat(img); err == nil && fi.IsDir() {
		add("output_image: %q is a directory; give a file name", img)
	} else if fi, err := os.Stat(filepath.Dir(img)); err == nil && !fi.IsDir() {
		add("output_image: %q: %q is not a directory", img, filepath.Dir(img))
	} else if err := checkOutputFile(img); err != nil {
		add("output_image: %q: %v", img, err)
	}
}

// hostVolatileRoots hold device nodes, kernel interfaces and runtime
// state. An output there would be staged in a tmpfs or a kernel file
// system and renamed over what the host uses: with -force, output_image
// /dev/sda would replace the disk's device node.
var hostVolatileRoots = []string{"/dev", "/proc", "/sys", "/run", "/var/run", "/var/lock"}

// containerRoots hold the trees of containers and machines that run on
// the host. -force, and a failed build, kill every process whose root
// lies below output_directory before removing it: below one of these it
// would kill the host's containers and delete their trees.
var containerRoots = []string{
	"/var/lib/docker", "/var/lib/containers", "/var/lib/containerd", "/var/lib/machines",
	"/var/lib/lxc", "/var/lib/lxd", "/var/lib/incus", "/var/lib/kubelet", "/var/lib/rancher",
	"/var/lib/schroot", "/var/snap",
}

const outputAllowed = "a directory of the build's own, such as /var/lib/podvm/rootfs or /srv/build/rootfs"

// hostSystemTrees hold the host's own system: the build's outputs may lie
// nowhere below them, as -force removes an output directory (after killing
// what runs there) and renames a new image or tarball over an output file.
// /usr/local is the host's administrator's, not the distribution's.
var hostSystemTrees = []string{
	"/etc", "/usr", "/boot", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
	"/var/lib/dpkg", "/var/lib/apt", "/var/lib/systemd", "/var/cache/apt", "/var/log",
}

// systemTree returns the host system tree that p (clean, absolute) is or
// lies below, or "".
func systemTree(p string) string {
	if within(p, "/usr/local") && p != "/usr/local" {
		return ""
	}
	return belowAny(p, hostSystemTrees)
}

// checkOutputDir says why out, a clean absolute path other than /, may not
// be output_directory, or nil. Both out and the path it resolves to are
// checked, so a link cannot lead the build's removal into a system
// directory. home is the user's home directory, or "".
func checkOutputDir(out, home string) error {
	if err := inputcheck.HostDir(out); err != nil {
		return err
	}
	real, err := resolveExisting(out)
	if err != nil {
		return fmt.Errorf("cannot be resolved: %w", err)
	}
	for _, p := range []string{out, real} {
		what := ""
		if p != out {
			what = fmt.Sprintf("resolves to %q, ", p)
		}
		if p == "/" {
			return fmt.Errorf("%sthe host's root; allowed: %s", what, outputAllowed)
		}
		if r := belowAny(p, hostVolatileRoots); r != "" {
			return fmt.Errorf("%sin %s, which holds the host's devices, kernel interfaces or runtime state; allowed: %s", what, r, outputAllowed)
		}
		if inputcheck.IsSystemDir(p) {
			return fmt.Errorf("%sa system directory: a failed build, or -force, removes output_directory and kills every process whose root lies below it; allowed: %s", what, outputAllowed)
		}
		if r := systemTree(p); r != "" {
			return fmt.Errorf("%sin %s, the host's own system: a failed build, or -force, removes output_directory and kills every process whose root lies below it; allowed: %s", what, r, outputAllowed)
		}
		if filepath.Dir(p) == "/home" {
			return fmt.Errorf("%sa user's home directory, which a failed build, or -force, would remove; allowed: %s", what, outputAllowed)
		}
		if home != "" && home != "/" && within(filepath.Clean(home), p) {
			return fmt.Errorf("%sthe home directory %s or above it, which a failed build, or -force, would remove; allowed: %s", what, home, outputAllowed)
		}
		for _, c := range containerRoots {
			if within(p, c) || within(c, p) {
				return fmt.Errorf("%sin %s, where the host's containers live: a failed build, or -force, kills every process whose root lies below output_directory; allowed: %s", what, c, outputAllowed)
			}
		}
	}
	return nil
}

// checkOutputFile says why file, a clean absolute path, may not be an
// output file, or nil. The file is staged beside its final name and
// renamed over it, so neither the file nor its directory may be in
// /dev, /proc, /sys or /run, also by way of a link; and a file that
// exists must be a regular one, never a device or a pipe.
func checkOutputFile(file string) error {
	const allowed = "a regular file, or a new name, outside /dev, /proc, /sys, /run and the host's system trees (/etc, /usr, /boot, ...)"
	if err := inputcheck.HostPath(file); err != nil {
		return err
	}
	if fi, err := os.Stat(file); err == nil && !fi.Mode().IsRegular() {
		return fmt.Errorf("an existing %s; allowed: %s", inputcheck.FileKind(fi.Mode()), allowed)
	}
	realDir, err := resolveExisting(filepath.Dir(file))
	if err != nil {
		return fmt.Errorf("cannot be resolved: %w", err)
	}
	for _, p := range []string{file, filepath.Join(realDir, filepath.Base(file))} {
		if r := belowAny(p, hostVolatileRoots); r != "" {
			return fmt.Errorf("in %s, which holds the host's devices, kernel interfaces or runtime state; allowed: %s", r, allowed)
		}
		if r := systemTree(p); r != "" {
			return fmt.Errorf("in %s, the host's own system, where -force would rename the output over a file; allowed: %s", r, allowed)
		}
	}
	return nil
}

// resolveExisting resolves the links of the longest existing ancestor of
// p (p itself included) and appends the rest: where p lies, or would lie
// once created.
func resolveExisting(p string) (string, error) {
	rest := ""
	for cur := p; ; cur = filepath.Dir(cur) {
		if _, err := os.Lstat(cur); err == nil {
			real, err := filepath.EvalSymlinks(cur)
			if err != nil {
				return "", err
			}
			return filepath.Join(real, rest), nil
		}
		if cur == "/" {
			return p, nil
		}
		rest = filepath.Join(filepath.Base(cur), rest)
	}
}

func belowAny(p string, roots []string) string {
	for _, r := range roots {
		if within(p, r) {
			return r
		}
	}
	return ""
}

// checkNames validates a list setting: each entry must match re, and no
// entry may repeat.
func checkNames(key string, names []string, re *regexp.Regexp, what string, add func(string, ...any)) {
	seen := map[string]bool{}
	for _, n := range names {
		switch {
		case !re.MatchString(n):
			add("%s: %q is not %s", key, n, what)
		case seen[n]:
			add("%s: %q is listed twice", key, n)
		}
		seen[n] = true
	}
}

// within reports whether path is dir or lies below it. Both are absolute
// and clean.
func within(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, strings.TrimSuffix(dir, "/")+"/")
}

// tarSuffix returns the suffix of name found in suffixes, or "".
func tarSuffix(name string, suffixes []string) string {
	for _, s := range suffixes {
		if strings.HasSuffix(name, s) {
			return s
		}
	}
	return ""
}

func quoteList(items []string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = fmt.Sprintf("%q", s)
	}
	if len(q) == 1 {
		return q[0]
	}
	return strings.Join(q[:len(q)-1], ", ") + " or " + q[len(q)-1]
}
