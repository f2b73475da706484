package gpustack

import (
	_ "embed"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/podvm-gpu/packer-plugin-podvm/aptsource"
	"github.com/podvm-gpu/packer-plugin-podvm/settings"
	"github.com/podvm-gpu/packer-plugin-podvm/shellquote"
)

// Plan is the ordered, declarative list of steps that makes an image
// GPU-ready. It is pure data: the Packer provisioner executes it through a
// communicator, the mkosi generator renders it as files.
type Plan struct {
	Target Target
	// Idle says why the plan does nothing ("" when it has steps).
	Idle string
	// GPU: the plan installs the GPU stack, which a generator keeps in its
	// GPU profile; without it the plan bakes the repository at most.
	GPU bool
	// Timestamp is the instant every timestamp of the build takes: Release
	// dates, signatures, the manifest.
	Timestamp time.Time
	// SourceDateEpoch is Timestamp as the user set it (SOURCE_DATE_EPOCH),
	// which a generator passes to its build; -1 when unset.
	SourceDateEpoch int64
	// KernelSelection is the kernels setting, which a generator whose
	// kernels are resolved at build time applies then.
	KernelSelection string
	// Kernels are the image kernels the plan targets, oldest first.
	Kernels []string
	// Driver is what the plan resolved about the driver; zero when the GPU
	// stack is off.
	Driver Driver
	// ModuleSigning says how the NVIDIA modules are signed; zero when the
	// plan builds none.
	ModuleSigning ModuleSigning
	// Cache is the build host's caches the back ends use.
	Cache BuildCache
	// Toolkit is the container toolkit the plan installs; nil for none.
	Toolkit *Toolkit
	// Installed are dpkg name patterns: the installed packages they match
	// are the GPU stack the manifest lists, whichever back end built it.
	Installed []string
	// Archive are the distro archive's sources a generator installs the
	// image from (Target.Mirror); nil for an image that has its own.
	Archive []AptSource
	// Repo is the repository to bake, the same action the plan's
	// local-repo step carries; nil for none.
	Repo  *BakeRepo
	Steps []Step
	// KernelPackages are the kernel image and headers packages a generator
	// installs when the kernels are resolved at build time.
	KernelPackages []string
	// BootPackages make a generator's image boot from a disk: init, udev
	// and the EFI boot loader binaries a disk builder installs.
	BootPackages []string
	// InitrdExclude are kernel modules no initrd of the image may carry
	// (nouveau, which must not bind an NVIDIA GPU before the driver). The
	// plan's initramfs-tools hook keeps them out of the image's own; a
	// generator that builds its own initrd excludes them there.
	InitrdExclude []string
	// KernelCmdline is the kernel command line of a bootable disk: a
	// console on the screen and on the first serial port, as podvm-rootfs
	// writes it.
	KernelCmdline string
	// Notes say what the plan decided and why, for the build log.
	Notes []string
}

// Toolkit is the resolved container toolkit choice.
type Toolkit struct {
	Version  string // exact apt version, "" for the newest in the repository
	HookMode settings.HookMode
}

// ModuleSigning is the plan's module signing policy, for the manifest and
// the comparison of images.
type ModuleSigning struct {
	// Mode is the nvidia_module_signing setting for modules DKMS builds
	// (with nvidia_driver_source=auto: if the build takes DKMS), or
	// SigningDistribution for precompiled ones.
	Mode settings.SigningMode
	// Signer is modinfo's signer: the ephemeral certificate's subject; ""
	// with a user's key, whose certificate names it.
	Signer  string
	CertDER string // the certificate in the image
}

// Driver is the resolved driver choice.
type Driver struct {
	// Package is the driver package whose installed version the manifest
	// records as the driver's.
	Package string
	Branch  string // "550"
	Version string // exact version when pinned, else ""
	Flavour settings.ModuleFlavour
	Source  settings.DriverSource
	// Modules are the module names a successful install provides for each
	// targeted kernel (checked with modinfo -k), in the order the CDI unit
	// loads them, which is kata NVRC's: the core module first, then UVM,
	// then modeset where the driver has it.
	Modules []string
}

// Step is one titled unit of work; a back end shows it as [i/n] Title.
type Step struct {
	ID      string
	Title   string
	Actions []Action
}

// Action is one typed thing to do. The set is closed: back ends switch on
// the concrete type.
type Action interface {
	describe() string
}

// Key is where an apt repository's signing key comes from.
type Key struct {
	// File is a key file on the build host (armored or binary), trusted as is.
	File string
	// URL is fetched over https when File is empty; its primary key must
	// have one of Fingerprints.
	URL          string
	Fingerprints []string
	// InImage names a keyring the image already has (the distro's own).
	InImage bool
}

// AptComponents enables more components of the image's own distro archive
// (Debian's non-free, Ubuntu's restricted) for the image's suites.
type AptComponents struct {
	Components []string
	// Keyring is the distro archive keyring already in the image.
	Keyring string
}

// AptSource adds a deb822 source and its keyring (installed at Keyring).
type AptSource struct {
	Name       string // file stem: /etc/apt/sources.list.d/<Name>.sources
	URI        string
	Suites     []string
	Components []string // empty for flat repositories
	Arch       string
	Keyring    string // path in the image, referenced by Signed-By
	Key        Key
}

// SourcesPath is where the source file goes in the image.
func (a AptSource) SourcesPath() string { return "/etc/apt/sources.list.d/" + a.Name + ".sources" }

// Source is the entry as aptsource has it. An entry without a keyring
// trusts apt's global keyrings, as the image's own archive entries may.
func (a AptSource) Source() aptsource.Source {
	s := aptsource.Source{Types: []string{"deb"}, URIs: []string{a.URI}, Suites: a.Suites, Components: a.Components, SignedBy: a.Keyring}
	if a.Arch != "" {
		s.Architectures = []string{a.Arch}
	}
	return s
}

// Deb822 renders the source entry.
func (a AptSource) Deb822() string { return a.Source().Deb822() }

// AptPin writes an apt preferences file.
type AptPin struct {
	Name     string   // /etc/apt/preferences.d/<Name>
	Packages []string // names or globs
	Version  string   // apt pin version pattern, e.g. 550.163.01-*
	Priority int
}

// Path is the preferences file in the image.
func (a AptPin) Path() string { return "/etc/apt/preferences.d/" + a.Name }

// Preferences renders the preferences file.
func (a AptPin) Preferences() string {
	return fmt.Sprintf("Package: %s\nPin: version %s\nPin-Priority: %d\n", strings.Join(a.Packages, " "), a.Version, a.Priority)
}

// AptUpdate refreshes the package lists.
type AptUpdate struct{}

// Install installs packages noninteractively. Each entry is a name or
// name=version.
type Install struct {
	Packages     []string
	NoRecommends bool
}

// WriteFile writes a file with a deliberate owner and mode.
type WriteFile struct {
	Path    string
	Mode    fs.FileMode
	Owner   string // user:group
	Content string
	// BeforePackages: the file must be in place before any package of
	// the plan is installed (a generator puts it in its skeleton tree).
	BeforePackages bool
}

// EnableUnits enables systemd units.
type EnableUnits struct{ Units []string }

// BuildModules builds out-of-tree modules for each kernel with DKMS, or
// restores an earlier build of the same inputs from the build host's
// module cache. The modules are left unsigned.
// BuildModules goes through the plan's BuildCache.
type BuildModules struct{ Kernels []string }

// BuildCache is the build host's caches: DKMS builds (modules/) and
// downloaded .debs (debs/), in one directory.
type BuildCache struct {
	// Mode: "auto" (where the build host holds the image), "yes" or "no".
	Mode string
	// Dir is the cache directory; "" for $PODVM_CACHE or the user's.
	Dir     string
	MaxSize int64 // bytes, each cache; 0 for no bound
}

// CheckModules asserts that each module exists for each kernel.
type CheckModules struct {
	Kernels []string
	Modules []string
}

// Command is the check's shell command, the same text for every back end;
// the kernels follow it as arguments.
func (a CheckModules) Command() string {
	return "sh -c " + shellquote.Quote(checkModulesScript) + " podvm-check-modules " + shellquote.Join(a.Modules...) + " --"
}

//go:embed scripts/check-modules.sh
var checkModulesScript string

// SignModules signs every NVIDIA module of each kernel with a key made for
// this build in /run, a tmpfs that never becomes part of the image's disk,
// and removed when the command ends; the certificate stays in the image at
// CertDER and CertPEM. Verify checks the signatures instead.
//
// With Key, the user's key and certificate sign instead: the back end
// pipes them into the command (ModuleKey.Stdin), so they reach the tmpfs
// and never a file of the image.
type SignModules struct {
	Kernels []string
	// Subject is the certificate's CN, modinfo's signer; "" reads the
	// signer from the certificate (the issuer's CN).
	Subject          string
	CertDER, CertPEM string
	Key              *ModuleKey
	Verify           bool
}

// ModuleKey is a module signing key and its certificate on the build host.
type ModuleKey struct {
	File, Cert    string
	PassphraseEnv string
}

// Command is the shell command that signs (or verifies), the same text
// for every back end; the kernels follow it as arguments.
func (a SignModules) Command() string {
	mode := "sign"
	switch {
	case a.Verify:
		mode = "verify"
	case a.Key != nil:
		mode = "sign-key"
	}
	return "sh -c " + shellquote.Quote(signModulesScript) + " podvm-sign-modules " + shellquote.Quote(mode) + " " + shellquote.Quote(a.Subject) + " " + shellquote.Quote(a.CertDER) + " " + shellquote.Quote(a.CertPEM)
}

// HoldPackages holds the installed packages that Packages match (names or
// dpkg globs; {kernel} stands for each targeted kernel), so that an apt
// upgrade on a node keeps the kernel, the driver and the toolkit that the
// image's modules and local repository were built for.
type HoldPackages struct {
	Kernels  []string
	Packages []string
}

// Command is the shell command that holds, the same text for every back
// end; the kernels follow it as arguments.
func (a HoldPackages) Command() string {
	return "sh -c " + shellquote.Quote(holdScript) + " podvm-hold " + shellquote.Join(a.Packages...) + " --"
}

// CheckDriverVersion fails when the driver's user-space libraries are not
// the version of its kernel module for each kernel: the "Driver/library
// version mismatch" that stops every CUDA program at run time.
type CheckDriverVersion struct {
	Kernels []string
	Module  string // the module whose version modinfo reports
}

// Command is the check's shell command, the same text for every back end;
// the kernels follow it as arguments.
func (a CheckDriverVersion) Command() string {
	return "sh -c " + shellquote.Quote(driverVersionScript) + " podvm-driver-version " + shellquote.Quote(a.Module)
}

// UpdateInitramfs regenerates the initramfs of each kernel, where the image
// has an initramfs generator, after ending a DeferInitramfs.
type UpdateInitramfs struct{ Kernels []string }

// DeferInitramfs turns initramfs-tools' updates off until UpdateInitramfs:
// update_initramfs=no in its configuration, whose original is kept beside
// it and put back byte for byte (it is a dpkg conffile). A build that
// fails in between leaves it off, in an image nobody ships.
type DeferInitramfs struct{}

// initramfsConf is initramfs-tools' configuration; the original waits in
// initramfsConf + ".podvm-saved" while updates are deferred.
const initramfsConf = "/etc/initramfs-tools/update-initramfs.conf"

// Command defers; a rerun after a failed build keeps the saved original.
func (DeferInitramfs) Command() string {
	c := shellquote.Quote(initramfsConf)
	return `c=` + c + `; if [ -f "$c" ] && [ ! -e "$c.podvm-saved" ]; then cp -p "$c" "$c.podvm-saved" && ` +
		`{ grep -v '^update_initramfs=' "$c.podvm-saved"; echo update_initramfs=no; } >"$c" && echo "initramfs updates deferred"; ` +
		`else echo "no initramfs-tools configuration to defer, or deferred already"; fi`
}

// Command ends a DeferInitramfs, then regenerates each kernel's initramfs
// that exists; the same text for every back end.
func (a UpdateInitramfs) Command() string {
	return "sh -c " + shellquote.Quote(updateInitramfsScript) + " podvm-update-initramfs " + shellquote.Quote(initramfsConf) + " " + shellquote.Join(a.Kernels...)
}

//go:embed scripts/update-initramfs.sh
var updateInitramfsScript string

// ToolkitConfig sets keys in the container toolkit's TOML config with the
// toolkit's own editor (nvidia-ctk config), never by text substitution.
type ToolkitConfig struct {
	Path     string
	Settings []KV
}

// KV is one key=value setting.
type KV struct{ Key, Value string }

// BakeRepo downloads Packages (and, with Closure, their dependency closure
// for a consumer with an empty dpkg status) into Dir in the image, indexes
// and signs them on the build host, and writes the public keyring to Keyring.
type BakeRepo struct {
	Dir         string
	Kernels     []string
	Packages    []string
	Closure     bool
	Keyring     string
	SourcesFile bool // also write SourcesPath in the image
	SigningKey  string
	Passphrase  string // environment variable name
	// AllDigests adds MD5, SHA1 and SHA512 to the index (apt needs SHA256).
	AllDigests bool   `json:",omitempty"`
	OutputDir  string // host-side artifacts
	// ExposePath is where the repository is bound read-only at boot for the
	// GPU Operator's driver container ("" for nowhere); the ConfigMap's
	// sources point there.
	ExposePath string
	// ModuleCert is the module signing certificate (DER) in the image, which
	// the bake copies beside the image and records in the manifest; "" when
	// the modules are not signed by the build.
	ModuleCert string
	// Operator is what the GPU Operator objects written beside the image
	// name: its namespace and driver container.
	Operator GPUOperator
}

// SourcesPath is the in-image sources file when SourcesFile is set.
func (b BakeRepo) SourcesPath() string { return "/etc/apt/sources.list.d/local-packages.sources" }

// VerifyRepo runs an offline apt self-test with the baked repository as its
// only source: update, then simulate installing Packages.
type VerifyRepo struct {
	Dir      string
	Keyring  string
	Packages []string
	// Closure: the repository holds every dependency, so the self-test runs
	// against an empty dpkg status. Without it the image's own status
	// supplies what the repository leaves out.
	Closure bool
}

// VerifyExecutable asserts that files exist and are executable.
type VerifyExecutable struct{ Paths []string }

// Mode constants for files the plan writes.
const (
	modeFile   fs.FileMode = 0o644
	modeScript fs.FileMode = 0o755
)

func (a AptComponents) describe() string {
	return fmt.Sprintf("enable components %s of the image's archive (keyring %s)", strings.Join(a.Components, " "), a.Keyring)
}

func (a AptSource) describe() string {
	var key string
	switch {
	case a.Key.File != "":
		key = "key file " + a.Key.File
	case a.Key.InImage:
		key = "keyring already in the image"
	default:
		key = fmt.Sprintf("key %s (fingerprint %s)", a.Key.URL, strings.Join(a.Key.Fingerprints, " or "))
	}
	return fmt.Sprintf("apt source %s, %s, keyring %s\n%s", a.SourcesPath(), key, a.Keyring, indent(a.Deb822()))
}

func (a AptPin) describe() string {
	return fmt.Sprintf("apt pin %s\n%s", a.Path(), indent(a.Preferences()))
}

func (AptUpdate) describe() string { return "apt-get update" }

func (a Install) describe() string {
	s := "apt-get install " + strings.Join(a.Packages, " ")
	if a.NoRecommends {
		s += " (no recommends)"
	}
	return s
}

func (a WriteFile) describe() string {
	early := ""
	if a.BeforePackages {
		early = ", before any package"
	}
	return fmt.Sprintf("write %s (%s %04o%s)\n%s", a.Path, a.Owner, a.Mode, early, indent(a.Content))
}

func (a EnableUnits) describe() string { return "enable units " + strings.Join(a.Units, " ") }

func (a BuildModules) describe() string {
	return "dkms build and install of every DKMS module for kernels " + strings.Join(a.Kernels, " ") + " (through the build cache), then remove " + dkmsNoAutoinstall
}

func (a CheckModules) describe() string {
	return fmt.Sprintf("check modules %s for kernels %s", strings.Join(a.Modules, " "), strings.Join(a.Kernels, " "))
}

func (a SignModules) describe() string {
	if a.Verify {
		signer := fmt.Sprintf("%q", a.Subject)
		if a.Subject == "" {
			signer = "the issuer of " + a.CertDER
		}
		return fmt.Sprintf("verify that every NVIDIA module of kernels %s is signed by %s", strings.Join(a.Kernels, " "), signer)
	}
	if k := a.Key; k != nil {
		pass := ""
		if k.PassphraseEnv != "" {
			pass = " (passphrase from $" + k.PassphraseEnv + ")"
		}
		return fmt.Sprintf("sign every NVIDIA module of kernels %s with key %s%s and certificate %s, piped into /run only; certificate %s, %s", strings.Join(a.Kernels, " "), k.File, pass, k.Cert, a.CertDER, a.CertPEM)
	}
	return fmt.Sprintf("sign every NVIDIA module of kernels %s with an ephemeral key (%q, in /run only); certificate %s, %s", strings.Join(a.Kernels, " "), a.Subject, a.CertDER, a.CertPEM)
}

func (a HoldPackages) describe() string {
	return fmt.Sprintf("hold the installed packages matching %s for kernels %s (apt-mark hold)", strings.Join(a.Packages, " "), strings.Join(a.Kernels, " "))
}

func (a CheckDriverVersion) describe() string {
	return fmt.Sprintf("check that the NVIDIA user-space libraries are the version of module %s for kernels %s", a.Module, strings.Join(a.Kernels, " "))
}

func (a UpdateInitramfs) describe() string {
	return "update initramfs for kernels " + strings.Join(a.Kernels, " ") + " (ending a deferral first)"
}

func (DeferInitramfs) describe() string {
	return "defer initramfs updates: update_initramfs=no in " + initramfsConf + " until the initramfs update, the original kept beside it"
}

func (a ToolkitConfig) describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "toolkit config %s:", a.Path)
	for _, kv := range a.Settings {
		fmt.Fprintf(&b, " %s=%s", kv.Key, kv.Value)
	}
	return b.String()
}

func (a BakeRepo) describe() string {
	closure := "none"
	if a.Closure {
		closure = "full"
	}
	key := "ephemeral Ed25519 key"
	if a.SigningKey != "" {
		key = "key " + a.SigningKey
		if a.Passphrase != "" {
			key += " (passphrase from $" + a.Passphrase + ")"
		}
	}
	digests := "SHA256"
	if a.AllDigests {
		digests = "MD5, SHA1, SHA256, SHA512"
	}
	s := fmt.Sprintf("bake repo %s: packages %s; closure %s; signed with %s; digests %s; keyring %s; host artifacts in %s",
		a.Dir, strings.Join(a.Packages, " "), closure, key, digests, a.Keyring, a.OutputDir)
	if a.SourcesFile {
		s += "; sources file " + a.SourcesPath()
	}
	return s
}

func (a VerifyRepo) describe() string {
	status := "the image's dpkg status"
	if a.Closure {
		status = "an empty dpkg status"
	}
	return fmt.Sprintf("offline apt self-test of %s against %s: simulate install %s", a.Dir, status, strings.Join(a.Packages, " "))
}

func (a VerifyExecutable) describe() string { return "check executable " + strings.Join(a.Paths, " ") }

func indent(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = "      | " + l
	}
	return strings.Join(lines, "\n")
}

// Text renders the plan for people: the build log, golden tests, --dry-run.
func (p *Plan) Text() string {
	var b strings.Builder
	installed := strings.Join(p.Target.Kernels, " ")
	if installed == "" {
		installed = "resolved at build time"
	}
	fmt.Fprintf(&b, "target: %s, kernels %s\n", p.Target, installed)
	fmt.Fprintf(&b, "targeted kernels: %s\n", strings.Join(p.Kernels, " "))
	if p.Driver.Branch != "" {
		fmt.Fprintf(&b, "driver: branch %s, version %s, %s modules, source %s, modules %s, recorded from package %s\n",
			p.Driver.Branch, orDefault(p.Driver.Version, "newest of the branch"), p.Driver.Flavour, p.Driver.Source, strings.Join(p.Driver.Modules, " "), p.Driver.Package)
		fmt.Fprintf(&b, "installed GPU stack: packages matching %s\n", strings.Join(p.Installed, " "))
	}
	if tk := p.Toolkit; tk != nil {
		fmt.Fprintf(&b, "toolkit: version %s, hook mode %s\n", orDefault(tk.Version, "newest"), tk.HookMode)
	}
	if ms := p.ModuleSigning; ms.Mode != "" {
		fmt.Fprintf(&b, "module signing: %s", ms.Mode)
		if ms.Signer != "" {
			fmt.Fprintf(&b, ", signer %q, certificate %s", ms.Signer, ms.CertDER)
		}
		b.WriteString("\n")
	}
	if c := p.Cache; c.Mode != "" {
		fmt.Fprintf(&b, "build cache: %s in %s\n", c.Mode, orDefault(c.Dir, "$PODVM_CACHE, else ~/.cache/podvm"))
	}
	if len(p.InitrdExclude) > 0 {
		fmt.Fprintf(&b, "kept out of every initrd: %s\n", strings.Join(p.InitrdExclude, " "))
	}
	if len(p.BootPackages) > 0 {
		fmt.Fprintf(&b, "boot packages: %s\nkernel command line: %s\n", strings.Join(p.BootPackages, " "), p.KernelCmdline)
	}
	for _, a := range p.Archive {
		fmt.Fprintf(&b, "archive: %s %s\n", a.URI, strings.Join(a.Suites, " "))
	}
	if len(p.KernelPackages) > 0 {
		fmt.Fprintf(&b, "kernel packages: %s\n", strings.Join(p.KernelPackages, " "))
	}
	for _, n := range p.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	for i, s := range p.Steps {
		fmt.Fprintf(&b, "[%d/%d] %s (%s)\n", i+1, len(p.Steps), s.Title, s.ID)
		for _, a := range s.Actions {
			fmt.Fprintf(&b, "    - %s\n", a.describe())
		}
	}
	return b.String()
}

// expand fills {kernel} in each template for each kernel, keeping order and
// dropping duplicates.
func expand(templates, kernels []string) []string {
	var out []string
	seen := map[string]bool{}
	add := func(p string) {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, k := range kernels {
		for _, t := range templates {
			if strings.Contains(t, "{kernel}") {
				add(strings.ReplaceAll(t, "{kernel}", k))
			}
		}
	}
	for _, t := range templates {
		if !strings.Contains(t, "{kernel}") {
			add(t)
		}
	}
	return out
}

// kernelRange is a short description of kernels for step titles.
func kernelRange(ks []string) string {
	if len(ks) == 1 && ks[0] == KernelPlaceholder {
		return "the image's kernels"
	}
	if len(ks) == 1 {
		return ks[0]
	}
	return fmt.Sprintf("%d kernels (%s .. %s)", len(ks), ks[0], ks[len(ks)-1])
}
