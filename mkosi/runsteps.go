package mkosi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"github.com/podvm-gpu/packer-plugin-podvm/bake"
	"github.com/podvm-gpu/packer-plugin-podvm/chroot"
	"github.com/podvm-gpu/packer-plugin-podvm/cmdflags"
	"github.com/podvm-gpu/packer-plugin-podvm/gpustack"
	"github.com/podvm-gpu/packer-plugin-podvm/imagekernel"
	"github.com/podvm-gpu/packer-plugin-podvm/imagestep"
	"github.com/podvm-gpu/packer-plugin-podvm/modcache"
)

// planFile is the tree's podvm-plan.json: the plan's steps as the one
// executor runs them at build time (mkosi run-steps), with what it needs
// to bind them to the image.
type planFile struct {
	// Distribution and Release are the target the tree was generated for,
	// checked against mkosi's $DISTRIBUTION and $RELEASE.
	Distribution, Release string
	// Kernels is the kernels setting, applied to the image's kernels.
	Kernels string
	Steps   []gpustack.Step
}

// planFileName is the plan's file in the tree, beside podvm-bake.json.
const planFileName = "podvm-plan.json"

// declared reports the actions the tree states in mkosi's own terms,
// which mkosi carries out before the scripts run: packages (Packages=),
// files (the skeleton and extra trees) and apt's configuration (the
// sandbox tree). The executor checks their effect instead.
func declared(a gpustack.Action) bool {
	switch a.(type) {
	case gpustack.AptComponents, gpustack.AptSource, gpustack.AptPin, gpustack.AptUpdate,
		gpustack.Install, gpustack.WriteFile, gpustack.DeferInitramfs:
		return true
	}
	return false
}

// The phases of run-steps: the post-installation script runs the steps
// that change the image, the finalize script the ones that only check it;
// a layer runs all of them in its post-installation script.
const (
	phaseInstall = "install"
	phaseCheck   = "check"
	phaseAll     = "all"
)

// runSteps is the scripts' one call into the executor.
func runSteps(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("mkosi run-steps", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	var r stepRun
	plan := fs.String("plan", "", "the tree's "+planFileName)
	phase := fs.String("phase", "", "which steps: install (those that change the image), check (those that only check it) or all")
	fs.StringVar(&r.root, "root", "", "the image's root ($BUILDROOT), for the repository's download")
	fs.StringVar(&r.srcdir, "srcdir", ".", "the tree as mkosi mounts it ($SRCDIR), against which host paths resolve")
	fs.StringVar(&r.spec, "spec", "", "the tree's podvm-bake.json, where the plan bakes a repository")
	fs.StringVar(&r.artifacts, "artifacts", "", "directory for the repository's host artifacts")
	cache := fs.String("cache", "", "the module cache directory (none: build every module)")
	maxSize := fs.Int64("cache-max-size", 0, "bound of the module cache in bytes (0: none)")
	secrets := fs.StringSlice("secret-env", nil, "environment variables no command in the image may see (passphrases)")
	if code, ok := cmdflags.Parse(fs, args, false, stderr); !ok {
		return code
	}
	if *plan == "" || r.root == "" || !slices.Contains([]string{phaseInstall, phaseCheck, phaseAll}, *phase) {
		fmt.Fprintln(stderr, "mkosi run-steps: --plan, --root and --phase install|check|all are required")
		return 2
	}
	r.stdout, r.stderr, r.secrets = stdout, stderr, *secrets
	if *cache != "" {
		r.cache = modcache.New(*cache, *maxSize)
	}
	if err := r.run(ctx, *plan, *phase); err != nil {
		fmt.Fprintln(stderr, "podvm:", err)
		return 1
	}
	return 0
}

type stepRun struct {
	root, srcdir, spec, artifacts string
	cache                         *modcache.Cache
	secrets                       []string
	stdout, stderr                io.Writer
	kernels                       []string
}

func (r *stepRun) run(ctx context.Context, planPath, phase string) error {
	data, err := os.ReadFile(planPath)
	if err != nil {
		return fmt.Errorf("run-steps: %w", err)
	}
	var p planFile
	if err := json.Unmarshal(data, &p); err != nil {
		return fmt.Errorf("run-steps: %s: %w", planPath, err)
	}
	if d, rel := os.Getenv("DISTRIBUTION"), os.Getenv("RELEASE"); d != p.Distribution || rel != p.Release {
		return fmt.Errorf("this tree was generated for %s %s, not %s %s; regenerate it with --distribution and --release", p.Distribution, p.Release, d, rel)
	}
	t := chrootTarget{stdout: r.stdout, stderr: r.stderr, secrets: r.secrets}
	if r.kernels, err = imageKernels(ctx, t, p.Kernels); err != nil {
		return err
	}
	steps, err := gpustack.ForKernels(p.Steps, r.kernels)
	if err != nil {
		return err
	}
	e := &imagestep.Executor{
		Target:      t,
		Say:         func(s string) { fmt.Fprintln(r.stdout, s) },
		Codename:    p.Release,
		Declared:    declared,
		Bake:        r.bake,
		ModuleCache: func() *modcache.Cache { return r.cache },
		HostPath:    func(path string) string { return filepath.Join(r.srcdir, filepath.FromSlash(path)) },
	}
	// Each step keeps its number in the whole plan.
	for i, s := range steps {
		if phase != phaseAll && s.Checks() != (phase == phaseCheck) {
			continue
		}
		if err := e.Run(ctx, []gpustack.Step{s}, i+1, len(steps)); err != nil {
			return err
		}
	}
	return nil
}

// imageKernels applies the one rule for an image's kernels, in the image,
// and the kernels setting.
func imageKernels(ctx context.Context, t chrootTarget, setting string) ([]string, error) {
	out, err := t.Output(ctx, imagekernel.ListCommand)
	if err != nil {
		return nil, fmt.Errorf("listing the image's kernels: %w", err)
	}
	all, err := imagekernel.FromListing(out)
	if err != nil {
		return nil, err
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("%w; the distro drop-in's Packages= installs one", imagekernel.ErrNone)
	}
	ks, err := gpustack.SelectKernels(setting, all)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(t.stdout, "podvm: image kernels: %s; targeted: %s\n", strings.Join(all, " "), strings.Join(ks, " "))
	return ks, nil
}

// bake downloads the repository's packages with the sandbox's apt (which
// acts on the image) into its directory in the image, then indexes and
// signs them on this host (Bake).
func (r *stepRun) bake(ctx context.Context, a gpustack.BakeRepo) error {
	if r.spec == "" {
		return fmt.Errorf("the plan bakes a repository, but run-steps has no --spec")
	}
	// The download starts by emptying the directory: here, unlike the
	// Packer path's scratch directory beside the repository, that is the
	// repository's own place in the image, which must be the
	// repository's alone. Links in the image resolve inside the root.
	repo, err := chroot.ResolveIn(r.root, a.Dir)
	if err != nil {
		return fmt.Errorf("local_repo_path %s: %w", a.Dir, err)
	}
	if err := absentOrEmpty(repo); err != nil {
		return fmt.Errorf("local_repo_path %s: %w", a.Dir, err)
	}
	t := chrootTarget{stdout: r.stdout, stderr: r.stderr, secrets: r.secrets}
	d := imagestep.DownloadCommands(a, repo, sandboxAptGet)
	closure := ""
	if a.Closure {
		closure = " with their dependency closure"
	}
	fmt.Fprintf(r.stdout, "  downloading %s%s\n", strings.Join(a.Packages, " "), closure)
	if err := t.run(ctx, nil, nil, "sh", "-c", d.Script()); err != nil {
		return fmt.Errorf("downloading the repository's packages: %w", err)
	}
	if err := bake.ToPoolNames(repo); err != nil {
		return fmt.Errorf("downloading the repository's packages: %w", err)
	}
	idx, err := Bake{Root: r.root, Spec: r.spec, SrcDir: r.srcdir, Kernels: r.kernels, ArtifactsDir: r.artifacts}.Run(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(r.stdout, "  repo: %d packages, key %s\n", len(idx.Packages), idx.Fingerprint)
	return nil
}

// absentOrEmpty refuses a path that holds anything: a directory the
// image's packages or the user's tree filled would be emptied.
func absentOrEmpty(p string) error {
	fi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return errors.New("in the image, and not a directory; allowed: a path of its own, such as /opt/local-packages")
	}
	ents, err := os.ReadDir(p)
	if err != nil {
		return err
	}
	if len(ents) > 0 {
		return fmt.Errorf("a directory in the image that holds %s already, which the repository would replace; allowed: a directory of its own, such as /opt/local-packages", ents[0].Name())
	}
	return nil
}

// sandboxAptGet is the sandbox's apt-get, which mkosi configured to act on
// the image.
const sandboxAptGet = "apt-get -q"

// withoutSecrets is env without the named variables.
func withoutSecrets(env, secrets []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(secrets, name) {
			out = append(out, kv)
		}
	}
	return out
}
