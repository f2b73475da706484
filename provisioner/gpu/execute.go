package gpu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"strings"
	"time"

	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"

	"github.com/podvm-gpu/packer-plugin-podvm/aptsource"
	"github.com/podvm-gpu/packer-plugin-podvm/bake"
	"github.com/podvm-gpu/packer-plugin-podvm/debcache"
	"github.com/podvm-gpu/packer-plugin-podvm/gpustack"
	"github.com/podvm-gpu/packer-plugin-podvm/repokey"
	"github.com/podvm-gpu/packer-plugin-podvm/shellquote"
	"github.com/podvm-gpu/packer-plugin-podvm/version"
)

// StepError is a failed plan step: which one, and why.
type StepError struct {
	Index, Total int
	ID, Title    string
	Err          error
}

func (e *StepError) Error() string {
	return fmt.Sprintf("podvm-gpu step [%d/%d] %s (%s) failed: %v", e.Index, e.Total, e.ID, e.Title, e.Err)
}

func (e *StepError) Unwrap() error { return e.Err }

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
	// keys caches fetched keys by URL: several sources may share one.
	keys map[string][]byte
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
	// driverSource is the driver source a ChooseDriver took ("" before).
	driverSource string
	// cacheRoot is the build cache directory, "" for none; chrootRoot the
	// image's root where it is the podvm-rootfs chroot on this host; debs
	// the deb cache, only there.
	cacheRoot  string
	chrootRoot string
	debs       *debcache.Store
}

func (e *executor) provision(ctx context.Context, o gpustack.Options) error {
	start := e.r.now()
	e.ui.Say("podvm-gpu: detecting the image")
	t, err := detect(ctx, e.r)
	if err != nil {
		return fmt.Errorf("podvm-gpu: detecting the image: %w", err)
	}
	e.ui.Say(fmt.Sprintf("podvm-gpu: target %s, kernels %s", t, strings.Join(t.Kernels, " ")))
	for _, w := range o.TargetWarnings(t) {
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
	for i, s := range plan.Steps {
		stepStart := e.r.now()
		e.ui.Say(fmt.Sprintf("[%d/%d] %s", i+1, n, s.Title))
		for _, a := range s.Actions {
			if err := e.do(ctx, a); err != nil {
				if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
					return fmt.Errorf("podvm-gpu: cancelled during step [%d/%d] %s: %w", i+1, n, s.ID, err)
				}
				return &StepError{Index: i + 1, Total: n, ID: s.ID, Title: s.Title, Err: err}
			}
		}
		e.ui.Say(fmt.Sprintf("[%d/%d] %s: done in %s", i+1, n, s.ID, e.since(stepStart)))
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

func (e *executor) do(ctx context.Context, a gpustack.Action) error {
	switch a := a.(type) {
	case gpustack.AptComponents:
		return e.aptComponents(ctx, a)
	case gpustack.AptSource:
		return e.aptSource(ctx, a)
	case gpustack.AptPin:
		return e.writeFile(ctx, a.Path(), []byte(a.Preferences()), 0o644, "root:root")
	case gpustack.AptUpdate:
		_, err := e.r.runApt(ctx, aptPrefix+" update")
		return err
	case gpustack.Install:
		// The plan's packages are what the image must hold, a held older
		// version on a rerun included.
		cmd := aptPrefix + " install --allow-change-held-packages"
		if e.dpkgUnsafe {
			cmd += " -o Dpkg::Options::=--force-unsafe-io"
		}
		if a.NoRecommends {
			cmd += " --no-install-recommends"
		}
		cmd += " " + shellquote.JoinWords(a.Packages...)
		return e.withDebs(ctx, cmd, "/var/cache/apt/archives", func() error {
			_, err := e.r.runApt(ctx, cmd)
			return err
		})
	case gpustack.ChooseDriver:
		return e.chooseDriver(ctx, a)
	case gpustack.IfDriverSource:
		taken, err := e.takenSource(ctx)
		if err != nil {
			return err
		}
		if taken != a.Source {
			e.ui.Say(fmt.Sprintf("skipped on the %s driver source: %d action(s) for %s", taken, len(a.Actions), a.Source))
			return nil
		}
		for _, x := range a.Actions {
			if err := e.do(ctx, x); err != nil {
				return err
			}
		}
		return nil
	case gpustack.CheckKernelSignatures:
		_, err := e.r.run(ctx, a.Command()+" "+shellquote.JoinWords(a.Kernels...))
		return err
	case gpustack.WriteFile:
		return e.writeFile(ctx, a.Path, []byte(a.Content), a.Mode, a.Owner)
	case gpustack.EnableUnits:
		// systemctl enable works offline (in a chroot, without a running
		// systemd): it only creates the wants symlinks.
		_, err := e.r.run(ctx, "systemctl enable "+shellquote.JoinWords(a.Units...))
		return err
	case gpustack.BuildModules:
		return e.buildModules(ctx, a)
	case gpustack.CheckModules:
		return e.checkModules(ctx, a.Kernels, a.Modules)
	case gpustack.SignModules:
		cmd := a.Command() + " " + shellquote.JoinWords(a.Kernels...)
		if a.Key == nil || a.Verify {
			_, err := e.r.run(ctx, cmd)
			return err
		}
		in, err := bake.ModuleKeyInput(*a.Key)
		if err != nil {
			return err
		}
		res, err := e.r.execInput(ctx, cmd, false, bytes.NewReader(in))
		if err != nil {
			return err
		}
		return res.check(cmd)
	case gpustack.HoldPackages:
		_, err := e.r.run(ctx, a.Command()+" "+shellquote.JoinWords(a.Kernels...))
		return err
	case gpustack.CheckDriverVersion:
		_, err := e.r.run(ctx, a.Command()+" "+shellquote.JoinWords(a.Kernels...))
		return err
	case gpustack.DeferInitramfs:
		_, err := e.r.run(ctx, a.Command())
		return err
	case gpustack.UpdateInitramfs:
		if _, err := e.r.run(ctx, a.Resume()); err != nil {
			return err
		}
		for _, k := range a.Kernels {
			// Only an initramfs that exists is rebuilt: an image that boots
			// without one loads nouveau from the root file system, where
			// the modprobe.d blacklist already applies.
			// %[1]s is one quoted shell word: never inside double quotes.
			cmd := fmt.Sprintf(`if command -v update-initramfs >/dev/null 2>&1 && [ -e /boot/initrd.img-%[1]s ]; then update-initramfs -u -k %[1]s; else echo no initramfs for %[1]s, nothing to update; fi`, shellquote.Word(k))
			if _, err := e.r.run(ctx, cmd); err != nil {
				return err
			}
		}
		return nil
	case gpustack.ToolkitConfig:
		args := []string{"nvidia-ctk", "config", "--in-place", "--config=" + a.Path}
		for _, kv := range a.Settings {
			args = append(args, "--set", kv.Key+"="+kv.Value)
		}
		_, err := e.r.run(ctx, shellquote.JoinWords(args...))
		return err
	case gpustack.BakeRepo:
		return e.bake(ctx, a)
	case gpustack.VerifyRepo:
		_, err := e.r.run(ctx, verifyRepoCommand(a))
		return err
	case gpustack.VerifyExecutable:
		cmd := `set -- ` + shellquote.JoinWords(a.Paths...) + `; for p; do if [ -f "$p" ] && [ -x "$p" ]; then echo "$p: executable"; else echo "$p: missing or not executable" >&2; exit 1; fi; done`
		_, err := e.r.run(ctx, cmd)
		return err
	}
	return fmt.Errorf("internal error: no handler for plan action %T", a)
}

// chooseDriver runs the plan's probe in the image, installs the branch it
// took and records it there.
func (e *executor) chooseDriver(ctx context.Context, a gpustack.ChooseDriver) error {
	out, err := e.r.run(ctx, a.ProbeCommand()+" "+shellquote.JoinWords(a.Kernels...))
	if err != nil {
		return fmt.Errorf("choosing the driver source: %w", err)
	}
	taken := lastLine(out)
	pkgs, err := a.Packages(taken)
	if err != nil {
		return err
	}
	e.ui.Say(fmt.Sprintf("driver source taken: %s", taken))
	if err := e.do(ctx, gpustack.Install{Packages: pkgs, NoRecommends: a.NoRecommends}); err != nil {
		return err
	}
	if err := e.writeFile(ctx, gpustack.DriverSourceFile, []byte(taken+"\n"), 0o644, "root:root"); err != nil {
		return err
	}
	e.driverSource = taken
	return nil
}

// takenSource is the driver source the build took: this run's choice, or
// the one an earlier run recorded in the image.
func (e *executor) takenSource(ctx context.Context) (string, error) {
	if e.driverSource == "" {
		out, err := e.r.query(ctx, "cat "+shellquote.Word(gpustack.DriverSourceFile))
		if err != nil {
			return "", fmt.Errorf("reading the driver source taken: %w", err)
		}
		e.driverSource = strings.TrimSpace(out)
	}
	return e.driverSource, nil
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

func (e *executor) checkModules(ctx context.Context, kernels, modules []string) error {
	for _, k := range kernels {
		for _, m := range modules {
			if _, err := e.r.run(ctx, "modinfo -k "+shellquote.Word(k)+" -F filename "+shellquote.Word(m)); err != nil {
				return err
			}
		}
	}
	return nil
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

// aptComponents enables components of the image's own archive by writing
// one extra deb822 source for the same URIs and suites; the image's own
// source files are not edited.
func (e *executor) aptComponents(ctx context.Context, a gpustack.AptComponents) error {
	out, err := e.r.query(ctx, cmdListSources)
	if err != nil {
		return fmt.Errorf("reading the image's apt sources: %w", err)
	}
	entries, err := parseSourceFiles(out)
	if err != nil {
		return fmt.Errorf("reading the image's apt sources: %w", err)
	}
	archive := aptsource.ArchiveOf(entries, a.Keyring, e.plan.Target.Codename)
	if len(archive) == 0 {
		return fmt.Errorf("no apt source of the image's own archive found (signed by %s, or unsigned with suites %s*) in /etc/apt/sources.list or /etc/apt/sources.list.d",
			a.Keyring, e.plan.Target.Codename)
	}
	text := componentsFile(archive, a.Components)
	if text == "" {
		e.ui.Say(fmt.Sprintf("components %s already enabled", strings.Join(a.Components, " ")))
		_, err := e.r.run(ctx, "rm -f "+componentsSources)
		return err
	}
	return e.writeFile(ctx, componentsSources, []byte(text), 0o644, "root:root")
}

// aptSource installs a repository's keyring, then its source file.
func (e *executor) aptSource(ctx context.Context, a gpustack.AptSource) error {
	var keyring []byte
	var err error
	switch k := a.Key; {
	case k.InImage:
	case k.File != "":
		if keyring, err = repokey.ReadFile(k.File, "the key of apt source "+a.Name); err != nil {
			return err
		}
	case k.URL != "":
		keyring = e.keys[k.URL]
		if keyring == nil {
			e.ui.Say(fmt.Sprintf("fetching %s on the build host (fingerprint %s)", k.URL, strings.Join(k.Fingerprints, " or ")))
			if keyring, err = repokey.Fetch(ctx, e.http, k.URL, k.Fingerprints); err != nil {
				return err
			}
			if e.keys == nil {
				e.keys = map[string][]byte{}
			}
			e.keys[k.URL] = keyring
		}
	default:
		return fmt.Errorf("apt source %s: no key", a.Name)
	}
	if keyring != nil {
		if err := e.writeFile(ctx, a.Keyring, keyring, 0o644, "root:root"); err != nil {
			return err
		}
	}
	return e.writeFile(ctx, a.SourcesPath(), []byte(a.Deb822()), 0o644, "root:root")
}

// verifyRepoCommand is the offline self-test: apt with the baked repository
// as its only source must accept the signature and take the packages from
// it. gpustack.VerifyRepoShell holds the apt half, which the mkosi scripts
// run too.
func verifyRepoCommand(a gpustack.VerifyRepo) string {
	return verifyRepoScript(a, "/var/lib/dpkg/status")
}

// verifyRepoScript is verifyRepoCommand with the image's dpkg status at
// imageStatus, so that a test can run it on a host with a status of its
// own.
func verifyRepoScript(a gpustack.VerifyRepo, imageStatus string) string {
	src := bake.Sources(a.Dir, a.Keyring)
	status := `: > "$d/status"`
	if a.ImageStatus() {
		status = `cp ` + shellquote.Word(imageStatus) + ` "$d/status"`
	}
	return gpustack.VerifyRepoShell +
		`d=$(mktemp -d) && trap 'rm -rf "$d"' EXIT && ` +
		`mkdir -p "$d/lists/partial" "$d/archives/partial" "$d/sources.list.d" "$d/preferences.d" && ` + status + ` && ` +
		`printf '%s' ` + shellquote.Word(src) + ` > "$d/sources.list.d/local.sources" && ` +
		`verify_repo_apt apt-get "$d" ` + shellquote.JoinWords(a.Packages...)
}
