package mkosi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/podvm-gpu/packer-plugin-podvm/agenttree"
	"github.com/podvm-gpu/packer-plugin-podvm/aptsource"
	"github.com/podvm-gpu/packer-plugin-podvm/bake"
	"github.com/podvm-gpu/packer-plugin-podvm/cachedir"
	"github.com/podvm-gpu/packer-plugin-podvm/cmdflags"
	"github.com/podvm-gpu/packer-plugin-podvm/gpustack"
	"github.com/podvm-gpu/packer-plugin-podvm/modcache"
	"github.com/podvm-gpu/packer-plugin-podvm/settings"
)

// RunCommand is the mkosi subcommand: it renders a tree from the settings
// (flags, then the environment) and the target's flags. Hidden
// subcommands are the build's own: run-steps, record-disk and check-keys.
func RunCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	// run-steps is the scripts' one call into the plan's executor; it is
	// not meant for people, so usage does not list it.
	if len(args) > 0 && args[0] == "run-steps" {
		return runSteps(ctx, args[1:], stdout, stderr)
	}
	// record-disk is the post-output script's step, equally hidden.
	if len(args) > 0 && args[0] == "record-disk" {
		return runRecordDisk(args[1:], stdout, stderr)
	}
	// check-keys is the finalize script's secret-key check, equally hidden.
	if len(args) > 0 && args[0] == "check-keys" {
		return runCheckKeys(args[1:], stdout, stderr)
	}
	g, code, ok := parseGenerate(args, stderr)
	if !ok {
		return code
	}
	if g.remove {
		return removeLayer(g.into, stdout, stderr)
	}
	if err := g.run(ctx, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, err)
		var ue usageError
		if errors.As(err, &ue) {
			return 2
		}
		return 1
	}
	return 0
}

// generate is a generator run as the flags ask for it.
type generate struct {
	fs                          *pflag.FlagSet
	out, into, image, layerWith string
	remove, force               bool
	distro, release, arch       string
	mirror, securityMirror, bin string
	explicit                    map[string]settings.Raw
}

// usageError is an error in what the user asked for (exit status 2), not a
// failure to do it (1).
type usageError struct{ error }

func usage(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// parseGenerate reads the generator's flags; ok is false when the command
// ends there, with the exit code.
func parseGenerate(args []string, stderr io.Writer) (g *generate, code int, ok bool) {
	g = &generate{fs: pflag.NewFlagSet("mkosi", pflag.ContinueOnError)}
	fs := g.fs
	fs.StringVar(&g.out, "output", "", "directory to write the tree into (this or --into is required)")
	fs.StringVar(&g.into, "into", "", "an existing mkosi tree (one image, or several in mkosi.images) to add the GPU layer to, in its own profile "+Profile+"; distribution, release and architecture come from the tree")
	fs.StringVar(&g.image, "image", "", "with --into: the image of mkosi.images that gets the layer (default: the one bootable image, else system)")
	fs.StringVar(&g.layerWith, "layer-profile", Profile, "with --into: the profile that switches the layer on: "+Profile+" (its own), one of the tree's own profiles (cloud-api-adaptor's make image selects production), or "+AlwaysActive)
	fs.BoolVar(&g.remove, "remove", false, "with --into: take the layer out of the tree again, leaving it as it was before")
	fs.BoolVar(&g.force, "force", false, "regenerate into a non-empty --output, removing the previous generation's files")
	fs.StringVar(&g.distro, "distribution", "debian", "target distribution: debian|ubuntu")
	fs.StringVar(&g.release, "release", "13", "target release, version or codename: 12|13|bookworm|trixie, 22.04|24.04|26.04|jammy|noble|resolute")
	fs.StringVar(&g.arch, "architecture", "amd64", "target dpkg architecture: amd64|arm64")
	fs.StringVar(&g.mirror, "mirror", "", "distro archive URL for the build's apt sources (default: the host's archive for the target distribution, from "+aptsource.Dir+")")
	fs.StringVar(&g.securityMirror, "security-mirror", "", "security archive URL for the release's -security suite (default: the host's, from "+aptsource.Dir+"; with none found, or --security-mirror=\"\", the build has no security suite)")
	fs.StringVar(&g.bin, "podvm-bin", "", "absolute path of packer-plugin-podvm on the build host, which mkosi runs to sign the repository (default: $PODVM_BIN, else this binary)")
	collect := settings.BindFlags(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: packer-plugin-podvm mkosi --output DIR [--distribution D --release R --architecture A] [--force] [setting flags]\n       packer-plugin-podvm mkosi --into TREE [--image NAME] [setting flags]   (the GPU layer in an existing tree, profile "+Profile+")\n       packer-plugin-podvm mkosi --into TREE --remove\n\nEvery setting also reads its environment variable (see `packer-plugin-podvm options`).\n\nFlags:")
		fs.PrintDefaults()
	}
	if code, ok := cmdflags.Parse(fs, args, false, stderr); !ok {
		return nil, code, false
	}
	if (g.out == "") == (g.into == "") || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "mkosi: give one of --output DIR (a tree of its own) and --into DIR (a layer in an existing tree); no arguments")
		fs.Usage()
		return nil, 2, false
	}
	if g.into == "" && (g.image != "" || g.remove || fs.Changed("layer-profile")) {
		fmt.Fprintln(stderr, "mkosi: --image, --layer-profile and --remove go with --into DIR")
		return nil, 2, false
	}
	g.explicit = collect()
	return g, 0, true
}

// run writes the tree, or the layer into the user's tree.
func (g *generate) run(ctx context.Context, stdout, stderr io.Writer) error {
	var layer *Layer
	if g.into != "" {
		var err error
		if layer, err = intoTarget(g.into, g.image, g.fs, &g.distro, &g.release, &g.arch); err != nil {
			return usage("mkosi: %w", err)
		}
		if layer.ActiveWith, err = layerProfile(g.into, g.layerWith); err != nil {
			return usage("mkosi: %w", err)
		}
	}
	o, t, err := g.resolve(stderr)
	if err != nil {
		return err
	}
	// Local things first: nothing below may hide them behind a network
	// error (fetching a repository key).
	if layer == nil {
		if err := CheckOutput(g.out, g.force); err != nil {
			return usageError{err}
		}
	}
	if err := g.checkLocal(o); err != nil {
		return err
	}
	archive, security, err := mkosiMirrors(aptsource.Dir, t, aptsource.Setting{Value: g.mirror, Set: g.fs.Changed("mirror")}, aptsource.Setting{Value: g.securityMirror, Set: g.fs.Changed("security-mirror")}, stdout, stderr)
	if err != nil {
		return usage("mkosi: %w", err)
	}
	t.Mirror, t.SecurityMirror = archive, security
	plan, err := gpustack.NewPlan(o, t)
	if err != nil {
		return fmt.Errorf("mkosi: %w", err)
	}
	agents, err := agentTree(o.PodVMBinaries, layer != nil, stdout)
	if err != nil {
		return err
	}
	files, err := Render(ctx, Config{Plan: plan, Bin: g.bin, Into: layer, AgentTree: agents})
	if err != nil {
		return err
	}
	if layer != nil {
		if err := WriteLayer(g.into, files); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "mkosi: added the GPU layer for %s to %s (%d files, listed in %s)\n", t, g.into, len(files), layerRecord)
		switch p := layer.activation(); p {
		case "":
			fmt.Fprintf(stdout, "build with: mkosi -C %s build   (the layer is always on); remove with: packer-plugin-podvm mkosi --into %s --remove\n", g.into, g.into)
		case Profile:
			fmt.Fprintf(stdout, "build with: mkosi -C %s --profile %s build   (with the tree's own profiles: --profile PROFILE,%s); remove with: packer-plugin-podvm mkosi --into %s --remove\n", g.into, Profile, Profile, g.into)
		default:
			fmt.Fprintf(stdout, "build with: mkosi -C %s --profile %s build   (the layer is on wherever profile %s is selected); remove with: packer-plugin-podvm mkosi --into %s --remove\n", g.into, p, p, g.into)
		}
		return nil
	}
	if err := Write(g.out, files, g.force); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "mkosi: wrote %d files for %s into %s\n", len(files), t, g.out)
	if o.EnableGPU {
		fmt.Fprintf(stdout, "build with: mkosi -C %s build   (profile %s selected; --profile= builds without the GPU stack)\n", g.out, Profile)
	}
	return nil
}

// resolve resolves the settings and the release, showing their warnings,
// and settles the module cache's path on this host, where the build runs
// and from where the tree mounts it.
func (g *generate) resolve(stderr io.Writer) (settings.Options, gpustack.Target, error) {
	res, err := settings.Resolve(settings.Input{Explicit: g.explicit, ExplicitFrom: settings.FromFlag})
	if err != nil {
		return settings.Options{}, gpustack.Target{}, usage("mkosi: %w", err)
	}
	for _, w := range res.Warnings {
		fmt.Fprintln(stderr, "mkosi: warning:", w)
	}
	o := res.Options
	if o.BuildCache != cachedir.ModeNo {
		if o.CacheDir, err = cachedir.Root(o.CacheDir); err != nil {
			return o, gpustack.Target{}, usage("mkosi: %w", err)
		}
		if err := trustModuleCache(o.CacheDir, o.EnableGPU); err != nil {
			fmt.Fprintf(stderr, "mkosi: module cache off (build_cache=no): %v\n", err)
			o.BuildCache = cachedir.ModeNo
		}
	}
	t, err := gpustack.LookupRelease(g.distro, g.release, g.arch)
	if err != nil {
		return o, t, usage("mkosi: %w", err)
	}
	t.KernelsAtBuildTime = true
	for _, w := range gpustack.TargetWarnings(o, t) {
		fmt.Fprintln(stderr, "mkosi: warning:", w)
	}
	return o, t, nil
}

// checkLocal settles the binary the tree runs and checks the files the
// settings name on this host, every problem at once.
func (g *generate) checkLocal(o settings.Options) error {
	binFrom := "--podvm-bin"
	if g.bin == "" {
		g.bin, binFrom = os.Getenv("PODVM_BIN"), "PODVM_BIN"
	}
	if g.bin == "" {
		// This very program: it exists, but mkosi may not read its path.
		var err error
		if g.bin, err = os.Executable(); err != nil {
			return fmt.Errorf("mkosi: locate this binary (pass --podvm-bin): %w", err)
		}
		binFrom = "this binary's path"
	}
	if err := checkBin(g.bin); err != nil {
		return usage("mkosi: %s %v", binFrom, err)
	}
	errs := checkHostPaths(o)
	if len(errs) == 0 {
		errs = bake.CheckInputs(o, time.Now())
	}
	if len(errs) > 0 {
		for i, e := range errs {
			errs[i] = fmt.Errorf("mkosi: %w", e)
		}
		return usageError{errors.Join(errs...)}
	}
	return nil
}

// agentTree is podvm_binaries as the tree names it: absolute, and never
// with --into, whose tree brings its own agent stack.
func agentTree(dir string, into bool, stdout io.Writer) (string, error) {
	switch {
	case dir != "" && into:
		return "", usage("mkosi: podvm_binaries: with --into the tree brings its own agent stack (cloud-api-adaptor's: SkeletonTrees=resources/binaries-tree); leave podvm_binaries out")
	case dir != "":
		abs, err := filepath.Abs(dir)
		if err != nil {
			return "", usage("mkosi: podvm_binaries: %w", err)
		}
		// Checked when the settings were read; read again for its links,
		// which mkosi copies as links: name those whose targets the tree
		// lacks, so that a unit the image does not provide is seen before
		// boot.
		tree, err := agenttree.Check(abs)
		if err != nil {
			return "", usage("mkosi: podvm_binaries: %s: %w", abs, err)
		}
		for _, l := range tree.Elsewhere() {
			where := "the image or its skeleton must provide it"
			if l.MadeAtBoot() {
				where = "made at boot"
			}
			fmt.Fprintf(stdout, "mkosi: podvm_binaries: the link %s -> %s points outside the tree (%s)\n", l.Path, l.Target, where)
		}
		return abs, nil
	case !into:
		fmt.Fprintln(stdout, "mkosi: no pod VM binaries (podvm_binaries): this tree builds a GPU base image, not a pod VM; see docs/pod-vm.md")
	}
	return "", nil
}

// trustModuleCache checks the module cache the tree will mount. Inside
// mkosi's sandbox only the mounted directory is seen, so every level from
// the cache root down to it is checked here, on the host, and created when
// missing (mkosi refuses to mount a missing directory). With the GPU stack
// off nothing is mounted, and only the root is checked.
func trustModuleCache(root string, gpu bool) error {
	if !gpu {
		return cachedir.Trusted(root)
	}
	d, err := cachedir.OpenDir(root, modcache.Dir(root), true)
	if err != nil {
		return err
	}
	return d.Close()
}

// checkBin says whether bin can be what the tree's scripts run on the
// build host: an absolute path (mkosi runs it from its own working
// directory) of an executable regular file, in a directory mkosi reads
// as written (ExtraSearchPaths=). Checked here, not when the build first
// calls it minutes later.
func checkBin(bin string) error {
	if !filepath.IsAbs(bin) {
		return fmt.Errorf("%q is relative; mkosi runs it from its own working directory, so give an absolute path", bin)
	}
	fi, err := os.Stat(bin)
	if err != nil {
		return fmt.Errorf("%q cannot be run: %w", bin, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%q is not a regular file; give the packer-plugin-podvm binary", bin)
	}
	if fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%q is not executable (mode %v); give the packer-plugin-podvm binary", bin, fi.Mode().Perm())
	}
	if err := CheckPath(filepath.Dir(bin)); err != nil {
		return fmt.Errorf("%q: its directory: %w", bin, err)
	}
	return nil
}

// checkHostPaths checks the settings that name host paths the tree has
// mkosi mount (BuildSources=), so that a path mkosi would misread is
// reported under its setting's name before anything is fetched or
// written.
func checkHostPaths(o settings.Options) []error {
	var errs []error
	check := func(key, p string) {
		if p == "" {
			return
		}
		if abs, err := filepath.Abs(p); err == nil {
			p = abs
		}
		if err := CheckPath(p); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", key, err))
		}
	}
	if o.BuildCache != cachedir.ModeNo {
		check("build_cache_dir", o.CacheDir)
	}
	if o.ModuleSigning == settings.SigningKey {
		check("nvidia_module_signing_key", o.ModuleKey)
		check("nvidia_module_signing_cert", o.ModuleCert)
	}
	check("local_repo_signing_key", o.SigningKey)
	check("podvm_binaries", o.PodVMBinaries)
	return errs
}

// mkosiMirrors settles the archive and security mirrors of the tree by
// the mirror policy of every build (aptsource.Pick): the flags when given,
// else the build host's archives for the target's distribution from the
// apt configuration under aptDir. No archive is an error that says what to
// pass; no security archive leaves the security suite out, which it
// reports on stderr. Where each came from goes to out.
func mkosiMirrors(aptDir string, t gpustack.Target, mirror, security aptsource.Setting, out, stderr io.Writer) (archive, sec string, err error) {
	name := strings.ToUpper(t.Distro[:1]) + t.Distro[1:]
	mirror.Name, security.Name = "--mirror", "--security-mirror"
	var sources []aptsource.Source
	host := func() []aptsource.Source {
		if sources == nil {
			sources = aptsource.Read(aptDir)
		}
		return sources
	}
	a, err := aptsource.Pick(aptDir, t.Distro, t.Codename, mirror, false, host)
	if err != nil {
		return "", "", fmt.Errorf("%w; give the URL of your %s mirror", err, name)
	}
	switch {
	case a.URL == "" && mirror.Set:
		return "", "", fmt.Errorf("--mirror: empty; pass the URL of your %s mirror (the directory that holds dists/%s) to build %s", name, t.Codename, t)
	case a.URL == "":
		return "", "", fmt.Errorf("--mirror: no %s archive in the host's apt sources (%s) to build %s from; pass --mirror URL, the URL of your %s mirror (the directory that holds dists/%s), and --security-mirror URL for its %s-security suite",
			name, aptDir, t, name, t.Codename, t.Codename)
	case !mirror.Set && runtime.GOARCH != t.Arch:
		fmt.Fprintf(stderr, "mkosi: note: the host's %s archive (%s) is the one its apt uses for %s; if it does not carry %s (Ubuntu, for one, serves other architectures from a separate ports archive), pass --mirror and --security-mirror\n",
			name, a.URL, runtime.GOARCH, t.Arch)
	}
	fmt.Fprintf(out, "mkosi: archive %s (from %s)\n", a.URL, a.Origin)

	s, err := aptsource.Pick(aptDir, t.Distro, t.Codename, security, true, host)
	if err != nil {
		return "", "", fmt.Errorf("%w; give the URL of your %s security mirror", err, name)
	}
	if s.URL == "" {
		why := "--security-mirror is empty"
		if !security.Set {
			why = fmt.Sprintf("no %s security archive (a %s-security suite or another release's) in the host's apt sources (%s)", name, t.Codename, aptDir)
		}
		fmt.Fprintf(stderr, "mkosi: warning: %s: the build has no %s-security suite and gets no security updates; pass --security-mirror URL to add it\n", why, t.Codename)
	} else {
		fmt.Fprintf(out, "mkosi: security archive %s (from %s)\n", s.URL, s.Origin)
	}
	return a.URL, s.URL, nil
}

func runRecordDisk(args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("mkosi record-disk", pflag.ContinueOnError)
	var r RecordDisk
	fs.StringVar(&r.Config, "config", "", "mkosi's configuration as JSON ($MKOSI_CONFIG)")
	fs.StringVar(&r.OutputDir, "outputdir", "", "where mkosi wrote the disk ($OUTPUTDIR)")
	fs.StringVar(&r.Artifacts, "artifacts", "", "the artefacts directory that holds the manifest")
	fs.StringVar(&r.Spec, "spec", "", "the tree's podvm-bake.json")
	fs.StringVar(&r.SrcDir, "srcdir", ".", "the tree as mkosi mounts it ($SRCDIR)")
	if code, ok := cmdflags.Parse(fs, args, false, stderr); !ok {
		return code
	}
	if r.Config == "" || r.OutputDir == "" || r.Artifacts == "" || r.Spec == "" {
		fmt.Fprintln(stderr, "mkosi record-disk: --config, --outputdir, --artifacts and --spec are required")
		return 2
	}
	disk, paths, err := r.Run()
	switch {
	case err != nil:
		fmt.Fprintln(stderr, err)
		return 1
	case disk == "":
		fmt.Fprintln(stdout, "  record: the output is no disk; nothing to record")
		return 0
	}
	signed := "unsigned: the repository's key was ephemeral and is gone (set local_repo_signing_key to sign it)"
	if len(paths) > 1 {
		signed = "signed with the repository's key"
	}
	fmt.Fprintf(stdout, "  record: %s in %s, %s\n", filepath.Base(disk), paths[0], signed)
	return 0
}

// runCheckKeys fails when a key file below the given image directories
// holds OpenPGP secret-key material.
func runCheckKeys(args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("mkosi check-keys", pflag.ContinueOnError)
	root := fs.String("root", "", "the image root ($BUILDROOT)")
	if code, ok := cmdflags.Parse(fs, args, true, stderr); !ok {
		return code
	}
	if *root == "" || fs.NArg() == 0 {
		fmt.Fprintln(stderr, "mkosi check-keys: --root and at least one image directory are required")
		return 2
	}
	found, err := CheckSecretKeys(*root, fs.Args())
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if len(found) > 0 {
		fmt.Fprintf(stderr, "mkosi check-keys: private key material in the image:\n  %s\n", strings.Join(found, "\n  "))
		return 1
	}
	fmt.Fprintf(stdout, "  no private key material (PEM, OpenSSH, OpenPGP, DER) in any file below %s\n", strings.Join(fs.Args(), " "))
	return 0
}

// removeLayer is --into DIR --remove.
func removeLayer(dir string, stdout, stderr io.Writer) int {
	edited, err := RemoveLayer(dir)
	for _, p := range edited {
		fmt.Fprintf(stderr, "mkosi: note: %s was edited since the layer wrote it; removed all the same (it was the layer's)\n", p)
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	fmt.Fprintf(stdout, "mkosi: removed the GPU layer from %s\n", dir)
	return 0
}

// intoTarget reads the tree at dir for the target and the image that
// gets the layer. The distribution, release and architecture are the
// tree's; a flag given explicitly must name the same.
func intoTarget(dir, image string, fs *pflag.FlagSet, distro, release, arch *string) (*Layer, error) {
	info, err := ReadTree(dir)
	if err != nil {
		return nil, err
	}
	fromTree := map[string]*string{"distribution": &info.Distribution, "release": &info.Release, "architecture": &info.Architecture}
	if info.Architecture != "" {
		for dpkg, m := range mkosiArch {
			if m == info.Architecture {
				info.Architecture = dpkg
			}
		}
	}
	flags := map[string]*string{"distribution": distro, "release": release, "architecture": arch}
	for _, name := range []string{"distribution", "release", "architecture"} {
		tv, fv := *fromTree[name], flags[name]
		switch {
		case tv == "" && !fs.Changed(name) && name != "architecture":
			return nil, fmt.Errorf("--into %s: the tree sets no %s; set it in the tree's mkosi.conf or pass --%s", dir, strings.ToUpper(name[:1])+name[1:]+"=", name)
		case tv == "":
		case !fs.Changed(name):
			*fv = tv
		}
	}
	if info.Distribution != "" || info.Release != "" {
		want, err := gpustack.LookupRelease(*distro, *release, *arch)
		if err != nil {
			return nil, fmt.Errorf("--into %s: %w", dir, err)
		}
		got, err := gpustack.LookupRelease(orDefault(info.Distribution, *distro), orDefault(info.Release, *release), orDefault(info.Architecture, *arch))
		if err != nil {
			return nil, fmt.Errorf("--into %s: the tree's own settings: %w", dir, err)
		}
		if got.Distro != want.Distro || got.Codename != want.Codename || got.Arch != want.Arch {
			return nil, fmt.Errorf("--into %s: the tree builds %s, the flags name %s; leave the flags out or make them match", dir, got, want)
		}
	}
	return LayerFor(info, image)
}

func orDefault(v, d string) string {
	if v != "" {
		return v
	}
	return d
}

// layerProfile checks --layer-profile against the tree: the layer's own
// profile, AlwaysActive, or a profile the tree defines (mkosi.profiles/NAME
// or NAME.conf, at its top or in one of its images). A profile the tree
// lacks would leave the layer off with nothing said.
func layerProfile(tree, name string) (string, error) {
	if name == Profile || name == AlwaysActive {
		return name, nil
	}
	if !profileName.MatchString(name) {
		return "", fmt.Errorf("--layer-profile %q: not a profile name (a letter or digit, then letters, digits, '.', '_' and '-')", name)
	}
	dirs, err := filepath.Glob(filepath.Join(tree, "mkosi.images", "*", "mkosi.profiles"))
	if err != nil {
		return "", fmt.Errorf("--layer-profile: %w", err)
	}
	var have []string
	for _, d := range append([]string{filepath.Join(tree, "mkosi.profiles")}, dirs...) {
		entries, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range entries {
			n := e.Name()
			if !e.IsDir() {
				var ok bool
				if n, ok = strings.CutSuffix(n, ".conf"); !ok {
					continue
				}
			}
			if n == name {
				return name, nil
			}
			have = append(have, n)
		}
	}
	slices.Sort(have)
	have = slices.Compact(have)
	return "", fmt.Errorf("--layer-profile %q: the tree defines no such profile (its profiles: %s); give one of them, %s (the layer's own) or %s",
		name, orDefault(strings.Join(have, ", "), "none"), Profile, AlwaysActive)
}

// profileName is what mkosi takes as a profile's name.
var profileName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
