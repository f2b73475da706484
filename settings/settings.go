package settings

//go:generate go run ./internal/gensettings -go settings_hcl.go -markdown ../docs/settings.md -make ../settings.mk
//go:generate go tool packer-sdc mapstructure-to-hcl2 -type HCL

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/podvm-gpu/packer-plugin-podvm/agenttree"
	"github.com/podvm-gpu/packer-plugin-podvm/cachedir"
	"github.com/podvm-gpu/packer-plugin-podvm/imagekernel"
	"github.com/podvm-gpu/packer-plugin-podvm/inputcheck"
)

// Kind is the type of a setting's value.
type Kind int

const (
	Bool   Kind = iota // yes|no|true|false|1|0, any case
	String             // free text, checked by the setting's own check
	Enum               // one of Allowed
	List               // comma or whitespace separated in env and flags; a list in HCL
)

func (k Kind) String() string {
	switch k {
	case Bool:
		return "bool"
	case Enum:
		return "enum"
	case List:
		return "list"
	default:
		return "string"
	}
}

// Setting is one row of the settings table. Every way in (HCL, environment,
// flags), validation, --help and the docs' tables derive from these rows, so
// they cannot drift.
type Setting struct {
	Key     string // HCL key and canonical name, e.g. enable_nvidia_gpu
	Env     string // environment variable, e.g. ENABLE_NVIDIA_GPU
	Flag    string // CLI flag without dashes, e.g. enable-nvidia-gpu
	Kind    Kind
	Default string   // textual default; "" where DefaultDoc explains it
	Allowed []string // for Enum; for Bool the canonical yes/no
	Section string
	Help    string
	// DefaultDoc replaces Default in docs when the default depends on the target.
	DefaultDoc string
	// Field is the name of the generated HCL config field.
	Field string
	// check validates a non-empty String or each List element, after
	// parse's own checks of every String and List value (no control
	// characters, a length cap); nil: any text that passes those.
	check *checker
	// nonEmpty refuses an explicit empty list, which would mean "nothing"
	// where the setting's default means "the distro's list".
	nonEmpty bool
	// set stores the parsed value into Options.
	set func(o *Options, v value)
}

// value is a parsed setting value.
type value struct {
	s    string
	b    bool
	list []string
}

var boolWords = map[string]bool{
	"yes": true, "true": true, "1": true, "on": true,
	"no": false, "false": false, "0": false, "off": false,
}

// ParseBool accepts the spellings of yes and no the table allows.
func ParseBool(s string) (bool, bool) {
	b, ok := boolWords[strings.ToLower(strings.TrimSpace(s))]
	return b, ok
}

var (
	// A branch, branch.minor(.patch), or a full x.y.z with a package revision.
	driverVersionRe = regexp.MustCompile(`^[0-9]{3,4}((\.[0-9]+){1,2}|\.[0-9]+\.[0-9]+-[0-9A-Za-z.+~]+)?$`)
	// apt's name=version matches whole versions only: the revision is needed.
	debVersionRe  = regexp.MustCompile(`^([0-9]+:)?[0-9][0-9A-Za-z.+~]*-[0-9A-Za-z.+~]+$`)
	pkgNameRe     = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+$`)
	pkgTemplateRe = regexp.MustCompile(`^[a-z0-9{][a-z0-9+.{}-]+$`)
	envNameRe     = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	urlRe         = regexp.MustCompile(`^(https|http|file)://[^\s"'\\]+$`)
	// Image references as the operator joins them:
	// <repository>/<image>:<version>-<os>. A component is lowercase, as a
	// reference's path must be; the repository's first one is a host and
	// may carry a port.
	imageRepositoryRe = regexp.MustCompile(`^[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]{1,5})?(/[a-z0-9]+([._-][a-z0-9]+)*)*$`)
	imageNameRe       = regexp.MustCompile(`^[a-z0-9]+([._-][a-z0-9]+)*(/[a-z0-9]+([._-][a-z0-9]+)*)*$`)
	// The driver containers are tagged by whole driver versions; a branch
	// alone names no tag.
	operatorDriverVersionRe = regexp.MustCompile(`^[0-9]{3,4}\.[0-9]+(\.[0-9]+)?$`)
	namespaceRe             = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
)

// ValidKernel reports whether s is a kernel release as the image's
// /usr/lib/modules and /boot name it, such as 6.12.57+deb13-amd64. Names
// read from an image pass through it before they reach a shell.
func ValidKernel(s string) bool { return imagekernel.Valid(s) }

// checker validates a non-empty String value or each List element, and
// says what it allows, for errors, --help and the docs. valid returns nil
// for a good value; an *inputcheck.Error it returns says what is wrong, and
// any other error just refuses the value.
type checker struct {
	valid   func(string) error
	allowed string
}

// errNoMatch refuses a value that a checker's pattern does not match; the
// checker's allowed text says the rest.
var errNoMatch = errors.New("no match")

// okIf makes a checker of a predicate.
func okIf(ok func(string) bool, allowed string) checker {
	return checker{valid: func(s string) error {
		if ok(s) {
			return nil
		}
		return errNoMatch
	}, allowed: allowed}
}

func matches(re *regexp.Regexp, allowed string) checker {
	return okIf(re.MatchString, allowed)
}

// inputChecker wraps a check of package inputcheck, which names the
// problem; allowed is the docs' text for the setting.
func inputChecker(valid func(string) error, allowed string) checker {
	return checker{valid: valid, allowed: allowed}
}

// Limits of every String and List setting, checked by parse before the
// setting's own check: a value reaches units, scripts and messages, and a
// list becomes one apt command line.
const (
	maxValueBytes = inputcheck.MaxText
	maxListItems  = 256
)

// The keyrings the plan installs in the image for the repositories it adds.
const (
	CUDAKeyring    = "/usr/share/keyrings/podvm-nvidia-cuda.gpg"
	ToolkitKeyring = "/usr/share/keyrings/podvm-nvidia-container-toolkit.gpg"
)

// Keyrings of the image's apt that local_repo_keyring must not replace: the
// distribution's archive keys (debian-*, ubuntu-*) and the keys of the
// repositories the plan adds.
var (
	keyringDirs         = []string{"/usr/share/keyrings", "/etc/apt/keyrings"}
	distroKeyringPrefix = []string{"debian-", "ubuntu-"}
	planKeyrings        = []string{CUDAKeyring, ToolkitKeyring}
)

func checkRepoKeyring(p string) error {
	const allowed = "a file named *.gpg of its own in /usr/share/keyrings or /etc/apt/keyrings, such as /usr/share/keyrings/podvm-local-packages.gpg"
	if err := inputcheck.ImageFileIn(p, ".gpg", keyringDirs...); err != nil {
		return err
	}
	base := path.Base(p)
	for _, pre := range distroKeyringPrefix {
		if strings.HasPrefix(base, pre) {
			return &inputcheck.Error{Problem: "the name of a distribution's keyring", Allowed: allowed}
		}
	}
	for _, k := range planKeyrings {
		if p == k || path.Base(k) == base {
			return &inputcheck.Error{Problem: "the keyring of another repository the build adds", Allowed: allowed}
		}
	}
	return nil
}

var (
	checkDriverVersion  = matches(driverVersionRe, `a driver branch such as "550" or an exact version such as "550.163.01"`)
	checkToolkitVersion = okIf(
		func(s string) bool { return s == "newest" || debVersionRe.MatchString(s) },
		"newest, or a whole Debian package version with its revision, such as "+DefaultToolkitVersion,
	)
	checkURL     = matches(urlRe, "an https://, http:// or file:// URL")
	checkEnvName = matches(envNameRe, "an environment variable name ([A-Za-z_][A-Za-z0-9_]*)")
	checkPkgName = matches(pkgNameRe, "Debian package names (lowercase letters, digits, + - .)")
	// The repository's directory: the provisioner's swap replaces it whole,
	// removing what was there, so it must be a directory of the build's own.
	checkRepoPath = inputChecker(inputcheck.ImageDataDir,
		"a directory of its own below "+strings.Join(inputcheck.DataRoots, ", ")+", such as /opt/local-packages; a clean path without spaces, quotes, $ or %")
	checkKeyring  = inputChecker(checkRepoKeyring, "a file named *.gpg of its own in /usr/share/keyrings or /etc/apt/keyrings (not a distribution's keyring), such as /usr/share/keyrings/podvm-local-packages.gpg")
	checkHostPath = inputChecker(inputcheck.HostPath, "a file path on the machine running the build")
	// The tree is looked at before the build starts: a wrong one fails
	// validation, not the first boot.
	checkAgentTree = inputChecker(func(s string) error { _, err := agenttree.Check(s); return err }, agenttree.Allowed)
	// An output directory may not exist yet; what would fail when the
	// artefacts are written is refused before the build rather than after
	// the driver is installed.
	checkOutputDir = inputChecker(inputcheck.HostDir,
		"a directory on the machine running the build (created if missing; not an existing file, a dangling or looping link, or a path in /proc, /sys or /dev)")
	// A service binds the repository there; below /run (a tmpfs, nothing
	// to shadow) but never over a directory a service of the image uses.
	checkExposePath = inputChecker(
		func(s string) error {
			if s == "none" {
				return nil
			}
			return inputcheck.ImageRunDir(s)
		},
		"none, or a new directory of its own below /run or /run/nvidia, such as /run/nvidia/local-packages: not /run/nvidia, nor one that systemd, a container runtime, kata or the GPU Operator uses (/run/systemd, /run/dbus, /run/lock, /run/kata-containers, /run/nvidia/driver, /run/nvidia/validations, ...); without spaces, quotes, $ or %",
	)
	// A template begins with a name: "{kernel}" alone would ask apt for a
	// package named like a kernel release.
	checkPkgTemplate = okIf(
		func(s string) bool {
			return pkgTemplateRe.MatchString(s) && !strings.HasPrefix(s, "{") &&
				!strings.ContainsAny(strings.ReplaceAll(s, "{kernel}", ""), "{}")
		},
		"package name templates such as linux-headers-{kernel}, which begin with a name and whose only placeholder is {kernel}",
	)
	checkKernels = okIf(
		func(s string) bool {
			if s == "newest" || s == "all" {
				return true
			}
			ks := SplitList(s)
			for _, k := range ks {
				if !imagekernel.Valid(k) {
					return false
				}
			}
			return len(ks) > 0
		},
		"newest, all, or a list of kernel versions such as 6.12.57+deb13-amd64",
	)
	checkNamespace = okIf(validNamespace,
		"a Kubernetes namespace name: at most 63 lowercase letters, digits and -, beginning and ending with a letter or digit")
	checkImageRepository = matches(imageRepositoryRe,
		"an image repository such as registry.example:5000/nvidia: lowercase path components of letters, digits and . _ -, the first one a host that may carry a port")
	checkImageName = matches(imageNameRe,
		"an image name such as driver: lowercase path components of letters, digits and . _ -")
	checkOperatorDriverVersion = matches(operatorDriverVersionRe,
		`an exact driver version such as "595.91.07", which the driver container's tags carry`)
	checkEpoch = okIf(
		func(s string) bool {
			n, err := strconv.ParseInt(s, 10, 64)
			return err == nil && n >= 0
		},
		"a non-negative integer of seconds since 1970-01-01 UTC",
	)
	checkSize = okIf(
		func(s string) bool { _, err := cachedir.ParseSize(s); return err == nil },
		cachedir.SizeHelp,
	)
)

// SplitList splits a list as the environment and flags write it: on commas
// and whitespace.
func SplitList(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool {
		return r == ',' || r == ' ' || r == '\t' || r == '\n'
	})
}

// Table is the settings table, in the order the docs show it.
var Table = []Setting{
	// Pod VM: the agent stack beside the GPU layer.
	{Key: "podvm_binaries", Env: "PODVM_BINARIES", Kind: String, Section: "podvm",
		DefaultDoc: "none: a GPU base image, not a pod VM",
		Help:       "Pod VM binaries tree on the build host: a directory laid out as the image's root, as cloud-api-adaptor's `make podvm-binaries` exports to resources/binaries-tree (kata-agent, agent-protocol-forwarder, process-user-data and their units). podvm-gpu carries it onto the image's root as one archive, links kept as links (CAA's absolute link into /run, wants links to units of the image's own), and enables its units as its *.wants links say; the mkosi generator adds it as a skeleton tree. See docs/pod-vm.md.",
		check:      &checkAgentTree,
		set:        func(o *Options, v value) { o.PodVMBinaries = v.s }},

	// GPU stack.
	{Key: "enable_nvidia_gpu", Env: "ENABLE_NVIDIA_GPU", Kind: Bool, Default: "yes", Section: "gpu",
		Help: "Install the NVIDIA driver, container toolkit and guest hook.",
		set:  func(o *Options, v value) { o.EnableGPU = v.b }},
	{Key: "nvidia_driver_version", Env: "NVIDIA_DRIVER_VERSION", Kind: String, Section: "gpu",
		DefaultDoc: "per release: Debian 12 535, Debian 13 550, Ubuntu 22.04 535, Ubuntu 24.04 570, Ubuntu 26.04 595",
		Help:       `Driver branch ("550") or exact version ("550.163.01").`,
		check:      &checkDriverVersion,
		set:        func(o *Options, v value) { o.DriverVersion = v.s }},
	{Key: "nvidia_kernel_modules", Env: "NVIDIA_KERNEL_MODULES", Kind: Enum, Default: "auto", Section: "gpu",
		Allowed: []string{"auto", "open", "proprietary"},
		Help:    "Kernel module flavour; auto picks open where the branch ships open modules that build against the release's kernels (Debian 13's archive driver: proprietary).",
		set:     func(o *Options, v value) { o.KernelModules = ModuleFlavour(v.s) }},
	{Key: "nvidia_driver_source", Env: "NVIDIA_DRIVER_SOURCE", Kind: Enum, Default: "auto", Section: "gpu",
		Allowed: []string{"auto", "distro", "cuda-repo", "precompiled"},
		Help:    "Where the driver comes from: the distro archive (DKMS), NVIDIA's CUDA apt repo (DKMS), or Ubuntu's precompiled modules, signed by Canonical with the kernel's key. auto: on Ubuntu, precompiled when the image's archive has them for every targeted kernel (decided in the image at build time), else distro; on Debian, distro.",
		set:     func(o *Options, v value) { o.DriverSource = DriverSource(v.s) }},
	{Key: "nvidia_cuda_repo_url", Env: "NVIDIA_CUDA_REPO_URL", Kind: String, Section: "gpu",
		DefaultDoc: "NVIDIA's CUDA repository for the release and architecture",
		Help:       "CUDA apt repository (a mirror for air-gapped builds); used with nvidia_driver_source=cuda-repo.",
		check:      &checkURL,
		set:        func(o *Options, v value) { o.CUDARepoURL = v.s }},
	{Key: "nvidia_cuda_repo_keyring", Env: "NVIDIA_CUDA_REPO_KEYRING", Kind: String, Section: "gpu",
		DefaultDoc: "NVIDIA's key, fetched over https and checked against its pinned fingerprint",
		Help:       "OpenPGP public key file (armored or binary) on the build host that signs the CUDA repository.",
		check:      &checkHostPath,
		set:        func(o *Options, v value) { o.CUDARepoKeyring = v.s }},
	{Key: "nvidia_module_signing", Env: "NVIDIA_MODULE_SIGNING", Kind: Enum, Default: string(SigningEphemeral), Section: "gpu",
		Allowed: []string{string(SigningEphemeral), string(SigningKey), string(SigningNone)},
		Help:    "How DKMS-built NVIDIA modules are signed: ephemeral signs every one with a key made for this build on a tmpfs and thrown away, keeping only its certificate (in the image and beside it, to enroll for Secure Boot); key signs with nvidia_module_signing_key and its certificate, which reach the image's tmpfs through a pipe, never a file; none leaves them unsigned. Either way DKMS never mints a key in the image.",
		set:     func(o *Options, v value) { o.ModuleSigning = SigningMode(v.s) }},
	{Key: "nvidia_module_signing_key", Env: "NVIDIA_MODULE_SIGNING_KEY", Kind: String, Section: "gpu",
		Help:  "PEM private key file on the build host that signs the NVIDIA modules (nvidia_module_signing=key); it may be encrypted, see nvidia_module_signing_passphrase_env.",
		check: &checkHostPath,
		set:   func(o *Options, v value) { o.ModuleKey = v.s }},
	{Key: "nvidia_module_signing_cert", Env: "NVIDIA_MODULE_SIGNING_CERT", Kind: String, Section: "gpu",
		Help:  "X.509 certificate file (PEM or DER) on the build host for nvidia_module_signing_key: the one enrolled in MOK or UEFI db.",
		check: &checkHostPath,
		set:   func(o *Options, v value) { o.ModuleCert = v.s }},
	{Key: "nvidia_module_signing_passphrase_env", Env: "NVIDIA_MODULE_SIGNING_PASSPHRASE_ENV", Kind: String, Section: "gpu",
		Help:  "Name of the environment variable that holds nvidia_module_signing_key's passphrase.",
		check: &checkEnvName,
		set:   func(o *Options, v value) { o.ModulePassphraseEnv = v.s }},
	{Key: "kernels", Env: "PODVM_KERNELS", Kind: String, Default: "newest", Section: "gpu",
		Help:  "Image kernels to build modules and bake packages for: newest, all, or a list of versions.",
		check: &checkKernels,
		set:   func(o *Options, v value) { o.Kernels = v.s }},

	// Container toolkit.
	{Key: "nvidia_container_toolkit", Env: "NVIDIA_CONTAINER_TOOLKIT", Kind: Bool, Default: "yes", Section: "toolkit",
		Help: "Install the NVIDIA container toolkit (only when the GPU stack is enabled).",
		set:  func(o *Options, v value) { o.Toolkit = v.b }},
	{Key: "nvidia_container_toolkit_version", Env: "NVIDIA_CONTAINER_TOOLKIT_VERSION", Kind: String, Default: DefaultToolkitVersion, Section: "toolkit",
		Help:  "Toolkit packages' version (apt name=version): the tested default, another version, or newest for whatever the repository has.",
		check: &checkToolkitVersion,
		set: func(o *Options, v value) {
			o.ToolkitVersion = v.s
			if v.s == "newest" {
				o.ToolkitVersion = ""
			}
		}},
	{Key: "nvidia_container_toolkit_repo_url", Env: "NVIDIA_CONTAINER_TOOLKIT_REPO_URL", Kind: String, Section: "toolkit",
		DefaultDoc: "NVIDIA's libnvidia-container stable repository for the architecture",
		Help:       "Container toolkit apt repository (flat, Suites: /); a mirror for air-gapped builds.",
		check:      &checkURL,
		set:        func(o *Options, v value) { o.ToolkitRepoURL = v.s }},
	{Key: "nvidia_container_toolkit_repo_keyring", Env: "NVIDIA_CONTAINER_TOOLKIT_REPO_KEYRING", Kind: String, Section: "toolkit",
		DefaultDoc: "NVIDIA's key, fetched over https and checked against its pinned fingerprint",
		Help:       "OpenPGP public key file on the build host that signs the toolkit repository.",
		check:      &checkHostPath,
		set:        func(o *Options, v value) { o.ToolkitRepoKeyring = v.s }},
	{Key: "nvidia_hook_mode", Env: "NVIDIA_HOOK_MODE", Kind: Enum, Default: "both", Section: "toolkit",
		Allowed: []string{"oci-prestart", "cdi", "both"},
		Help:    "How containers get the GPU: the kata guest OCI prestart hook, a CDI spec (nvidia.com/gpu=all) generated at boot before kata-agent, or both; cloud-api-adaptor and kata-agent use CDI, so both is the default.",
		set:     func(o *Options, v value) { o.HookMode = HookMode(v.s) }},

	// Extras.
	{Key: "nvidia_blacklist_nouveau", Env: "NVIDIA_BLACKLIST_NOUVEAU", Kind: Bool, Default: "yes", Section: "extras",
		Help: "Blacklist nouveau and rebuild the initramfs.",
		set:  func(o *Options, v value) { o.BlacklistNouveau = v.b }},
	{Key: "nvidia_persistenced", Env: "NVIDIA_PERSISTENCED", Kind: Bool, Default: "yes", Section: "extras",
		Help: "Install and enable nvidia-persistenced.",
		set:  func(o *Options, v value) { o.Persistenced = v.b }},
	{Key: "nvidia_fabric_manager", Env: "NVIDIA_FABRIC_MANAGER", Kind: Bool, Default: "no", Section: "extras",
		Help: "Install and enable the fabric manager (NVSwitch systems).",
		set:  func(o *Options, v value) { o.FabricManager = v.b }},
	{Key: "nvidia_confidential_compute", Env: "NVIDIA_CONFIDENTIAL_COMPUTE", Kind: Bool, Default: "no", Section: "extras",
		Help: "Confidential-computing guest: open modules required, GPU set ready at boot.",
		set:  func(o *Options, v value) { o.ConfidentialCompute = v.b }},
	{Key: "nvidia_gate_on_pci", Env: "NVIDIA_GATE_ON_PCI", Kind: Bool, Default: "yes", Section: "extras",
		Help: "Start GPU-only units only when an NVIDIA PCI device (vendor 10de) is present, so one image serves GPU and non-GPU VMs.",
		set:  func(o *Options, v value) { o.GateOnPCI = v.b }},

	// Local repository.
	{Key: "local_repo", Env: "LOCAL_REPO", Kind: Enum, Default: "auto", Section: "repo",
		Allowed: []string{"auto", "yes", "no"},
		Help:    "Bake the signed node-local apt repository; auto follows enable_nvidia_gpu.",
		set:     func(o *Options, v value) { o.LocalRepo = v.s }},
	{Key: "local_repo_path", Env: "LOCAL_REPO_PATH", Kind: String, Default: "/opt/local-packages", Section: "repo",
		Help:  "Directory of the repository in the image.",
		check: &checkRepoPath,
		set:   func(o *Options, v value) { o.RepoPath = v.s }},
	{Key: "local_repo_packages", Env: "LOCAL_REPO_PACKAGES", Kind: List, Section: "repo",
		DefaultDoc: "Debian: linux-headers-{kernel}, linux-image-{kernel}; Ubuntu: also linux-modules-{kernel}",
		Help:       "Package name templates baked for each targeted kernel; {kernel} is the kernel version.",
		check:      &checkPkgTemplate,
		nonEmpty:   true,
		set:        func(o *Options, v value) { o.RepoPackages = v.list }},
	{Key: "local_repo_closure", Env: "LOCAL_REPO_CLOSURE", Kind: Enum, Default: "full", Section: "repo",
		Allowed: []string{string(ClosureFull), string(ClosureNone)},
		Help:    "full: every dependency a minimal consumer needs (resolved against an empty dpkg status); none: the named packages only.",
		set:     func(o *Options, v value) { o.RepoClosure = Closure(v.s) }},
	{Key: "local_repo_extra_packages", Env: "LOCAL_REPO_EXTRA_PACKAGES", Kind: List, Section: "repo",
		Help:  "More packages to bake into the repository.",
		check: &checkPkgName,
		set:   func(o *Options, v value) { o.RepoExtraPackages = v.list }},
	{Key: "local_repo_digests", Env: "LOCAL_REPO_DIGESTS", Kind: Enum, Default: "sha256", Section: "repo",
		Allowed: []string{"sha256", "all"},
		Help:    "Digests in the repository's Packages and Release: sha256, which apt requires and verifies, or all to add MD5, SHA1 and SHA512 for older consumers.",
		set:     func(o *Options, v value) { o.RepoAllDigests = v.s == "all" }},
	{Key: "local_repo_signing_key", Env: "LOCAL_REPO_SIGNING_KEY", Kind: String, Section: "repo",
		DefaultDoc: "a fresh Ed25519 key per build whose private half is discarded",
		Help:       "Armored OpenPGP private key file on the build host that signs the repository.",
		check:      &checkHostPath,
		set:        func(o *Options, v value) { o.SigningKey = v.s }},
	{Key: "local_repo_passphrase_env", Env: "LOCAL_REPO_PASSPHRASE_ENV", Kind: String, Section: "repo",
		Help:  "Name of the environment variable that holds the signing key's passphrase.",
		check: &checkEnvName,
		set:   func(o *Options, v value) { o.PassphraseEnv = v.s }},
	{Key: "local_repo_keyring", Env: "LOCAL_REPO_KEYRING", Kind: String, Default: "/usr/share/keyrings/podvm-local-packages.gpg", Section: "repo",
		Help:  "Path in the image of the repository's public keyring (binary).",
		check: &checkKeyring,
		set:   func(o *Options, v value) { o.RepoKeyring = v.s }},
	{Key: "local_repo_sources_file", Env: "LOCAL_REPO_SOURCES_FILE", Kind: Bool, Default: "no", Section: "repo",
		Help: "Also enable the repository in the image's own apt sources.",
		set:  func(o *Options, v value) { o.RepoSourcesFile = v.b }},
	{Key: "local_repo_expose_path", Env: "LOCAL_REPO_EXPOSE_PATH", Kind: String, Default: "/run/nvidia/local-packages", Section: "repo",
		Help:  "Where a service (podvm-local-packages.service) binds the repository read-only at boot, before kubelet and containerd: the GPU Operator driver container sees the host's /run/nvidia, so its repoConfig ConfigMap points here and no operator patch is needed. none: no mount, and the ConfigMap points at local_repo_path.",
		check: &checkExposePath,
		set: func(o *Options, v value) {
			if v.s != "none" {
				o.RepoExposePath = v.s
			}
		}},
	{Key: "output_dir", Env: "PODVM_OUTPUT_DIR", Kind: String, Default: "podvm-artifacts", Section: "repo",
		Help:  "Directory on the build host for the sources file, GPU Operator ConfigMap and Helm values, the NVIDIADriver (only with gpu_operator_driver_repository and gpu_operator_driver_version), keyring.asc, manifest.json, the image's SBOM (sbom.cdx.json, CycloneDX), their signatures by the repository key (manifest.json.asc, sbom.cdx.json.asc) and, when the NVIDIA modules are signed, their certificate (module-signing.der, module-signing.pem).",
		check: &checkOutputDir,
		set:   func(o *Options, v value) { o.OutputDir = v.s }},

	// GPU Operator: the objects written beside the image for the nodes'
	// operator. The defaults are the gpu-operator chart's own (driver.*
	// in deployments/gpu-operator/values.yaml at a22dbf67); the
	// repository default is the operator's default image repository,
	// which names NVIDIA's registry.
	{Key: "gpu_operator_namespace", Env: "GPU_OPERATOR_NAMESPACE", Kind: String, Default: DefaultOperatorNamespace, Section: "operator",
		Help:  "Namespace the GPU Operator runs in (gpu-operator with its Helm chart, nvidia-gpu-operator on OpenShift): the driver pods mount the repository's ConfigMap from there, so the ConfigMap is written to it.",
		check: &checkNamespace,
		set:   func(o *Options, v value) { o.OperatorNamespace = v.s }},
	{Key: "gpu_operator_driver_repository", Env: "GPU_OPERATOR_DRIVER_REPOSITORY", Kind: String, Section: "operator",
		DefaultDoc: "none: the ClusterPolicy keeps the chart's driver.repository, and no NVIDIADriver is written",
		Help:       "Image repository of the operator's driver container (the chart's driver.repository, or a mirror for air-gapped clusters). The NVIDIADriver is written only with it and gpu_operator_driver_version, as the operator refuses one that names only part of its image.",
		check:      &checkImageRepository,
		set:        func(o *Options, v value) { o.OperatorDriverRepository = v.s }},
	{Key: "gpu_operator_driver_image", Env: "GPU_OPERATOR_DRIVER_IMAGE", Kind: String, Default: DefaultOperatorDriverImage, Section: "operator",
		Help:  "Image name of the operator's driver container in that repository (the chart's driver.image).",
		check: &checkImageName,
		set:   func(o *Options, v value) { o.OperatorDriverImage = v.s }},
	{Key: "gpu_operator_driver_version", Env: "GPU_OPERATOR_DRIVER_VERSION", Kind: String, Section: "operator",
		DefaultDoc: "none: no NVIDIADriver is written",
		Help:       "Driver version of the operator's driver container, such as 595.91.07: the operator pulls <repository>/<image>:<version>-<ID><VERSION_ID> of the node (ubuntu24.04, say). The NVIDIADriver is written only with it, as one without a version names an image that does not exist; the Helm values pin it too.",
		check:      &checkOperatorDriverVersion,
		set:        func(o *Options, v value) { o.OperatorDriverVersion = v.s }},

	// Build behaviour.
	{Key: "hold_packages", Env: "PODVM_HOLD_PACKAGES", Kind: Bool, Default: "yes", Section: "build",
		Help: "Hold the targeted kernels, the driver and the toolkit (apt-mark hold), so an apt upgrade on a node cannot break the match of kernel, driver and local repository.",
		set:  func(o *Options, v value) { o.HoldPackages = v.b }},
	{Key: "verify", Env: "PODVM_VERIFY", Kind: Bool, Default: "yes", Section: "build",
		Help: "Check the result in the image: modules per kernel, hook, and an offline apt self-test of the repository.",
		set:  func(o *Options, v value) { o.Verify = v.b }},
	{Key: "build_cache", Env: cachedir.EnvMode, Kind: Enum, Default: cachedir.ModeAuto, Section: "build",
		Allowed: cachedir.Modes,
		Help:    "Caches on the build host, in build_cache_dir: the NVIDIA modules DKMS builds (modules/), kept unsigned and keyed by kernel ABI and configuration, driver package and source, DKMS and compiler, restored after checks (hash, vermagic, no signature) and signed as a fresh build; and the .debs apt downloads into the podvm-rootfs chroot (debs/), checked against the archive's hashes before apt sees them. auto: where the build host holds the image (the podvm-rootfs chroot, mkosi, whose own package cache serves the .debs); yes: modules also for a remote VM, copied over the communicator; no: none.",
		set:     func(o *Options, v value) { o.BuildCache = v.s }},
	{Key: "build_cache_dir", Env: cachedir.EnvDir, Kind: String, Section: "build",
		DefaultDoc: "`$PODVM_CACHE`, else `$XDG_CACHE_HOME/podvm`, else `~/.cache/podvm`",
		Help:       "The build caches' directory on the build host (modules/ and debs/ in it). Builds running at once share it safely; remove either folder to clear that cache.",
		check:      &checkHostPath,
		set:        func(o *Options, v value) { o.CacheDir = v.s }},
	{Key: "build_cache_max_size", Env: cachedir.EnvMaxSize, Kind: String, Default: cachedir.DefaultMaxSize, Section: "build",
		Help:  "Bound of each build cache (modules/, debs/): the least recently used entries go first. 0: no bound.",
		check: &checkSize,
		set:   func(o *Options, v value) { o.CacheMaxSize, _ = cachedir.ParseSize(v.s) }},
	{Key: "source_date_epoch", Env: "SOURCE_DATE_EPOCH", Kind: String, Section: "build",
		DefaultDoc: "now",
		Help:       "Timestamp for everything written (Release Date, signatures, manifest), for reproducible builds.",
		check:      &checkEpoch,
		set: func(o *Options, v value) {
			o.SourceDateEpoch = -1
			if v.s != "" {
				n, _ := strconv.ParseInt(v.s, 10, 64)
				o.SourceDateEpoch = n
			}
		}},
}

func init() {
	for i := range Table {
		s := &Table[i]
		if s.Flag == "" {
			s.Flag = strings.ReplaceAll(s.Key, "_", "-")
		}
		if s.Field == "" {
			s.Field = fieldName(s.Key)
		}
		if s.Kind == Bool {
			s.Allowed = []string{"yes", "no"}
		}
	}
}

// fieldName turns an HCL key into an exported Go identifier.
func fieldName(key string) string {
	var b strings.Builder
	for _, part := range strings.Split(key, "_") {
		switch part {
		case "nvidia":
			b.WriteString("Nvidia")
		case "gpu", "pci", "cuda", "url":
			b.WriteString(strings.ToUpper(part))
		default:
			b.WriteString(strings.ToUpper(part[:1]) + part[1:])
		}
	}
	return b.String()
}

// Lookup returns the setting with the given HCL key.
func Lookup(key string) (*Setting, bool) {
	for i := range Table {
		if Table[i].Key == key {
			return &Table[i], true
		}
	}
	return nil, false
}

// AllowedText describes what a setting accepts, for errors and docs.
func (s *Setting) AllowedText() string {
	switch s.Kind {
	case Bool:
		return "yes|no|true|false|on|off|1|0 (any case)"
	case Enum:
		return strings.Join(s.Allowed, "|")
	}
	if s.check != nil {
		return s.check.allowed
	}
	return "any text on one line"
}

// DefaultText is the default as the docs show it.
func (s *Setting) DefaultText() string {
	if s.DefaultDoc != "" {
		return s.DefaultDoc
	}
	if s.Default == "" {
		return "(none)"
	}
	return s.Default
}

// parse validates raw input for the setting; from says where it came from,
// so the error names it the way the user wrote it. Every String value and
// List element passes inputcheck.Text first, whatever the row's own check:
// these values reach units, scripts and config files, where a control
// character starts a line of its own.
func (s *Setting) parse(raw []string, isList bool, from Source) (value, error) {
	if s.Kind == List {
		return s.parseList(raw, isList, from)
	}
	if isList || len(raw) != 1 {
		return value{}, s.bad(from, strings.Join(raw, ","), "a single value: "+s.AllowedText())
	}
	v := strings.TrimSpace(raw[0])
	switch s.Kind {
	case Bool:
		b, ok := ParseBool(v)
		if !ok {
			return value{}, s.bad(from, raw[0], s.AllowedText())
		}
		return value{b: b, s: v}, nil
	case Enum:
		lv := strings.ToLower(v)
		for _, a := range s.Allowed {
			if lv == a {
				return value{s: a}, nil
			}
		}
		return value{}, s.bad(from, raw[0], s.AllowedText())
	}
	if v == "" && s.Default != "" {
		return value{}, s.bad(from, raw[0], s.AllowedText())
	}
	if v != "" {
		if err := s.checkText(from, v); err != nil {
			return value{}, err
		}
	}
	return value{s: v}, nil
}

// parseList parses a List: a list from HCL, or one string the environment
// or a flag gave, split on commas and whitespace.
func (s *Setting) parseList(raw []string, isList bool, from Source) (value, error) {
	var items []string
	if isList {
		for _, r := range raw {
			items = append(items, strings.TrimSpace(r))
		}
	} else if len(raw) > 0 {
		items = SplitList(raw[0])
	}
	given := isList || len(raw) > 0
	if s.nonEmpty && given && len(items) == 0 {
		return value{}, &ValueError{Setting: s, From: from, Value: strings.Join(raw, ","),
			Problem: "an empty list", Allowed: "one or more " + s.AllowedText() + "; to use the default, leave the setting out"}
	}
	if len(items) > maxListItems {
		return value{}, &ValueError{Setting: s, From: from, Value: strings.Join(raw, ","),
			Problem: fmt.Sprintf("%d items", len(items)), Allowed: fmt.Sprintf("at most %d %s", maxListItems, s.AllowedText())}
	}
	for _, it := range items {
		if it == "" {
			return value{}, s.bad(from, it, s.AllowedText())
		}
		if err := s.checkText(from, it); err != nil {
			return value{}, err
		}
	}
	return value{list: items}, nil
}

func (s *Setting) bad(from Source, v, allowed string) error {
	return &ValueError{Setting: s, From: from, Value: v, Allowed: allowed}
}

// checkText runs the checks of every String value and List item (no control
// characters, a length cap), then the setting's own.
func (s *Setting) checkText(from Source, v string) error {
	err := inputcheck.Text(v, maxValueBytes)
	if err == nil && s.check != nil {
		err = s.check.valid(v)
	}
	if err == nil {
		return nil
	}
	// The row's allowed text is the one the docs show; the check's own
	// would say less about this setting. An inputcheck.Error says what is
	// wrong.
	ve := &ValueError{Setting: s, From: from, Value: v, Allowed: s.AllowedText()}
	var ie *inputcheck.Error
	if errors.As(err, &ie) {
		ve.Problem = ie.Problem
	}
	return ve
}

// ValueError is a rejected setting value. Its message names the setting the
// way the user wrote it (HCL key, environment variable or flag), the value,
// what is wrong with it where a check says so, and what is allowed.
type ValueError struct {
	Setting *Setting
	From    Source
	Value   string
	Problem string // "" where the allowed text says it all
	Allowed string
}

func (e *ValueError) Error() string {
	if e.Problem != "" {
		return fmt.Sprintf("%s: invalid value %s: %s; allowed: %s", e.From.Name(e.Setting), Clip(e.Value), e.Problem, e.Allowed)
	}
	return fmt.Sprintf("%s: invalid value %s; allowed: %s", e.From.Name(e.Setting), Clip(e.Value), e.Allowed)
}

// clipLimit is how much of a rejected value a message quotes.
const clipLimit = 120

// Clip quotes v for a message, cut to its first characters when long: a
// value pasted by mistake (a whole key file, say) must not flood the log.
func Clip(v string) string {
	if len(v) <= clipLimit {
		return strconv.Quote(v)
	}
	cut := clipLimit
	for cut > 0 && !utf8.RuneStart(v[cut]) {
		cut--
	}
	return fmt.Sprintf("%q... (%d bytes in all)", v[:cut], len(v))
}
