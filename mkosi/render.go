package mkosi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/podvm-gpu/packer-plugin-podvm/bake"
	"github.com/podvm-gpu/packer-plugin-podvm/cachedir"
	"github.com/podvm-gpu/packer-plugin-podvm/gpustack"
	"github.com/podvm-gpu/packer-plugin-podvm/modcache"
	"github.com/podvm-gpu/packer-plugin-podvm/shellquote"
)

// Profile is the profile that holds the GPU stack. mkosi.conf selects it
// when the GPU stack is enabled; `mkosi --profile=` builds without it.
const Profile = "nvidia-gpu"

// Generator names the mkosi path in the manifests it writes.
const Generator = "packer-plugin-podvm mkosi"

// MinimumVersion is the oldest mkosi the tree is written for: profiles as
// directories, Profiles= in [Config] and sandbox trees arrived in 25.
const MinimumVersion = "25"

// Config is what Render needs besides the plan.
type Config struct {
	// Plan must target build-time kernels (Target.KernelsAtBuildTime).
	Plan *gpustack.Plan
	// Bin is the host path of packer-plugin-podvm: the scripts run it to
	// run the plan's steps (run-steps) and check for key material.
	Bin string
	// HTTPClient fetches repository keys named by URL (through repokey,
	// https only); nil means a default client.
	HTTPClient *http.Client
	// Into, when set, renders the plan as a layer of an existing tree
	// (see Into) instead of a tree of its own.
	Into *Layer
	// AgentTree is the pod VM binaries tree (podvm_binaries), an absolute
	// host path, or "" for a GPU base image. It becomes a skeleton tree, in
	// place before the packages as in cloud-api-adaptor's podvm tree.
	AgentTree string
}

// Layer says where a layer's files go in an existing tree. Its image
// settings, trees and scripts go into a drop-in directory of the image
// that gets the layer; the settings mkosi takes only at the top level of a
// tree of several images (universal: [Build], SourceDateEpoch=, sandbox
// trees) go into a drop-in directory at the top. Both match on the
// profile, so selecting it turns the layer on.
type Layer struct {
	// ImageDir is the image's directory, relative to the tree's root: ""
	// for a tree of one image, "mkosi.images/system" in a tree of several.
	ImageDir string
	// ActiveWith is the profile whose selection switches the layer on:
	// "" for the layer's own (Profile), another of the tree's profiles
	// (cloud-api-adaptor's make image selects production itself), or
	// AlwaysActive.
	ActiveWith string
}

// AlwaysActive is the Layer.ActiveWith of a layer that no profile
// switches: its drop-ins carry no [Match].
const AlwaysActive = "always"

// activation is the profile that switches the layer on, "" for none.
func (l *Layer) activation() string {
	switch l.ActiveWith {
	case "":
		return Profile
	case AlwaysActive:
		return ""
	}
	return l.ActiveWith
}

// LayerDropIn is the name of the layer's drop-in directories.
const LayerDropIn = "50-podvm-" + Profile

func (l *Layer) imagePrefix() string {
	return path.Join(l.ImageDir, "mkosi.conf.d", LayerDropIn) + "/"
}

func (l *Layer) universalPrefix() string { return "mkosi.conf.d/" + LayerDropIn + "/" }

// File is one file of the rendered tree.
type File struct {
	Path string // slash-separated, relative to the tree root
	Mode fs.FileMode
	Data []byte
}

// tree collects files; a later write to a path replaces the earlier one.
type tree map[string]File

func (t tree) add(p string, mode fs.FileMode, data []byte) {
	t[p] = File{Path: p, Mode: mode, Data: data}
}

func (t tree) sorted() []File {
	out := make([]File, 0, len(t))
	for _, f := range t {
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// mkosiArch maps dpkg architectures to mkosi's names.
var mkosiArch = map[string]string{"amd64": "x86-64", "arm64": "arm64"}

// Render turns the plan into the files of a mkosi tree.
func Render(ctx context.Context, c Config) ([]File, error) {
	p := c.Plan
	if p == nil {
		return nil, errors.New("mkosi: no plan")
	}
	t := p.Target
	if !t.KernelsAtBuildTime {
		return nil, errors.New("mkosi: the plan must resolve kernels at build time (Target.KernelsAtBuildTime)")
	}
	arch, ok := mkosiArch[t.Arch]
	if !ok {
		return nil, fmt.Errorf("mkosi: unsupported architecture %q; supported: amd64, arm64", t.Arch)
	}
	archive := p.Archive
	if len(archive) == 0 {
		return nil, fmt.Errorf("mkosi: the plan has no archive for %s: give the target a mirror (Target.Mirror); no default archive is built in", t)
	}

	r := &renderer{c: c, p: p, files: tree{}}
	if c.Into != nil {
		r.prefix, r.universal = c.Into.imagePrefix(), c.Into.universalPrefix()
		return r.render(ctx, archive)
	}
	// The plan's files go into the nvidia-gpu profile when the GPU stack is
	// on, so one flag turns the whole stack off; a repository-only plan
	// goes into the top-level tree.
	if p.GPU {
		r.prefix = "mkosi.profiles/" + Profile + "/"
	}
	r.universal = r.prefix

	var errp error
	var cfg, dist section
	cfg.name, dist.name = "Config", "Distribution"
	sc := setter{&cfg, &errp}
	sc.set("MinimumVersion", MinimumVersion)
	if p.GPU {
		sc.list("Profiles", []string{Profile})
	}
	sd := setter{&dist, &errp}
	sd.set("Distribution", t.Distro)
	sd.set("Release", t.Codename)
	sd.set("Architecture", arch)
	// The product is a disk that boots as podvm-rootfs's does: GPT, UEFI
	// through systemd-boot, the same kernel command line. --format=directory
	// builds the tree alone.
	var output, boot section
	output.name, boot.name = "Output", "Content"
	setter{&output, &errp}.set("Format", "disk")
	sb := setter{&boot, &errp}
	sb.set("Bootable", "yes")
	sb.set("Bootloader", "systemd-boot")
	sb.set("KernelCommandLine", p.KernelCmdline)
	if c.AgentTree != "" {
		// The agent stack, with or without the GPU profile.
		sb.list("SkeletonTrees", []string{c.AgentTree})
	}
	r.files.add("mkosi.conf", 0o644, []byte(iniFile(r.header("mkosi.conf"), cfg, dist, output, boot)))

	// The distro drop-in: what only this distro and release need.
	var match, content section
	match.name, content.name = "Match", "Content"
	sm := setter{&match, &errp}
	sm.set("Distribution", t.Distro)
	sm.set("Release", t.Codename)
	sm.set("Architecture", arch)
	setter{&content, &errp}.list("Packages", append(slices.Clone(p.KernelPackages), p.BootPackages...))
	dropIn := fmt.Sprintf("mkosi.conf.d/10-%s-%s.conf", t.Distro, t.Codename)
	r.files.add(dropIn, 0o644, []byte(iniFile(
		"Settings for "+t.String()+" only: mkosi skips this file for any other\ndistribution, release or architecture. Packages= are the image's kernel, for\nwhich the GPU modules and the local repository are built, and what it\nneeds to boot from a disk.",
		match, content)))

	// A pod VM boots headless: systemd-firstboot's interactive wizard (it
	// prompts on the console of a mkosi image, which has no /etc/shadow)
	// would stop the boot at "Press any key". An empty unit file masks it;
	// every VM still gets its own machine ID.
	r.files.add("mkosi.extra/etc/systemd/system/systemd-firstboot.service", 0o644, nil)

	// The root is ext4 from mkosi's default partitions; mkosi.configure
	// gives mke2fs a hash seed from Seed= (docs/mkosi.md, "Reproducible
	// builds"). A tree of the user's (--into) keeps its own file systems.
	r.files.add("mkosi.configure", 0o755, []byte(r.scriptHeader("configure", "")+configure))

	// mkosi's built-in Debian list includes a -debug suite that mirrors
	// rarely carry; a sources file in the sandbox replaces the whole list.
	r.files.add("mkosi.sandbox/etc/apt/sources.list.d/mkosi.sources", 0o644, []byte(deb822(archive)))
	if errp != nil {
		return nil, fmt.Errorf("mkosi: %w", errp)
	}
	return r.render(ctx, archive)
}

// render renders the plan's steps and what they collect.
func (r *renderer) render(ctx context.Context, archive []gpustack.AptSource) ([]File, error) {
	for _, s := range r.p.Steps {
		if err := r.step(ctx, s, archive); err != nil {
			return nil, fmt.Errorf("mkosi: step %s: %w", s.ID, err)
		}
	}
	if err := r.finish(); err != nil {
		return nil, fmt.Errorf("mkosi: %w", err)
	}
	return r.files.sorted(), nil
}

type renderer struct {
	c      Config
	p      *gpustack.Plan
	prefix string
	// universal is where the settings go that mkosi takes only at the top
	// of a tree of several images; the same as prefix in a tree of ours.
	universal string
	files     tree

	packages []string
	units    []string
	network  bool // the post-installation script downloads packages
	bake     *gpustack.BakeRepo
	// steps are the plan's steps as run-steps reads them: host paths
	// replaced by where the build's sandbox mounts them below $SRCDIR.
	steps []gpustack.Step
	// checks: a step only checks the image, which the finalize script
	// runs last in a tree of ours.
	checks bool
	// runArgs are run-steps' arguments beyond the plan and the phase for
	// the steps that change the image; specPath the tree's podvm-bake.json.
	runArgs  []string
	specPath string
	// apt: a step runs apt in the image.
	apt bool
	// record is the post-output step that records the disk beside the
	// build's manifest (mkosi record-disk); "" without a bake.
	record string
	// sources are BuildSources= mounts beyond the tree itself (host
	// directory:target below $SRCDIR); environment are the host variables
	// the scripts get (Environment=).
	sources, environment []string
}

// mount mounts the host directory of file below $SRCDIR at target, for
// the scripts, and returns the file's path there.
func (r *renderer) mount(file, target string) string {
	target = r.mountPoint(target)
	if dir, err := filepath.Abs(filepath.Dir(file)); err == nil {
		if m := dir + ":" + target; !slices.Contains(r.sources, m) {
			r.sources = append(r.sources, m)
		}
	}
	return target + "/" + filepath.Base(file)
}

// mountPoint is where BuildSources= mounts target below $SRCDIR. mkosi
// makes the mount point in the tree: in a layer it is below the layer's
// drop-in, which --remove clears, so the tree is left as it was.
func (r *renderer) mountPoint(target string) string {
	if r.c.Into == nil {
		return target
	}
	return r.universal + "mnt/" + target
}

// secret registers the passphrase variable name for mkosi's Environment=.
func (r *renderer) secret(name string) error {
	if !shellName.MatchString(name) {
		return fmt.Errorf("%q is not an environment variable name", name)
	}
	if !slices.Contains(r.environment, name) {
		r.environment = append(r.environment, name)
	}
	return nil
}

// giveBack is the assignment that gives a registered passphrase back to
// one command, from the unexported shell variable each script keeps it in.
func giveBack(name string) string { return name + "=\"$" + secretVar(name) + "\" " }

var shellName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// secretVar is the unexported shell variable that keeps a passphrase.
func secretVar(name string) string { return "podvm_secret_" + name }

// sandboxAndImage writes an apt file into the sandbox, for the build, and
// into the image, for later upgrades, as the Packer path leaves it.
func (r *renderer) sandboxAndImage(p string, data []byte) {
	r.files.add(r.universal+"mkosi.sandbox"+p, 0o644, data)
	r.files.add(r.prefix+"mkosi.extra"+p, 0o644, data)
}

func (r *renderer) header(name string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: generated by packer-plugin-podvm mkosi for %s.\nRegenerate it instead of editing; see docs/mkosi.md.\n", name, r.p.Target)
	for _, n := range r.p.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	return b.String()
}

func (r *renderer) step(ctx context.Context, s gpustack.Step, archive []gpustack.AptSource) error {
	out := gpustack.Step{ID: s.ID, Title: s.Title}
	for _, a := range s.Actions {
		x, err := r.action(ctx, a, archive)
		if err != nil {
			return err
		}
		out.Actions = append(out.Actions, x)
	}
	r.steps = append(r.steps, out)
	// In a layer, checks stay in the post-installation script: a tree may
	// clean the package metadata and remove files (CleanPackageMetadata=,
	// RemoveFiles=) before its finalize scripts run, and the checks read
	// both. Only the scan for key material runs last.
	if s.Checks() && r.c.Into == nil {
		r.checks = true
	}
	return nil
}

// action renders what mkosi states declaratively (declared: packages,
// trees, the sandbox's apt configuration) and arranges what the executor
// needs for the rest (network, mounts, the module cache). It returns the
// action as run-steps reads it, with host paths where the sandbox mounts
// them.
func (r *renderer) action(ctx context.Context, a gpustack.Action, archive []gpustack.AptSource) (gpustack.Action, error) {
	switch a := a.(type) {
	case gpustack.AptComponents:
		withComps := slices.Clone(archive)
		for i := range withComps {
			withComps[i].Components = append(slices.Clone(withComps[i].Components), a.Components...)
		}
		r.files.add(r.universal+"mkosi.sandbox/etc/apt/sources.list.d/mkosi.sources", 0o644, []byte(deb822(withComps)))
	case gpustack.AptSource:
		kr, err := keyring(ctx, a.Key, r.c.HTTPClient)
		if err != nil {
			return nil, err
		}
		r.sandboxAndImage(a.SourcesPath(), []byte(a.Deb822()))
		if kr != nil {
			r.sandboxAndImage(a.Keyring, kr)
		}
		// Fetched here: the build reads no key file or URL again.
		a.Key = gpustack.Key{InImage: true}
		return a, nil
	case gpustack.AptPin:
		r.sandboxAndImage(a.Path(), []byte(a.Preferences()))
	case gpustack.Install:
		r.packages = append(r.packages, a.Packages...)
	case gpustack.WriteFile:
		if !path.IsAbs(a.Path) {
			return nil, fmt.Errorf("file %q: not an absolute path", a.Path)
		}
		// The skeleton tree is in place before packages are installed, the
		// extra tree after.
		tree := "mkosi.extra"
		if a.BeforePackages {
			tree = "mkosi.skeleton"
		}
		r.files.add(r.prefix+tree+a.Path, a.Mode, []byte(a.Content))
		// The tree has it; run-steps checks that it is there.
		a.Content = ""
		return a, nil
	case gpustack.EnableUnits:
		// Presets, and systemctl enable by the executor: mkosi applies the
		// presets after the post-installation scripts.
		r.units = append(r.units, a.Units...)
	case gpustack.ChooseDriver:
		// Packages= is fixed before the build: the choice installs with
		// the sandbox's apt, which downloads.
		r.network = true
	case gpustack.IfDriverSource:
		inner := gpustack.IfDriverSource{Source: a.Source}
		for _, x := range a.Actions {
			// Presets enable units whatever the choice.
			if _, unit := x.(gpustack.EnableUnits); unit || declared(x) {
				return nil, fmt.Errorf("action %T cannot depend on the driver source taken: mkosi sets it up before the build", x)
			}
			y, err := r.action(ctx, x, archive)
			if err != nil {
				return nil, err
			}
			inner.Actions = append(inner.Actions, y)
		}
		return inner, nil
	case gpustack.BuildModules:
		if err := r.moduleCache(); err != nil {
			return nil, err
		}
	case gpustack.SignModules:
		if a.Key == nil || a.Verify {
			break
		}
		// The user's key: the key's and the certificate's directories are
		// mounted below $SRCDIR (never into the image), and run-steps
		// pipes them in as the provisioner does.
		k := *a.Key
		k.File = r.mount(a.Key.File, moduleKeySource)
		k.Cert = r.mount(a.Key.Cert, moduleCertSource)
		if e := a.Key.PassphraseEnv; e != "" {
			if err := r.secret(e); err != nil {
				return nil, fmt.Errorf("nvidia_module_signing_passphrase_env: %w", err)
			}
		}
		a.Key = &k
		return a, nil
	case gpustack.BakeRepo:
		return r.bakeRepo(a)
	case gpustack.HoldPackages, gpustack.VerifyRepo:
		// run-steps runs apt in the image for them.
		r.apt = true
	case gpustack.AptUpdate, gpustack.DeferInitramfs, gpustack.UpdateInitramfs, gpustack.ToolkitConfig,
		gpustack.CheckKernelSignatures, gpustack.CheckModules,
		gpustack.CheckDriverVersion, gpustack.VerifyExecutable:
		// Nothing for mkosi to state: run-steps runs them in the image.
	default:
		return nil, fmt.Errorf("action %T has no mkosi rendering", a)
	}
	return a, nil
}

// bakeSigningKey is the repository's signing key file, if the tree bakes
// one with a key of the user's.
func (r *renderer) bakeSigningKey() string {
	if r.bake == nil {
		return ""
	}
	return r.bake.SigningKey
}

// moduleCacheSource is where BuildSources= mounts the build host's module
// cache for the scripts.
const moduleCacheSource = "podvm-module-cache"

// moduleCache mounts the build host's module cache for run-steps, unless
// build_cache=no: mkosi always builds on the host that holds the image.
func (r *renderer) moduleCache() error {
	if r.p.Cache.Mode == cachedir.ModeNo {
		return nil
	}
	if !filepath.IsAbs(r.p.Cache.Dir) {
		return fmt.Errorf("module cache: build_cache_dir %q is not an absolute path (the generator resolves the default)", r.p.Cache.Dir)
	}
	target := r.mountPoint(moduleCacheSource)
	if m := modcache.Dir(r.p.Cache.Dir) + ":" + target; !slices.Contains(r.sources, m) {
		r.sources = append(r.sources, m)
	}
	r.runArgs = append(r.runArgs, "--cache", `"$SRCDIR"/`+shellquote.Quote(target), "--cache-max-size", fmt.Sprint(r.p.Cache.MaxSize))
	return nil
}

// moduleKeySource and moduleCertSource are where BuildSources= mounts the
// directories of the module signing key and its certificate for scripts.
const (
	moduleKeySource  = "podvm-module-key"
	moduleCertSource = "podvm-module-cert"
)

// signingKeySource is where BuildSources= mounts the signing key's
// directory for scripts: below $SRCDIR, never in the image.
const signingKeySource = "podvm-signing-key"

func (r *renderer) bakeRepo(a gpustack.BakeRepo) (gpustack.Action, error) {
	if r.bake != nil {
		return nil, errors.New("more than one repository to bake")
	}
	r.bake = &a
	r.network = true
	spec, err := bake.SpecFor(r.p, Generator)
	if err != nil {
		return nil, err
	}
	// The spec's key is where the build's sandbox mounts it, below $SRCDIR.
	if a.SigningKey != "" {
		spec.Repo.SigningKey = r.mountPoint(signingKeySource) + "/" + filepath.Base(a.SigningKey)
	}
	// The output directory is the build's, not this host's.
	spec.Repo.OutputDir = path.Base(filepath.ToSlash(a.OutputDir))
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return nil, err
	}
	r.specPath = r.prefix + "podvm-bake.json"
	r.files.add(r.specPath, 0o644, append(data, '\n'))
	pass := ""
	if a.Passphrase != "" {
		if err := r.secret(a.Passphrase); err != nil {
			return nil, fmt.Errorf("local_repo_passphrase_env: %w", err)
		}
		pass = giveBack(a.Passphrase)
	}
	artifacts := shellquote.Quote(spec.Repo.OutputDir)
	r.runArgs = append(r.runArgs, "--spec", `"$SRCDIR"/`+shellquote.Quote(r.specPath), "--artifacts", `"$OUTPUTDIR"/`+artifacts)
	r.record = fmt.Sprintf("podvm_bin=%s\n%s\"$podvm_bin\" mkosi record-disk --config \"$MKOSI_CONFIG\" --outputdir \"$OUTPUTDIR\" --artifacts \"$OUTPUTDIR\"/%s --spec \"$SRCDIR\"/%s --srcdir \"$SRCDIR\"\n",
		shellquote.Quote(r.c.Bin), pass, artifacts, shellquote.Quote(r.specPath))
	// run-steps reads the spec; the action keeps no host path.
	out := a
	out.SigningKey, out.OutputDir = spec.Repo.SigningKey, spec.Repo.OutputDir
	return out, nil
}

// runSteps is the scripts' call of run-steps for phase, the passphrases
// given back to it alone (it keeps them from the image's commands).
func (r *renderer) runSteps(phase string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "podvm_bin=%s\n", shellquote.Quote(r.c.Bin))
	args := []string{"--plan", `"$SRCDIR"/` + shellquote.Quote(r.prefix+planFileName), "--phase", phase,
		"--root", `"$BUILDROOT"`, "--srcdir", `"$SRCDIR"`}
	// The checks neither build, nor sign, nor bake.
	if phase != phaseCheck {
		args = append(args, r.runArgs...)
		for _, e := range r.environment {
			// secret registered e, a valid name, when the plan named it.
			b.WriteString(giveBack(e))
			args = append(args, "--secret-env", e)
		}
	}
	fmt.Fprintf(&b, "\"$podvm_bin\" mkosi run-steps %s\n", strings.Join(args, " "))
	return b.String()
}

// finish writes what the steps collected: the plan's settings file, the
// presets and the scripts.
func (r *renderer) finish() error {
	var errp error
	content, top := r.contentSections(&errp)
	build, err := r.buildSection(&errp)
	if err != nil {
		return err
	}
	r.writeConf(content, top, build, &errp)
	r.writePreset()
	if err := r.writeScripts(); err != nil {
		return err
	}
	return errp
}

// contentSections are the settings' [Content] keys, and those that go to
// the top of the tree in a layer (top).
func (r *renderer) contentSections(errp *error) (content, top section) {
	content.name, top.name = "Content", "Content"
	scn := setter{&content, errp}
	if r.c.Into != nil && r.apt && !slices.Contains(r.packages, "apt") {
		// A tree of ours installs apt with the boot packages; a tree the
		// layer goes into may not (a pod VM has no use for it), but the
		// hold and the repository's self-test run it in the image.
		r.packages = append(r.packages, "apt")
	}
	scn.list("Packages", r.packages)
	if len(r.packages) > 0 {
		// The plan installs without recommends everywhere; mkosi's
		// default, spelled out because it matters for the image size.
		scn.set("WithRecommends", "no")
	}
	// mkosi's own initrd collects kernel modules by its rules, not the
	// image's initramfs hooks.
	scn.list("KernelModulesInitrdExclude", r.p.InitrdExclude)
	// SourceDateEpoch= is universal: in a layer, it goes to the top.
	epoch := scn
	if r.c.Into != nil {
		epoch = setter{&top, errp}
	}
	if e := r.p.SourceDateEpoch; e >= 0 {
		// mkosi exports it to the scripts, where the repository's Release
		// date and the manifest take it.
		epoch.set("SourceDateEpoch", fmt.Sprint(e))
	}
	return content, top
}

// buildSection is the settings' [Build] section: what the scripts need of
// the host (this program, the network, the signing key, sources).
func (r *renderer) buildSection(errp *error) (section, error) {
	build := section{name: "Build"}
	sb := setter{&build, errp}
	if len(r.steps) > 0 {
		if !path.IsAbs(r.c.Bin) {
			return build, fmt.Errorf("the packer-plugin-podvm binary must be an absolute path, got %q", r.c.Bin)
		}
		// mkosi mounts extra search paths read-only into its sandbox:
		// that is how the scripts reach this program on the host. /usr
		// is in the sandbox already, and mkosi refuses paths below it.
		if d := path.Dir(r.c.Bin); d != "/usr" && !strings.HasPrefix(d, "/usr/") {
			sb.list("ExtraSearchPaths", []string{d})
		}
	}
	if r.network {
		// The post-installation script downloads the repository's .debs.
		sb.set("WithNetwork", "yes")
		// The driver choice alone downloads without a bake.
		if k := r.bakeSigningKey(); k != "" {
			if _, err := os.Stat(k); err != nil {
				return build, fmt.Errorf("local_repo_signing_key: %w", err)
			}
			r.mount(k, signingKeySource)
		}
	}
	if len(r.sources) > 0 {
		// Setting BuildSources= replaces the default mount of the tree
		// itself, so the tree is listed first. mkosi reads a relative
		// path from the directory of the file that sets it: from a
		// profile's mkosi.conf the tree is its parent's parent.
		root := "."
		if r.universal != "" {
			root = strings.TrimSuffix(strings.Repeat("../", strings.Count(r.universal, "/")), "/")
		}
		sb.list("BuildSources", append([]string{root}, r.sources...))
	}
	if len(r.environment) > 0 {
		sb.list("Environment", r.environment)
	}
	return build, nil
}

// writeConf writes the sections into the tree's drop-in, or, in a layer,
// under the profile's [Match] into the image's and the top's files.
func (r *renderer) writeConf(content, top, build section, errp *error) {
	conf := r.prefix + "mkosi.conf"
	if r.prefix == "" {
		conf = "mkosi.conf.d/50-podvm.conf"
	}
	switch {
	case r.c.Into != nil:
		var match section
		match.name = "Match"
		if p := r.c.Into.activation(); p != "" {
			setter{&match, errp}.set("Profiles", p)
		}
		if r.prefix == r.universal {
			// A tree of one image: one drop-in takes both.
			if len(content.keys)+len(top.keys)+len(build.keys) > 0 {
				content.keys = append(content.keys, top.keys...)
				r.files.add(conf, 0o644, []byte(iniFile(r.header(conf), match, content, build)))
			}
			break
		}
		if len(content.keys) > 0 {
			r.files.add(conf, 0o644, []byte(iniFile(r.header(conf), match, content)))
		}
		if len(top.keys)+len(build.keys) > 0 {
			u := r.universal + "mkosi.conf"
			r.files.add(u, 0o644, []byte(iniFile(r.header(u), match, top, build)))
		}
	case len(content.keys)+len(build.keys) > 0:
		r.files.add(conf, 0o644, []byte(iniFile(r.header(path.Base(conf)), content, build)))
	}
}

// writePreset enables the plan's units by a systemd preset.
func (r *renderer) writePreset() {
	if len(r.units) > 0 {
		var b strings.Builder
		b.WriteString("# Units the podvm GPU plan enables (systemctl preset); generated by packer-plugin-podvm.\n")
		for _, u := range r.units {
			fmt.Fprintf(&b, "enable %s\n", u)
		}
		r.files.add(r.prefix+"mkosi.extra/usr/lib/systemd/system-preset/40-podvm-gpu.preset", 0o644, []byte(b.String()))
	}
}

// writeScripts writes the plan's steps and the scripts that run them: after
// the packages are installed, after the disk is written (the record), and
// at finalize (the checks and the key-leak check).
func (r *renderer) writeScripts() error {
	// The finalize script always checks for key material, even when the
	// plan has no verification step; it runs this program for that, and
	// the post-installation script runs it to bake the repository.
	finalize := r.bake != nil || r.checks
	if len(r.steps) > 0 {
		data, err := json.MarshalIndent(planFile{Distribution: r.p.Target.Distro, Release: r.p.Target.Codename,
			Kernels: r.p.KernelSelection, Steps: r.steps}, "", "  ")
		if err != nil {
			return err
		}
		r.files.add(r.prefix+planFileName, 0o644, append(data, '\n'))
		phase := phaseInstall
		var tail string
		if r.c.Into != nil {
			phase = phaseAll
			repo := ""
			if r.bake != nil {
				repo = r.bake.Dir
			}
			tail = fmt.Sprintf("layer_packages=%s\nlayer_repo=%s\n%s",
				shellquote.Quote(strings.Join(packageNames(r.packages), " ")), shellquote.Quote(repo), layerSize)
		}
		r.files.add(r.prefix+"mkosi.postinst.d/50-podvm.sh", 0o755, []byte(r.script("post-installation", r.runSteps(phase), tail)))
	}
	if r.record != "" {
		r.files.add(r.prefix+"mkosi.postoutput.d/50-podvm-record.sh", 0o755, []byte(r.scriptHeader("post-output",
			"It runs on the build host once the disk is written; it records the\ndisk's SHA256 and root hash beside the manifest (docs/verification.md).")+
			"set -eu\n\n"+r.secretsOut()+r.record))
	}
	if finalize {
		steps := ""
		if r.checks {
			steps = r.runSteps(phaseCheck)
		}
		r.files.add(r.prefix+"mkosi.finalize.d/50-podvm-check.sh", 0o755, []byte(r.script("finalize", steps, r.leakCheck())))
	}
	return nil
}

func (r *renderer) leakCheck() string {
	var b strings.Builder
	b.WriteString(prelude + "\n")
	b.WriteString("echo '[check] No private key material in the image'\n")
	if r.bake != nil {
		fmt.Fprintf(&b, "repo_files_only %s\n", shellquote.Quote(r.bake.Dir))
	}
	fmt.Fprintf(&b, "podvm_bin=%s\n", shellquote.Quote(r.c.Bin))
	b.WriteString(noPrivateKeys)
	b.WriteString(buildLeftovers)
	return b.String()
}

// scriptHeader is the head of a script mkosi runs: what made it, what
// (what: comment lines, "" for none), and not to edit it.
func (r *renderer) scriptHeader(kind, what string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "#!/bin/sh\n# mkosi %s script generated by packer-plugin-podvm for %s.\n", kind, r.p.Target)
	if what != "" {
		b.WriteString("# " + strings.ReplaceAll(what, "\n", "\n# ") + "\n")
	}
	b.WriteString("# Regenerate the tree instead of editing it.\n")
	return b.String()
}

func (r *renderer) script(kind, steps, tail string) string {
	var b strings.Builder
	b.WriteString(r.scriptHeader(kind, "It runs on the build host in mkosi's sandbox; $BUILDROOT is the image.\nThe plan's steps run in packer-plugin-podvm (mkosi run-steps), which\nruns each command in the image with mkosi-chroot."))
	b.WriteString("set -eu\n\n")
	b.WriteString(r.secretsOut())
	if steps != "" {
		b.WriteString("\n" + steps)
	}
	if tail != "" {
		b.WriteString("\n" + tail)
	}
	return b.String()
}

// secretsOut moves the passphrases out of a script's environment.
// mkosi's Environment= gives them to every script, and mkosi-chroot
// passes them on to every command in the image (maintainer scripts,
// DKMS): they leave the environment before anything runs, and only
// run-steps gets them back (runSteps), which keeps them from every command
// it runs in the image.
func (r *renderer) secretsOut() string {
	if len(r.environment) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("# Passphrases: out of the environment; only run-steps gets them.\n")
	for _, e := range r.environment {
		// Not every script signs, and so not every one reads it.
		fmt.Fprintf(&b, "# shellcheck disable=SC2034 # for run-steps, if this script runs the steps that sign.\n%s=${%s-}\nunset %s\n", secretVar(e), e, e)
	}
	b.WriteString("\n")
	return b.String()
}

func deb822(srcs []gpustack.AptSource) string {
	parts := make([]string, len(srcs))
	for i, s := range srcs {
		parts[i] = s.Deb822()
	}
	return strings.Join(parts, "\n")
}

// packageNames drops the =version of each package.
func packageNames(pkgs []string) []string {
	names := make([]string, len(pkgs))
	for i, p := range pkgs {
		names[i], _, _ = strings.Cut(p, "=")
	}
	return names
}
