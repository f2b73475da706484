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
	// Bin is the host path of packer-plugin-podvm: the post-installation
	// script runs it to index and sign the local repository.
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
	for i, s := range r.p.Steps {
		if err := r.step(ctx, i+1, len(r.p.Steps), s, archive); err != nil {
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
	postinst []string // script fragments, one per step
	finalize []string
	// record is the post-output step that records the disk beside the
	// build's manifest (mkosi record-disk); "" without a bake.
	record string
	// needBin: a script runs this program on the build host.
	needBin bool
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

// secret registers the passphrase variable name for mkosi's Environment=
// and returns the assignment that gives it back to one command, from the
// unexported shell variable each script keeps it in.
func (r *renderer) secret(name string) (string, error) {
	if !shellName.MatchString(name) {
		return "", fmt.Errorf("%q is not an environment variable name", name)
	}
	if !slices.Contains(r.environment, name) {
		r.environment = append(r.environment, name)
	}
	return name + "=\"$" + secretVar(name) + "\" ", nil
}

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

// verifying reports whether every action of a step only checks the image:
// such steps run in the finalize script, after mkosi's own final steps.
func verifying(s gpustack.Step) bool {
	for _, a := range s.Actions {
		switch a := a.(type) {
		case gpustack.CheckModules, gpustack.CheckDriverVersion, gpustack.VerifyRepo, gpustack.VerifyExecutable:
		case gpustack.SignModules:
			if !a.Verify {
				return false
			}
		case gpustack.IfDriverSource:
			if !verifying(gpustack.Step{Actions: a.Actions}) {
				return false
			}
		default:
			// CheckKernelSignatures among them: it records the signatures
			// the bake reads, so it runs before it.
			return false
		}
	}
	return len(s.Actions) > 0
}

func (r *renderer) step(ctx context.Context, i, n int, s gpustack.Step, archive []gpustack.AptSource) error {
	var b strings.Builder
	fmt.Fprintf(&b, "echo %s\n", shellquote.Quote(fmt.Sprintf("[%d/%d] %s", i, n, s.Title)))
	for _, a := range s.Actions {
		if err := r.action(ctx, &b, a, archive); err != nil {
			return err
		}
	}
	// In a layer, checks stay in the post-installation script: a tree may
	// clean the package metadata and remove files (CleanPackageMetadata=,
	// RemoveFiles=) before its finalize scripts run, and the checks read
	// both. Only the scan for key material runs last.
	if verifying(s) && r.c.Into == nil {
		r.finalize = append(r.finalize, b.String())
	} else {
		r.postinst = append(r.postinst, b.String())
	}
	return nil
}

// action renders one action: declaratively where mkosi has a setting for
// it, else as script text. A script line still reports what mkosi did, so
// the build log shows every step of the plan.
func (r *renderer) action(ctx context.Context, b *strings.Builder, a gpustack.Action, archive []gpustack.AptSource) error {
	switch a := a.(type) {
	case gpustack.AptComponents:
		withComps := slices.Clone(archive)
		for i := range withComps {
			withComps[i].Components = append(slices.Clone(withComps[i].Components), a.Components...)
		}
		r.files.add(r.universal+"mkosi.sandbox/etc/apt/sources.list.d/mkosi.sources", 0o644, []byte(deb822(withComps)))
		fmt.Fprintf(b, "echo %s\n", shellquote.Quote("  mkosi: archive components "+strings.Join(a.Components, " ")+" in the sandbox sources"))
	case gpustack.AptSource:
		kr, err := keyring(ctx, a.Key, r.c.HTTPClient)
		if err != nil {
			return err
		}
		src := []byte(a.Deb822())
		r.sandboxAndImage(a.SourcesPath(), src)
		if kr != nil {
			r.sandboxAndImage(a.Keyring, kr)
		}
		fmt.Fprintf(b, "echo %s\n", shellquote.Quote("  mkosi: apt source "+a.SourcesPath()+" (sandbox and image)"))
	case gpustack.AptPin:
		r.sandboxAndImage(a.Path(), []byte(a.Preferences()))
		fmt.Fprintf(b, "echo %s\n", shellquote.Quote("  mkosi: apt pin "+a.Path()+" (sandbox and image)"))
	case gpustack.AptUpdate:
		b.WriteString("echo '  mkosi: package lists synced before installing'\n")
	case gpustack.Install:
		r.packages = append(r.packages, a.Packages...)
		fmt.Fprintf(b, "echo %s\ninstalled %s\n", shellquote.Quote("  mkosi: Packages= "+strings.Join(a.Packages, " ")), shellquote.Join(packageNames(a.Packages)...))
	case gpustack.WriteFile:
		if !path.IsAbs(a.Path) {
			return fmt.Errorf("file %q: not an absolute path", a.Path)
		}
		// The skeleton tree is in place before packages are installed, the
		// extra tree after.
		tree := "mkosi.extra"
		if a.BeforePackages {
			tree = "mkosi.skeleton"
		}
		r.files.add(r.prefix+tree+a.Path, a.Mode, []byte(a.Content))
		// printf, not echo: a unit's path may hold a backslash (\x2d).
		fmt.Fprintf(b, "printf '%%s\\n' %s\nexists %s\n", shellquote.Quote("  "+strings.TrimPrefix(tree, "mkosi.")+" tree: "+a.Path), shellquote.Quote(a.Path))
	case gpustack.EnableUnits:
		r.units = append(r.units, a.Units...)
		fmt.Fprintf(b, "enable_units %s\n", shellquote.Join(a.Units...))
	case gpustack.ChooseDriver:
		// Packages= is fixed before the build, so the choice installs
		// from the script, with mkosi's apt-get acting on the image.
		r.network = true
		var pre []string
		for _, q := range a.Precompiled {
			pre = append(pre, shellquote.Quote(q))
		}
		noRec := ""
		if a.NoRecommends {
			noRec = " --no-install-recommends"
		}
		fmt.Fprintf(b, "%sdriver_source=$(%s $kernels | tail -n 1)\n", scImageScript, a.ProbeCommand())
		fmt.Fprintf(b, "case $driver_source in\n%s)\n\tpkgs=\n\tfor k in $kernels; do pkgs=\"$pkgs %s\"; done\n\tpkgs=\"$pkgs %s\"\n\t;;\n%s) pkgs=%s ;;\n*) die \"driver source probe: got '$driver_source'\" ;;\nesac\n",
			gpustack.TakenPrecompiled, strings.ReplaceAll(a.Modules, gpustack.KernelPlaceholder, "$k"), strings.Join(pre, " "), gpustack.TakenDistro, shellquote.Quote(strings.Join(a.DKMS, " ")))
		fmt.Fprintf(b, "echo \"  driver source taken: $driver_source; apt-get install$pkgs\"\n%sapt-get -q install%s $pkgs\n", scWordList, noRec)
		// Written inside the image: the packages' scripts have run, and a
		// link they left must not lead out of $BUILDROOT.
		fmt.Fprintf(b, "%smkosi-chroot sh -c 'mkdir -p \"$(dirname \"$2\")\" && echo \"$1\" >\"$2\"' podvm \"$driver_source\" %s\n%sinstalled $pkgs\n",
			scImageScript, shellquote.Quote(gpustack.DriverSourceFile), scWordList)
	case gpustack.IfDriverSource:
		var inner strings.Builder
		for _, x := range a.Actions {
			switch x.(type) {
			case gpustack.Install, gpustack.WriteFile, gpustack.EnableUnits, gpustack.AptSource, gpustack.AptPin, gpustack.AptComponents:
				return fmt.Errorf("action %T cannot depend on the driver source taken: mkosi sets it up before the build", x)
			}
			if err := r.action(ctx, &inner, x, archive); err != nil {
				return err
			}
		}
		fmt.Fprintf(b, "if [ \"$(mkosi-chroot cat %s)\" = %s ]; then\n%selse\n\techo %s\nfi\n",
			shellquote.Quote(gpustack.DriverSourceFile), shellquote.Quote(a.Source), inner.String(), shellquote.Quote("  skipped: only where the driver source taken is "+a.Source))
	case gpustack.CheckKernelSignatures:
		fmt.Fprintf(b, "%smkosi-chroot %s $kernels\n", scImageScript, a.Command())
	case gpustack.BuildModules:
		return r.buildModules(b, a)
	case gpustack.CheckModules:
		fmt.Fprintf(b, "check_modules %s\n", shellquote.Join(a.Modules...))
	case gpustack.SignModules:
		// mkosi-chroot gives every call a fresh tmpfs on /run: the key is
		// made (or piped in), used and gone within this one command.
		if a.Key == nil || a.Verify {
			fmt.Fprintf(b, "%smkosi-chroot %s $kernels\n", scImageScript, a.Command())
			break
		}
		// The user's key: the key's and the certificate's directories are
		// mounted below $SRCDIR (never into the image), and this program
		// pipes them in as the provisioner does.
		key := r.mount(a.Key.File, moduleKeySource)
		cert := r.mount(a.Key.Cert, moduleCertSource)
		passEnv, pass := "", ""
		if e := a.Key.PassphraseEnv; e != "" {
			var err error
			if pass, err = r.secret(e); err != nil {
				return fmt.Errorf("nvidia_module_signing_passphrase_env: %w", err)
			}
			passEnv = " --passphrase-env " + shellquote.Quote(e)
		}
		r.needBin = true
		fmt.Fprintf(b, "podvm_bin=%s\n%s%s\"$podvm_bin\" mkosi module-key --key \"$SRCDIR\"/%s --cert \"$SRCDIR\"/%s%s |\n\tmkosi-chroot %s $kernels\n",
			shellquote.Quote(r.c.Bin), scImageScript, pass, shellquote.Quote(key), shellquote.Quote(cert), passEnv, a.Command())
	case gpustack.HoldPackages:
		fmt.Fprintf(b, "%smkosi-chroot %s $kernels\n", scImageScript, a.Command())
	case gpustack.CheckDriverVersion:
		fmt.Fprintf(b, "%smkosi-chroot %s $kernels\n", scImageScript, a.Command())
	case gpustack.DeferInitramfs:
		// mkosi installs every package in one transaction, before any
		// script: nothing to defer.
		b.WriteString("echo '  mkosi: the packages install in one transaction; nothing to defer'\n")
	case gpustack.UpdateInitramfs:
		b.WriteString(updateInitramfs)
	case gpustack.ToolkitConfig:
		// The provisioner's spelling; nvidia-ctk takes --config=.
		args := []string{"--in-place", "--config=" + a.Path}
		for _, kv := range a.Settings {
			args = append(args, "--set", kv.Key+"="+kv.Value)
		}
		fmt.Fprintf(b, "echo %s\n", shellquote.Quote("  nvidia-ctk config "+a.Path))
		fmt.Fprintf(b, "mkosi-chroot nvidia-ctk config %s\n", shellquote.Join(args...))
	case gpustack.BakeRepo:
		if err := r.bakeRepo(b, a); err != nil {
			return err
		}
	case gpustack.VerifyRepo:
		closure := "full"
		if a.ImageStatus() {
			closure = "partial"
		}
		fmt.Fprintf(b, "verify_repo %s %s %s %s\n", shellquote.Quote(a.Dir), shellquote.Quote(a.Keyring), closure, shellquote.Quote(strings.Join(a.Packages, " ")))
	case gpustack.VerifyExecutable:
		fmt.Fprintf(b, "executable %s\n", shellquote.Join(a.Paths...))
	default:
		return fmt.Errorf("action %T has no mkosi rendering", a)
	}
	return nil
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

// buildModules has this program build the DKMS modules in the image with
// mkosi-chroot, through the module cache unless build_cache=no: mkosi
// always builds on the host that holds the image.
func (r *renderer) buildModules(b *strings.Builder, a gpustack.BuildModules) error {
	r.needBin = true
	fmt.Fprintf(b, "podvm_bin=%s\n", shellquote.Quote(r.c.Bin))
	cache := ""
	if r.p.Cache.Mode != "no" {
		if !filepath.IsAbs(r.p.Cache.Dir) {
			return fmt.Errorf("module cache: build_cache_dir %q is not an absolute path (the generator resolves the default)", r.p.Cache.Dir)
		}
		target := r.mountPoint(moduleCacheSource)
		if m := modcache.Dir(r.p.Cache.Dir) + ":" + target; !slices.Contains(r.sources, m) {
			r.sources = append(r.sources, m)
		}
		cache = fmt.Sprintf(" --cache \"$SRCDIR\"/%s --cache-max-size %d", target, r.p.Cache.MaxSize)
	}
	fmt.Fprintf(b, "\"$podvm_bin\" mkosi modules --root \"$BUILDROOT\" --kernels \"$kernels\"%s\n", cache)
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

func (r *renderer) bakeRepo(b *strings.Builder, a gpustack.BakeRepo) error {
	if r.bake != nil {
		return errors.New("more than one repository to bake")
	}
	r.bake = &a
	r.network = true
	spec, err := bake.SpecFor(r.p, Generator)
	if err != nil {
		return err
	}
	// The spec's key is where the build's sandbox mounts it, below $SRCDIR.
	if a.SigningKey != "" {
		spec.Repo.SigningKey = r.mountPoint(signingKeySource) + "/" + filepath.Base(a.SigningKey)
	}
	// The output directory is the build's, not this host's.
	spec.Repo.OutputDir = path.Base(filepath.ToSlash(a.OutputDir))
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return err
	}
	specPath := r.prefix + "podvm-bake.json"
	r.files.add(specPath, 0o644, append(data, '\n'))

	fmt.Fprintf(b, "repo=\"$BUILDROOT\"%s\nmkdir -p \"$repo\"\npkgs=\n", shellquote.Quote(a.Dir))
	// Templates without a kernel are listed once, the others per kernel.
	var once, per []string
	for _, p := range a.Packages {
		if strings.Contains(p, gpustack.KernelPlaceholder) {
			per = append(per, strings.ReplaceAll(p, gpustack.KernelPlaceholder, "$k"))
		} else {
			once = append(once, p)
		}
	}
	if len(per) > 0 {
		fmt.Fprintf(b, "for k in $kernels; do pkgs=\"$pkgs %s\"; done\n", strings.Join(per, " "))
	}
	if len(once) > 0 {
		fmt.Fprintf(b, "pkgs=\"$pkgs %s\"\n", strings.Join(once, " "))
	}
	if a.Closure {
		b.WriteString(downloadClosure)
	} else {
		b.WriteString(downloadOnly)
	}
	artifacts := spec.Repo.OutputDir
	pass := ""
	if a.Passphrase != "" {
		if pass, err = r.secret(a.Passphrase); err != nil {
			return fmt.Errorf("local_repo_passphrase_env: %w", err)
		}
	}
	fmt.Fprintf(b, "podvm_bin=%s\n", shellquote.Quote(r.c.Bin))
	fmt.Fprintf(b, "%s\"$podvm_bin\" mkosi bake-repo --root \"$BUILDROOT\" --spec \"$SRCDIR\"/%s --srcdir \"$SRCDIR\" --kernels \"$kernels\" --artifacts \"$OUTPUTDIR\"/%s\n",
		pass, shellquote.Quote(specPath), shellquote.Quote(artifacts))
	r.record = fmt.Sprintf("podvm_bin=%s\n%s\"$podvm_bin\" mkosi record-disk --config \"$MKOSI_CONFIG\" --outputdir \"$OUTPUTDIR\" --artifacts \"$OUTPUTDIR\"/%s --spec \"$SRCDIR\"/%s --srcdir \"$SRCDIR\"\n",
		shellquote.Quote(r.c.Bin), pass, shellquote.Quote(artifacts), shellquote.Quote(specPath))
	return nil
}

// finish writes what the steps collected: the plan's settings file, the
// presets and the scripts.
func (r *renderer) finish() error {
	var errp error
	var content, build section
	content.name, build.name = "Content", "Build"
	scn := setter{&content, &errp}
	if r.c.Into != nil && len(r.packages) > 0 && !slices.Contains(r.packages, "apt") {
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
	var top section
	top.name = "Content"
	epoch := scn
	if r.c.Into != nil {
		epoch = setter{&top, &errp}
	}
	if e := r.p.SourceDateEpoch; e >= 0 {
		// mkosi exports it to the scripts, where the repository's Release
		// date and the manifest take it.
		epoch.set("SourceDateEpoch", fmt.Sprint(e))
	}
	sb := setter{&build, &errp}
	// The finalize script always checks for key material, even when the
	// plan has no verification step; it runs this program for that, and
	// the post-installation script runs it to bake the repository.
	finalize := r.bake != nil || len(r.finalize) > 0
	if finalize || r.network || r.needBin {
		if !path.IsAbs(r.c.Bin) {
			return fmt.Errorf("the packer-plugin-podvm binary must be an absolute path, got %q", r.c.Bin)
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
				return fmt.Errorf("local_repo_signing_key: %w", err)
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
	conf := r.prefix + "mkosi.conf"
	if r.prefix == "" {
		conf = "mkosi.conf.d/50-podvm.conf"
	}
	switch {
	case r.c.Into != nil:
		var match section
		match.name = "Match"
		setter{&match, &errp}.set("Profiles", Profile)
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
	if len(r.units) > 0 {
		var b strings.Builder
		b.WriteString("# Units the podvm GPU plan enables (systemctl preset); generated by packer-plugin-podvm.\n")
		for _, u := range r.units {
			fmt.Fprintf(&b, "enable %s\n", u)
		}
		r.files.add(r.prefix+"mkosi.extra/usr/lib/systemd/system-preset/40-podvm-gpu.preset", 0o644, []byte(b.String()))
	}
	if r.c.Into != nil && len(r.postinst) > 0 {
		repo := ""
		if r.bake != nil {
			repo = r.bake.Dir
		}
		r.postinst = append(r.postinst, fmt.Sprintf("layer_packages=%s\nlayer_repo=%s\n%s",
			shellquote.Quote(strings.Join(packageNames(r.packages), " ")), shellquote.Quote(repo), layerSize))
	}
	if len(r.postinst) > 0 {
		r.files.add(r.prefix+"mkosi.postinst.d/50-podvm.sh", 0o755, []byte(r.script("post-installation", r.postinst, "")))
	}
	if r.record != "" {
		r.files.add(r.prefix+"mkosi.postoutput.d/50-podvm-record.sh", 0o755, []byte(r.scriptHeader("post-output",
			"It runs on the build host once the disk is written; it records the\ndisk's SHA256 and root hash beside the manifest (docs/verification.md).")+
			"set -eu\n\n"+r.secretsOut()+r.record))
	}
	if finalize {
		r.files.add(r.prefix+"mkosi.finalize.d/50-podvm-check.sh", 0o755, []byte(r.script("finalize", r.finalize, r.leakCheck())))
	}
	return errp
}

func (r *renderer) leakCheck() string {
	var b strings.Builder
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

func (r *renderer) script(kind string, steps []string, tail string) string {
	t := r.p.Target
	var b strings.Builder
	b.WriteString(r.scriptHeader(kind, "It runs on the build host in mkosi's sandbox; $BUILDROOT is the image."))
	b.WriteString("set -eu\n\n")
	b.WriteString(r.secretsOut())
	// Resolve fills kernels from the table's default ("newest").
	fmt.Fprintf(&b, "target_distribution=%s\ntarget_release=%s\nkernels_setting=%s\n",
		shellquote.Quote(t.Distro), shellquote.Quote(t.Codename), shellquote.Quote(r.p.KernelSelection))
	b.WriteString(prelude)
	// The apt half of VerifyRepo, shared with the provisioner.
	b.WriteString("\n" + gpustack.VerifyRepoShell)
	for _, s := range steps {
		b.WriteString("\n" + s)
	}
	if tail != "" {
		b.WriteString("\n" + tail)
	}
	return b.String()
}

// secretsOut moves the passphrases out of a script's environment.
// mkosi's Environment= gives them to every script, and mkosi-chroot
// passes them on to every command in the image (maintainer scripts,
// DKMS): they leave the environment before anything runs, and only the
// command that signs gets one back (secret).
func (r *renderer) secretsOut() string {
	if len(r.environment) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("# Passphrases: out of the environment; only the signing commands get them.\n")
	for _, e := range r.environment {
		// Not every script signs, and so not every one reads it.
		fmt.Fprintf(&b, "# shellcheck disable=SC2034 # for the signing commands, if this script has any.\n%s=${%s-}\nunset %s\n", secretVar(e), e, e)
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

// Shellcheck directives for rendered lines that do on purpose what it
// warns about: a script single-quoted for sh -c to expand in the image
// (SC2016), and the word lists $kernels and $pkgs, which split into kernel
// versions and package names, none holding a blank or a glob (SC2086).
const (
	scImageScript = "# shellcheck disable=SC2016,SC2086 # a script for sh -c in the image; $kernels splits into versions.\n"
	scWordList    = "# shellcheck disable=SC2086 # $pkgs splits into package names.\n"
)

// packageNames drops the =version of each package.
func packageNames(pkgs []string) []string {
	names := make([]string, len(pkgs))
	for i, p := range pkgs {
		names[i], _, _ = strings.Cut(p, "=")
	}
	return names
}
