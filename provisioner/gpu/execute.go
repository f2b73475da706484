package gpu

import (
	"context"
	"fmt"
	"io/fs"
	"net/http"
	"strings"
	"time"

	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"

	"github.com/podvm-gpu/packer-plugin-podvm/bake"
	"github.com/podvm-gpu/packer-plugin-podvm/debcache"
	"github.com/podvm-gpu/packer-plugin-podvm/gpustack"
	"github.com/podvm-gpu/packer-plugin-podvm/imagestep"
	"github.com/podvm-gpu/packer-plugin-podvm/settings"
	"github.com/podvm-gpu/packer-plugin-podvm/shellquote"
	"github.com/podvm-gpu/packer-plugin-podvm/version"
)

// StepError is a failed plan step: which one, and why.
type StepError = imagestep.StepError

// executor runs a Plan. It switches on action types only; everything
// distro-specific is in the actions' data.
type executor struct {
	r       *runner
	ui      packersdk.Ui
	http    *http.Client
	indexer indexer
	plan    *gpustack.Plan
	// spec is the plan's repository bake, when it has one.
	spec bake.Spec
	// signerFingerprint loads a signing key file for its fingerprint.
	signerFingerprint func(path, passphraseEnv string, now time.Time) (string, error)
	// unsafeIO is the dpkg_unsafe_io setting; dpkgUnsafe says whether
	// dpkg runs with --force-unsafe-io in this build.
	unsafeIO   string
	dpkgUnsafe bool
	// generated is the builder's generated data.
	generated map[string]interface{}
	// moduleCert is the module signing certificate read back from the
	// image, once.
	moduleCert []byte
	// steps is the one executor of the plan's actions, over commTarget.
	steps *imagestep.Executor
	// cacheRoot is the build cache directory, "" for none; chrootRoot the
	// image's root where it is the podvm-rootfs chroot on this host; debs
	// the deb cache, only there.
	cacheRoot  string
	chrootRoot string
	debs       *debcache.Store
}

func (e *executor) provision(ctx context.Context, o settings.Options) error {
	start := e.r.now()
	e.ui.Say("podvm-gpu: detecting the image")
	t, err := detect(ctx, e.r)
	if err != nil {
		return fmt.Errorf("podvm-gpu: detecting the image: %w", err)
	}
	e.ui.Say(fmt.Sprintf("podvm-gpu: target %s, kernels %s", t, strings.Join(t.Kernels, " ")))
	for _, w := range gpustack.TargetWarnings(o, t) {
		e.ui.Say("podvm-gpu: warning: " + w)
	}
	e.dpkgUnsafe = e.unsafeDpkg()
	plan, err := gpustack.NewPlan(o, t)
	if err != nil {
		return fmt.Errorf("podvm-gpu: planning for %s: %w", t, err)
	}
	e.plan = plan
	e.useCaches(plan.Cache)
	for _, n := range plan.Notes {
		e.ui.Say("podvm-gpu: " + n)
	}
	if plan.Idle != "" {
		return nil
	}
	if plan.Repo != nil {
		if e.spec, err = bake.SpecFor(plan, generator()); err != nil {
			return fmt.Errorf("podvm-gpu: %w", err)
		}
	}
	if d := plan.Driver; d.Branch != "" {
		e.ui.Say(fmt.Sprintf("podvm-gpu: driver branch %s (%s modules, from %s) for kernels %s",
			d.Branch, d.Flavour, d.Source, strings.Join(plan.Kernels, " ")))
	}
	n := len(plan.Steps)
	e.steps = &imagestep.Executor{
		Target:   commTarget{e: e},
		Say:      e.ui.Say,
		Codename: plan.Target.Codename,
		Bake:     e.bake,
		HTTP:     e.http,
		Now:      e.r.now,
		// Asked for when the plan builds modules.
		ModuleCache: e.moduleCache,
	}
	if err := e.steps.Run(ctx, plan.Steps, 1, n); err != nil {
		return err
	}
	e.ui.Say(fmt.Sprintf("podvm-gpu: %d steps done in %s", n, e.since(start)))
	return nil
}

// generator names the provisioner in the manifests it writes.
func generator() string {
	return "packer-plugin-podvm " + version.PluginVersion.FormattedVersion() + " (podvm-gpu provisioner)"
}

func (e *executor) since(t time.Time) time.Duration {
	return e.r.now().Sub(t).Round(100 * time.Millisecond)
}

// aptPrefix makes apt-get noninteractive and keeps existing config files,
// so a rerun or an image with edited configs never stops at a prompt.
const aptPrefix = "DEBIAN_FRONTEND=noninteractive apt-get -y -o Acquire::Retries=3 " +
	"-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold"

// takenSource is the driver source the build took.
func (e *executor) takenSource(ctx context.Context) (string, error) {
	return e.steps.DriverSource(ctx)
}

// writeFile puts content at path with mode and owner. Content is staged
// under the remote folder and installed by a command, so it works for a
// non-root SSH user with sudo in execute_command. A file already in place
// with the same content, mode and owner is left untouched, so a rerun
// changes nothing.
func (e *executor) writeFile(ctx context.Context, path string, content []byte, mode fs.FileMode, owner string) error {
	user, group, ok := strings.Cut(owner, ":")
	if !ok {
		group = user
	}
	if user == "" {
		user, group = "root", "root"
	}
	staged, err := e.r.stage(ctx, baseName(path), content)
	if err != nil {
		return err
	}
	m := fmt.Sprintf("%o", mode.Perm())
	s, p := shellquote.Word(staged), shellquote.Word(path)
	cmd := fmt.Sprintf(`if cmp -s %[1]s %[2]s && [ "$(stat -c %%a:%%U:%%G %[2]s)" = %[3]s ]; then printf '%%s: unchanged\n' %[2]s; else install -D -m %[4]s -o %[5]s -g %[6]s %[1]s %[2]s; fi; rc=$?; rm -f %[1]s; exit $rc`,
		s, p, shellquote.Word(m+":"+user+":"+group), "0"+m, shellquote.Word(user), shellquote.Word(group))
	res, err := e.r.exec(ctx, cmd, false)
	if err != nil {
		// The command did not run to its end (cancelled, or the
		// communicator failed), so its own rm may not have run either.
		e.r.removeStaged(staged)
		return err
	}
	return res.check(cmd)
}

func baseName(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}
