package settings

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/podvm-gpu/packer-plugin-podvm/inputcheck"
)

// ModuleFlavour is the NVIDIA kernel module flavour.
type ModuleFlavour string

const (
	ModulesAuto        ModuleFlavour = "auto"
	ModulesOpen        ModuleFlavour = "open"
	ModulesProprietary ModuleFlavour = "proprietary"
)

// DriverSource is where the driver packages come from.
type DriverSource string

const (
	// SourceAuto takes the precompiled modules where the distro has them
	// for the image's kernels (decided in the image at build time), and the
	// distro's DKMS packages otherwise.
	SourceAuto        DriverSource = "auto"
	SourceDistro      DriverSource = "distro"
	SourceCUDARepo    DriverSource = "cuda-repo"
	SourcePrecompiled DriverSource = "precompiled"
)

// HookMode is how containers in the guest get the GPU.
type HookMode string

const (
	HookOCIPrestart HookMode = "oci-prestart"
	HookCDI         HookMode = "cdi"
	HookBoth        HookMode = "both"
)

// Closure is how much of the packages' dependencies the local repository
// holds.
type Closure string

const (
	// ClosureFull: every dependency a minimal consumer needs.
	ClosureFull Closure = "full"
	// ClosureNone: the named packages only.
	ClosureNone Closure = "none"
)

// SigningMode is how the NVIDIA modules are signed.
type SigningMode string

// The signing modes: nvidia_module_signing's values, and the one of
// precompiled modules.
const (
	// SigningEphemeral signs with a key made for the build and thrown away.
	SigningEphemeral SigningMode = "ephemeral"
	// SigningKey signs with the user's key (nvidia_module_signing_key).
	SigningKey SigningMode = "key"
	// SigningNone leaves the modules unsigned.
	SigningNone SigningMode = "none"
	// SigningDistribution: the distribution signed precompiled modules with
	// their kernel's module signing key.
	SigningDistribution SigningMode = "distribution"
)

// DefaultToolkitVersion is the container toolkit version the table
// defaults to: the one CI builds and checks images with.
const DefaultToolkitVersion = "1.17.8-1"

// Defaults of the GPU Operator settings: the chart's own namespace and
// driver.image (NVIDIA/gpu-operator deployments/gpu-operator/values.yaml at
// a22dbf67). The driver repository has no default here: it names a
// registry, which comes from the user's configuration; without it the
// ClusterPolicy keeps the chart's driver.repository and no NVIDIADriver is
// written (the operator refuses one that sets only part of its image).
const (
	DefaultOperatorNamespace   = "gpu-operator"
	DefaultOperatorDriverImage = "driver"
)

// Options are the validated settings. Zero values are never used directly:
// Resolve fills every field from the table's defaults first.
type Options struct {
	// PodVMBinaries is the pod VM binaries tree on the build host, ""
	// for none: a GPU base image.
	PodVMBinaries string

	EnableGPU           bool
	DriverVersion       string // "" means the release's default branch
	KernelModules       ModuleFlavour
	DriverSource        DriverSource
	CUDARepoURL         string
	CUDARepoKeyring     string
	Toolkit             bool
	ToolkitVersion      string
	ToolkitRepoURL      string
	ToolkitRepoKeyring  string
	HookMode            HookMode
	BlacklistNouveau    bool
	Persistenced        bool
	FabricManager       bool
	ConfidentialCompute bool
	GateOnPCI           bool
	ModuleSigning       SigningMode // ephemeral, key or none
	ModuleKey           string      // key file on the build host (key mode)
	ModuleCert          string      // its certificate
	ModulePassphraseEnv string
	Kernels             string // newest, all, or a comma separated list
	BuildCache          string // auto, yes or no
	CacheDir            string // "" for the user's cache directory
	CacheMaxSize        int64  // bytes; 0 for no bound

	LocalRepo         string // auto, yes, no
	RepoPath          string
	RepoPackages      []string // templates; nil means the distro's default
	RepoClosure       Closure
	RepoExtraPackages []string
	RepoAllDigests    bool
	SigningKey        string
	PassphraseEnv     string
	RepoKeyring       string
	RepoSourcesFile   bool
	RepoExposePath    string // "" when not exposed
	OutputDir         string

	// The GPU Operator the written objects are for (see GPUOperator).
	OperatorNamespace        string
	OperatorDriverRepository string
	OperatorDriverImage      string
	OperatorDriverVersion    string // "" writes no NVIDIADriver

	HoldPackages    bool
	Verify          bool
	SourceDateEpoch int64 // -1: now

	// resolvedAt stands in for SOURCE_DATE_EPOCH when it is unset, so that
	// every timestamp of one build (Release Date, signatures, manifest) is
	// the same instant.
	resolvedAt time.Time
}

// RepoEnabled reports whether the local repository is baked.
func (o Options) RepoEnabled() bool {
	switch o.LocalRepo {
	case "yes":
		return true
	case "no":
		return false
	}
	return o.EnableGPU
}

// Idle says why options ask for nothing to be done, or "" when they ask
// for something. It is the one place that decides: the Plan and the
// provisioner (before it detects anything) ask it.
func (o Options) Idle() string {
	if !o.EnableGPU && !o.RepoEnabled() {
		return "nothing to do: enable_nvidia_gpu is no and local_repo is off"
	}
	return ""
}

// Timestamp is the time every written timestamp uses.
func (o Options) Timestamp() time.Time {
	if o.SourceDateEpoch >= 0 {
		return time.Unix(o.SourceDateEpoch, 0).UTC()
	}
	if o.resolvedAt.IsZero() {
		return time.Now().UTC().Truncate(time.Second)
	}
	return o.resolvedAt
}

// NodeProfile reports whether the options build a Kubernetes node image:
// no GPU stack in the image, whose driver the GPU Operator's driver
// container builds from the baked repository.
func (o Options) NodeProfile() bool { return !o.EnableGPU && o.RepoEnabled() }

// validNamespace reports whether s is a Kubernetes namespace name (an RFC
// 1123 label), which the ConfigMap's metadata must carry.
func validNamespace(s string) bool { return len(s) <= 63 && namespaceRe.MatchString(s) }

// Source is where a value came from.
type Source int

const (
	FromDefault Source = iota
	FromEnv
	FromHCL
	FromFlag
)

// Name is the setting's name as the user wrote it in this source.
func (src Source) Name(s *Setting) string {
	switch src {
	case FromEnv:
		return s.Env
	case FromFlag:
		return "--" + s.Flag
	case FromHCL:
		return s.Key
	}
	return s.Key + " (default)"
}

func (src Source) String() string {
	return [...]string{"default", "environment", "HCL", "flag"}[src]
}

// Raw is an unparsed value: a scalar, or a list from HCL.
type Raw struct {
	Values []string
	IsList bool
}

// Scalar is a Raw holding one textual value.
func Scalar(s string) Raw { return Raw{Values: []string{s}} }

// Input is everything Resolve reads.
type Input struct {
	// Explicit values from HCL or flags, by HCL key.
	Explicit map[string]Raw
	// ExplicitFrom is FromHCL or FromFlag.
	ExplicitFrom Source
	// LookupEnv reads the environment; nil means os.LookupEnv.
	LookupEnv func(string) (string, bool)
}

// Resolved is the outcome of Resolve: the options, where each came from,
// and warnings about settings the user gave that the other settings make
// useless. Every caller shows the warnings (the provisioner through
// Packer's ui, the CLI on stderr): an explicit setting is never dropped
// without a word.
type Resolved struct {
	Options  Options
	Origin   map[string]Source
	Warnings []string
}

// Resolve applies the precedence explicit > environment > default and
// validates everything, reporting every bad value at once.
func Resolve(in Input) (Resolved, error) {
	lookup := in.LookupEnv
	if lookup == nil {
		lookup = os.LookupEnv
	}
	for k := range in.Explicit {
		if _, ok := Lookup(k); !ok {
			return Resolved{}, fmt.Errorf("unknown setting %q", k)
		}
	}
	res := Resolved{Origin: map[string]Source{}}
	res.Options.resolvedAt = time.Now().UTC().Truncate(time.Second)
	var errs []error
	for i := range Table {
		s := &Table[i]
		raw, src := Scalar(s.Default), FromDefault
		if s.Kind == List {
			raw = Raw{}
		}
		// An empty variable counts as unset, as make passes `VAR ?=` through.
		if ev, ok := lookup(s.Env); ok && strings.TrimSpace(ev) != "" {
			raw, src = Scalar(ev), FromEnv
		}
		if r, ok := in.Explicit[s.Key]; ok {
			raw, src = r, in.ExplicitFrom
		}
		v, err := s.parse(raw.Values, raw.IsList, src)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s.set(&res.Options, v)
		res.Origin[s.Key] = src
	}
	errs = append(errs, res.Options.crossCheck(res.Origin)...)
	if len(errs) > 0 {
		return Resolved{}, &Error{Errs: errs}
	}
	res.Warnings = append(res.Options.ignored(res.Origin), res.Options.operatorWarnings()...)
	return res, nil
}

// ignored lists the settings the user gave (in the environment, HCL or
// flags) that have no effect with the others, each named the way the user
// wrote it, with the setting that makes it useless.
func (o Options) ignored(origin map[string]Source) []string {
	var warns []string
	given := func(key string) (string, bool) {
		src, ok := origin[key]
		if !ok || src == FromDefault {
			return "", false
		}
		s, _ := Lookup(key)
		return src.Name(s), true
	}
	warn := func(keys []string, why string) {
		for _, k := range keys {
			if name, ok := given(k); ok {
				warns = append(warns, fmt.Sprintf("%s is ignored: %s", name, why))
			}
		}
	}
	if !o.RepoEnabled() {
		warn([]string{"gpu_operator_namespace", "gpu_operator_driver_repository", "gpu_operator_driver_image",
			"gpu_operator_driver_version"}, "local_repo is off, so no GPU Operator objects are written")
	}
	if !o.EnableGPU {
		warn([]string{"nvidia_module_signing", "nvidia_cuda_repo_url", "nvidia_cuda_repo_keyring",
			"nvidia_hook_mode", "nvidia_container_toolkit_version", "nvidia_container_toolkit_repo_url",
			"nvidia_container_toolkit_repo_keyring"}, "enable_nvidia_gpu is no")
		return warns
	}
	if o.DriverSource != SourceCUDARepo {
		why := fmt.Sprintf("nvidia_driver_source is %s, so the driver does not come from the CUDA repository", o.DriverSource)
		warn([]string{"nvidia_cuda_repo_url", "nvidia_cuda_repo_keyring"}, why)
	}
	if !o.Toolkit {
		warn([]string{"nvidia_hook_mode", "nvidia_container_toolkit_version", "nvidia_container_toolkit_repo_url",
			"nvidia_container_toolkit_repo_keyring"}, "nvidia_container_toolkit is no")
	}
	return warns
}

// operatorWarnings say what a node image's build leaves out of the GPU
// Operator's objects. Only the node profile warns: its operator is the
// consumer of the objects, while a pod VM image carries its own driver.
func (o Options) operatorWarnings() []string {
	var unset []string
	if o.OperatorDriverRepository == "" {
		unset = append(unset, "gpu_operator_driver_repository")
	}
	if o.OperatorDriverVersion == "" {
		unset = append(unset, "gpu_operator_driver_version")
	}
	if !o.NodeProfile() || len(unset) == 0 {
		return nil
	}
	return []string{strings.Join(unset, " and ") + " not set, so no gpu-operator-nvidiadriver.yaml is written: the operator refuses an NVIDIADriver that names only part of its driver image, and one without a version would pull an image path with no tag. The ConfigMap and the Helm values (ClusterPolicy) are written; set both (a repository and a version such as 595.91.07) for the NVIDIADriver too."}
}

// crossCheck rejects combinations that no target can satisfy.
func (o Options) crossCheck(origin map[string]Source) []error {
	var errs []error
	name := func(key string) string {
		s, _ := Lookup(key)
		return origin[key].Name(s)
	}
	if o.PassphraseEnv != "" && o.SigningKey == "" {
		errs = append(errs, fmt.Errorf("%s=%s: needs local_repo_signing_key; the default ephemeral key has no passphrase",
			name("local_repo_passphrase_env"), o.PassphraseEnv))
	}
	// valid reports whether every key parsed: a check across settings
	// that one has failed would only repeat its error in other words.
	valid := func(keys ...string) bool {
		for _, k := range keys {
			if _, ok := origin[k]; !ok {
				return false
			}
		}
		return true
	}
	// Without the GPU stack nothing is signed, so the key is not needed.
	if o.EnableGPU && o.ModuleSigning == SigningKey && (o.ModuleKey == "" || o.ModuleCert == "") {
		errs = append(errs, fmt.Errorf("%s=key: needs nvidia_module_signing_key and nvidia_module_signing_cert, the key and certificate files on the build host", name("nvidia_module_signing")))
	}
	for _, k := range []struct{ key, v string }{
		{"nvidia_module_signing_key", o.ModuleKey},
		{"nvidia_module_signing_cert", o.ModuleCert},
		{"nvidia_module_signing_passphrase_env", o.ModulePassphraseEnv},
	} {
		if k.v != "" && o.ModuleSigning != SigningKey {
			errs = append(errs, fmt.Errorf("%s=%s: only used with nvidia_module_signing=key, not %s", name(k.key), k.v, o.ModuleSigning))
		}
	}
	if e := o.RepoExposePath; e != "" && valid("local_repo_path", "local_repo_expose_path") &&
		(inputcheck.Below(e, o.RepoPath) || inputcheck.Below(o.RepoPath, e)) {
		errs = append(errs, fmt.Errorf("%s=%s: overlaps local_repo_path %s; allowed: none, or a separate path such as /run/nvidia/local-packages",
			name("local_repo_expose_path"), e, o.RepoPath))
	}
	// The bake writes the keyring after the repository is in place: inside
	// it, it would overwrite a file of the repository, or the directory.
	if k := o.RepoKeyring; valid("local_repo_path", "local_repo_keyring") &&
		(inputcheck.Below(k, o.RepoPath) || inputcheck.Below(o.RepoPath, k)) {
		errs = append(errs, fmt.Errorf("%s=%s: inside local_repo_path %s (the repository has its own keyring.gpg); allowed: a file in /usr/share/keyrings or /etc/apt/keyrings",
			name("local_repo_keyring"), k, o.RepoPath))
	}
	// The repository's own signatures protect packages fetched over http,
	// but the key fetched next to it would not be: a plain-http mirror
	// needs a keyring file.
	for _, m := range []struct{ url, keyring, u, k string }{
		{"nvidia_cuda_repo_url", "nvidia_cuda_repo_keyring", o.CUDARepoURL, o.CUDARepoKeyring},
		{"nvidia_container_toolkit_repo_url", "nvidia_container_toolkit_repo_keyring", o.ToolkitRepoURL, o.ToolkitRepoKeyring},
	} {
		u := m.u
		if strings.HasPrefix(u, "http://") && m.k == "" {
			// Name the keyring the way the user wrote the URL.
			ks, _ := Lookup(m.keyring)
			kname := origin[m.url].Name(ks)
			errs = append(errs, fmt.Errorf("%s=%s: a plain-http mirror needs %s (its key cannot be fetched safely over http); allowed: an https:// URL, or set %s",
				name(m.url), u, kname, kname))
		}
	}
	// Precompiled modules carry the distribution's signature: a module
	// signing key of the user's would sign nothing.
	if o.EnableGPU && o.DriverSource == SourcePrecompiled && o.ModuleSigning == SigningKey {
		errs = append(errs, fmt.Errorf("%s=key with %s=precompiled: precompiled modules keep the distribution's signature and the key would sign nothing; allowed: nvidia_driver_source=auto|distro|cuda-repo (DKMS-built modules), or nvidia_module_signing=ephemeral|none",
			name("nvidia_module_signing"), name("nvidia_driver_source")))
	}
	if o.ConfidentialCompute && o.KernelModules == ModulesProprietary {
		errs = append(errs, fmt.Errorf("%s=yes with %s=proprietary: confidential computing needs the open kernel modules; allowed: open|auto",
			name("nvidia_confidential_compute"), name("nvidia_kernel_modules")))
	}
	return errs
}

// Error lists every rejected setting.
type Error struct{ Errs []error }

func (e *Error) Error() string {
	msgs := make([]string, len(e.Errs))
	for i, err := range e.Errs {
		msgs[i] = err.Error()
	}
	if len(msgs) == 1 {
		return "invalid setting: " + msgs[0]
	}
	return fmt.Sprintf("%d invalid settings:\n  %s", len(msgs), strings.Join(msgs, "\n  "))
}

func (e *Error) Unwrap() []error { return e.Errs }

// BindFlags adds a flag for every setting to fs. The returned function
// collects the flags the user set, ready for Input.Explicit.
func BindFlags(fs *pflag.FlagSet) func() map[string]Raw {
	vals := map[string]*string{}
	for i := range Table {
		s := &Table[i]
		usage := fmt.Sprintf("%s (env %s; default %s)", s.Help, s.Env, s.DefaultText())
		if s.Kind == Bool || s.Kind == Enum {
			usage = fmt.Sprintf("%s [%s] (env %s; default %s)", s.Help, strings.Join(s.Allowed, "|"), s.Env, s.DefaultText())
		}
		vals[s.Key] = fs.String(s.Flag, "", usage)
		if s.Kind == Bool {
			// --enable-nvidia-gpu alone means yes, as with a boolean flag.
			fs.Lookup(s.Flag).NoOptDefVal = "yes"
		}
	}
	return func() map[string]Raw {
		out := map[string]Raw{}
		for key, p := range vals {
			s, _ := Lookup(key)
			if fs.Changed(s.Flag) {
				out[key] = Scalar(*p)
			}
		}
		return out
	}
}
