package gpustack

import (
	"errors"
	"fmt"

	"github.com/podvm-gpu/packer-plugin-podvm/distro"
	"github.com/podvm-gpu/packer-plugin-podvm/settings"
	"slices"
	"strconv"
	"strings"
)

// release is what the plan knows about one distro release.
type release struct {
	distro.Release
	family        family
	defaultBranch string
	// cudaDir names the release in NVIDIA's CUDA repository paths.
	cudaDir string
	// cudaKey is the signing key file in that repository and its fingerprint.
	cudaKey, cudaFingerprint string
	// noCUDARepo says why the release has no CUDA repository source ("" for
	// one that has), for the message that refuses nvidia_driver_source=cuda-repo.
	noCUDARepo string
	// dkmsPackages are what DKMS needs on the release without depending on
	// it, installed with the driver where DKMS builds the modules.
	dkmsPackages []string
	// autoProprietary makes nvidia_kernel_modules=auto pick the proprietary
	// modules of the archive's driver although it ships open ones: the
	// open ones do not build against the release's current kernels.
	autoProprietary string
}

// family holds the package knowledge of a distro family. Implementations
// live in one file each (debian.go, ubuntu.go).
type family interface {
	archiveComponents() []string
	headers(kernel string) string
	// kernelMeta names the packages that track the newest kernel image and
	// its headers, for images whose kernels are not known yet.
	kernelMeta(arch string) (image, headers string)
	repoTemplates() []string
	hasOpen(r release, branch string) bool
	// driver returns the packages that install the driver and whether its
	// modules are built with DKMS.
	driver(r release, d Driver, kernels []string) (pkgs []string, dkms bool, err error)
	// precompiled names the distro's precompiled modules package ({kernel}
	// for the kernel) and the packages that go with it; ok is false where
	// the distro has none.
	precompiled(d Driver) (modules string, rest []string, ok bool)
	modules(d Driver) []string
	// pinPackages are the packages an exact driver version pins.
	pinPackages(d Driver) []string
	persistenced(d Driver) []string
	// persistencedUser is the system user the driver's
	// nvidia-persistenced package creates, which the plan's unit runs it
	// as.
	persistencedUser(d Driver) string
	fabricManager(d Driver) ([]string, error)
	// moduleLoadConf is a file the driver packages install that makes
	// systemd-modules-load load the driver at every boot ("" for none).
	// Without a GPU that load fails and so does the unit, so the plan
	// empties it: udev loads the driver by PCI alias where a GPU exists.
	moduleLoadConf(d Driver) string
	// bootPackages are what a generated image needs to boot from a disk.
	bootPackages() []string
}

// releases is keyed by "<distro>-<version>"; the family files fill it.
var releases = map[string]release{}

// known is the distro's record of a release the plan has GPU facts for;
// the two tables must agree (TestReleasesKnown).
func known(id, version string) distro.Release {
	r, _ := distro.Lookup(id, version)
	return r
}

func supported() string {
	var names []string
	for _, r := range releases {
		names = append(names, r.Name())
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

const (
	cudaRepoBase       = "https://developer.download.nvidia.com/compute/cuda/repos"
	toolkitRepoBase    = "https://nvidia.github.io/libnvidia-container/stable/deb"
	toolkitKeyURL      = "https://nvidia.github.io/libnvidia-container/gpgkey"
	toolkitFingerprint = "C95B321B61E88C1809C4F759DDCAE044F796ECB0"
	// The repository keyrings the plan installs in the image.
	cudaKeyring    = settings.CUDAKeyring
	toolkitKeyring = settings.ToolkitKeyring

	hookPath      = "/usr/share/oci/hooks/prestart/nvidia-container-toolkit.sh"
	toolkitConfig = "/etc/nvidia-container-runtime/config.toml"
	gateScript    = "/usr/libexec/podvm-gpu/has-nvidia-gpu"
	cdiUnit       = "nvidia-cdi-generate.service"
	cdiScriptPath = "/usr/libexec/podvm-gpu/nvidia-cdi-generate"
	cdiSpecPath   = "/run/cdi/nvidia.yaml" // /var/run/cdi: where kata-agent reads CDI specs
	ccUnit        = "nvidia-cc-ready.service"
	persistUnit   = "nvidia-persistenced.service"
	fabricUnit    = "nvidia-fabricmanager.service"
	nouveauConf   = "/etc/modprobe.d/podvm-blacklist-nouveau.conf"
	nouveauHook   = "/etc/initramfs-tools/hooks/podvm-no-nouveau"
	dkmsConf      = "/etc/dkms/framework.conf.d/podvm-gpu.conf"
	// dkmsNoAutoinstall is modcache.NoAutoinstall: the modules step
	// removes it.
	dkmsNoAutoinstall = "/etc/dkms/no-autoinstall"
	// The module signing certificate stays in the image, to be enrolled
	// or checked against modinfo's signer.
	moduleCertDER = "/usr/share/podvm-gpu/module-signing.der"
	moduleCertPEM = "/usr/share/podvm-gpu/module-signing.pem"
	// ModuleSignatures lists each signed module's signature as modinfo
	// reads it (kernel, file, signer, key id, hash), tab-separated; the
	// signing step writes it beside the certificate.
	ModuleSignatures = "/usr/share/podvm-gpu/module-signatures.tsv"
	// moduleSigner is the certificate's subject, which modinfo reports
	// as each module's signer.
	moduleSigner   = "podvm-gpu ephemeral module signing key"
	toolkitPackage = "nvidia-container-toolkit"
)

// toolkitPackages are the container toolkit's packages, which the plan
// installs at one version and holds.
var toolkitPackages = []string{toolkitPackage, "nvidia-container-toolkit-base", "libnvidia-container-tools", "libnvidia-container1"}

// HookPath is where the kata guest prestart hook goes.
const HookPath = hookPath

// NewPlan turns validated options and the image's facts into a Plan. It does
// no I/O. Combinations the target cannot satisfy are errors naming the
// settings involved.
func NewPlan(o settings.Options, t Target) (*Plan, error) {
	p := &Plan{Target: t, GPU: o.EnableGPU, Timestamp: o.Timestamp(), SourceDateEpoch: o.SourceDateEpoch, KernelSelection: o.Kernels,
		Cache: BuildCache{Mode: o.BuildCache, Dir: o.CacheDir, MaxSize: o.CacheMaxSize}}
	if o.SourceDateEpoch < 0 {
		p.SourceDateEpoch = -1
	}
	r, ok := releases[t.Distro+"-"+t.Version]
	if ok && t.KernelsAtBuildTime {
		if err := p.bootFacts(r.family); err != nil {
			return nil, err
		}
	}
	if idle := o.Idle(); idle != "" {
		p.Idle = idle
		p.Notes = append(p.Notes, idle)
		return p, nil
	}
	if !ok {
		return nil, fmt.Errorf("unsupported target %s %s (%s); supported: %s", t.Distro, t.Version, t.Codename, supported())
	}
	switch t.Arch {
	case "amd64", "arm64":
	default:
		return nil, fmt.Errorf("unsupported architecture %q; supported: amd64, arm64", t.Arch)
	}
	kernels, err := SelectKernels(o.Kernels, t.Kernels)
	if t.KernelsAtBuildTime {
		kernels, err = []string{KernelPlaceholder}, nil
		p.Notes = append(p.Notes, "kernels resolved at build time from the image (kernels="+o.Kernels+")")
	}
	if err != nil {
		return nil, err
	}
	p.Kernels = kernels
	f := r.family

	var errs []error
	if o.EnableGPU {
		d, err := resolveDriver(o, r)
		if err != nil {
			errs = append(errs, err)
		} else {
			p.Driver = d
			if o.KernelModules == settings.ModulesAuto && d.Source == settings.SourceDistro && r.autoProprietary != "" {
				p.Notes = append(p.Notes, "nvidia_kernel_modules=auto picks proprietary on "+r.Name()+": "+r.autoProprietary)
			}
			if err := gpuSteps(p, o, r, f); err != nil {
				errs = append(errs, err)
			}
		}
	} else {
		p.Notes = append(p.Notes, "GPU stack off (enable_nvidia_gpu=no); baking the local repository only")
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	// Before the bake, whose manifest records what is held.
	if o.HoldPackages {
		holds := HoldPackages{Kernels: kernels, Packages: holdPatterns(p, f, o)}
		what := "kernel"
		if o.EnableGPU {
			what = "kernel, driver and toolkit"
		}
		p.add("hold", "Holding the "+what+" packages, so an apt upgrade keeps image and repository matched", holds)
	}
	if o.RepoEnabled() {
		p.repoSteps(o, f)
	}
	if o.Verify {
		p.verifySteps(o, f)
	}
	return p, nil
}

// bootFacts are what a generated image needs to boot from its own disk,
// GPU stack or not: its kernel, boot packages, command line and archive.
func (p *Plan) bootFacts(f family) error {
	t := p.Target
	image, headers := f.kernelMeta(t.Arch)
	p.KernelPackages = []string{image, headers}
	p.BootPackages = f.bootPackages()
	p.KernelCmdline = distro.KernelCmdline
	if t.Mirror != "" {
		archive, err := ArchiveSources(t, t.Mirror, t.SecurityMirror)
		if err != nil {
			return err
		}
		p.Archive = archive
	}
	return nil
}

// repoSteps bake the node-local repository and expose it at boot.
func (p *Plan) repoSteps(o settings.Options, f family) {
	kernels := p.Kernels
	templates := o.RepoPackages
	if templates == nil {
		templates = f.repoTemplates()
	}
	bake := BakeRepo{
		Dir:         o.RepoPath,
		Kernels:     kernels,
		Packages:    expand(append(slices.Clone(templates), o.RepoExtraPackages...), kernels),
		Closure:     o.RepoClosure == settings.ClosureFull,
		Keyring:     o.RepoKeyring,
		SourcesFile: o.RepoSourcesFile,
		SigningKey:  o.SigningKey,
		Passphrase:  o.PassphraseEnv,
		AllDigests:  o.RepoAllDigests,
		OutputDir:   o.OutputDir,
		ModuleCert:  p.ModuleSigning.CertDER,
		ExposePath:  o.RepoExposePath,
		Operator:    operatorOf(o),
	}
	if !o.EnableGPU {
		p.add("apt-update", "Refreshing package lists", AptUpdate{})
	}
	p.Repo = &bake
	p.add("local-repo", fmt.Sprintf("Baking signed local repository %s for %s", o.RepoPath, kernelRange(kernels)), bake)
	if e := o.RepoExposePath; e != "" {
		p.add("repo-expose", "Binding the repository read-only at "+e+" at boot, where the GPU Operator driver container sees it",
			WriteFile{Path: "/etc/systemd/system/" + ExposeUnit, Mode: modeFile, Owner: "root:root", Content: exposeService(o.RepoPath, e)},
			EnableUnits{Units: []string{ExposeUnit}})
	}
}

// verifySteps check the finished image: the modules, the driver's
// version, their signatures, the hook and the repository offline.
func (p *Plan) verifySteps(o settings.Options, f family) {
	kernels := p.Kernels
	var checks []Action
	if o.EnableGPU {
		checks = append(checks, CheckModules{Kernels: kernels, Modules: p.Driver.Modules},
			CheckDriverVersion{Kernels: kernels, Module: p.Driver.Modules[0]})
		if ms := p.ModuleSigning; ms.CertDER != "" {
			var check Action = SignModules{Kernels: kernels, Subject: ms.Signer, CertDER: moduleCertDER, CertPEM: moduleCertPEM, Verify: true}
			if p.Driver.Source == settings.SourceAuto {
				check = IfDriverSource{Source: TakenDistro, Actions: []Action{check}}
			}
			checks = append(checks, check)
		}
		if o.Toolkit && o.HookMode != settings.HookCDI {
			checks = append(checks, VerifyExecutable{Paths: []string{hookPath}})
		}
	}
	if o.RepoEnabled() {
		var headers []string
		for _, k := range kernels {
			headers = append(headers, f.headers(k))
		}
		checks = append(checks, VerifyRepo{Dir: o.RepoPath, Keyring: o.RepoKeyring, Packages: headers, Closure: o.RepoClosure == settings.ClosureFull})
	}
	p.add("verify", "Verifying the image", checks...)
}

func (p *Plan) add(id, title string, actions ...Action) {
	p.Steps = append(p.Steps, Step{ID: id, Title: title, Actions: actions})
}

// SelectKernels applies the kernels setting (spec: newest, all, or a list)
// to the image's kernels (have), oldest first.
func SelectKernels(spec string, have []string) ([]string, error) {
	if len(have) == 0 {
		return nil, errors.New("no kernel in the image (looked for /usr/lib/modules/<version> with a matching /boot/vmlinuz-<version>); install one before this step (e.g. linux-image-amd64 or linux-image-generic)")
	}
	ks := slices.Clone(have)
	SortKernels(ks)
	switch spec {
	case "", "newest":
		return ks[len(ks)-1:], nil
	case "all":
		return ks, nil
	}
	var out []string
	for _, k := range settings.SplitList(spec) {
		if !slices.Contains(ks, k) {
			return nil, fmt.Errorf("kernels: %q is not installed in the image; installed: %s", k, strings.Join(ks, ", "))
		}
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	SortKernels(out)
	return out, nil
}

func resolveDriver(o settings.Options, r release) (Driver, error) {
	d := Driver{Source: o.DriverSource, Branch: r.defaultBranch}
	if _, _, ok := r.family.precompiled(d); d.Source == settings.SourceAuto && !ok {
		// Nothing to choose from: the distro's archive it is.
		d.Source = settings.SourceDistro
	}
	if v := o.DriverVersion; v != "" {
		branch, _, _ := strings.Cut(v, ".")
		d.Branch = branch
		if strings.Contains(v, ".") {
			d.Version = v
		}
	}
	branchNum, _ := strconv.Atoi(d.Branch)
	open := r.family.hasOpen(r, d.Branch)
	switch o.KernelModules {
	case settings.ModulesOpen:
		if !open {
			return d, fmt.Errorf("nvidia_kernel_modules=open: branch %s on %s has no open kernel modules (open modules start at 515); allowed: proprietary", d.Branch, r.Name())
		}
		d.Flavour = settings.ModulesOpen
	case settings.ModulesProprietary:
		d.Flavour = settings.ModulesProprietary
	default:
		d.Flavour = settings.ModulesProprietary
		if open && (d.Source != settings.SourceDistro || r.autoProprietary == "") {
			d.Flavour = settings.ModulesOpen
		}
	}
	if o.ConfidentialCompute && d.Flavour != settings.ModulesOpen {
		return d, fmt.Errorf("nvidia_confidential_compute=yes: needs open kernel modules, which branch %s on %s does not ship", d.Branch, r.Name())
	}
	if branchNum < 450 {
		return d, fmt.Errorf("nvidia_driver_version=%s: branch %s is too old; allowed: 450 or newer", o.DriverVersion, d.Branch)
	}
	d.Modules = r.family.modules(d)
	return d, nil
}

// holdPatterns are the packages a GPU plan holds: the targeted kernels
// and the packages that follow the newest kernel, the driver's, and the
// toolkit's.
func holdPatterns(p *Plan, f family, o settings.Options) []string {
	image, headers := f.kernelMeta(p.Target.Arch)
	pats := append(slices.Clone(f.repoTemplates()), image, headers)
	if o.EnableGPU {
		pats = append(pats, f.pinPackages(p.Driver)...)
	}
	if o.EnableGPU && o.Toolkit {
		pats = append(pats, toolkitPackages...)
	}
	var out []string
	for _, s := range pats {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

func branchAtLeast(branch string, n int) bool {
	b, err := strconv.Atoi(branch)
	return err == nil && b >= n
}

func repoKey(file, url, fingerprint string) Key {
	if file != "" {
		return Key{File: file}
	}
	return Key{URL: url, Fingerprints: []string{fingerprint}}
}

func cudaArch(arch string) string {
	if arch == "arm64" {
		return "sbsa"
	}
	return "x86_64"
}

// pinVersion turns an exact upstream version into an apt pin pattern that
// matches any packaging revision of it.
func pinVersion(v string) string {
	if strings.Contains(v, "-") {
		return v
	}
	return v + "-*"
}

func orBranch(d Driver) string {
	if d.Version != "" {
		return d.Version
	}
	return d.Branch
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}
