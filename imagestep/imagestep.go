// Package imagestep runs the steps of a gpustack.Plan in an image. It is
// the one implementation of every in-image action, for both back ends: the
// podvm-gpu provisioner runs it over a Packer communicator, and a mkosi
// tree's scripts run it (packer-plugin-podvm mkosi run-steps) with
// mkosi-chroot. A back end supplies a Target, which knows how to run a
// command in the image and move files; what an action does is here.
package imagestep

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"github.com/podvm-gpu/packer-plugin-podvm/gpustack"
	"github.com/podvm-gpu/packer-plugin-podvm/modcache"
	"github.com/podvm-gpu/packer-plugin-podvm/shellquote"
)

// Target is the image a plan runs in.
type Target interface {
	// Run, Output, Upload and Download, as the module cache uses them.
	modcache.Target
	// RunInput runs a command with stdin: secrets go this way, never
	// through a file or the command line.
	RunInput(ctx context.Context, command string, stdin io.Reader) error
	// Put installs content at path with mode and owner ("user:group"); a
	// rerun gives the same file.
	Put(ctx context.Context, path string, content []byte, mode fs.FileMode, owner string) error
	// Install installs packages ("name" or "name=version") with the image's
	// package manager, noninteractively.
	Install(ctx context.Context, pkgs []string, noRecommends bool) error
	// Update refreshes the image's package lists.
	Update(ctx context.Context) error
	// AptOutput runs a command quietly beside the apt that manages the
	// image, and returns its standard output: in the image itself over a
	// communicator, in mkosi's sandbox (whose apt acts on the image).
	AptOutput(ctx context.Context, command string) (string, error)
}

// CommandError is a command that ran in the image and failed: which one,
// its exit status and the end of its output.
type CommandError struct {
	Command    string   // the command as the executor wrote it
	ExitStatus int      // its exit status
	Output     []string // the last lines of its combined output
}

// ExitCode is the command's exit status.
func (e *CommandError) ExitCode() int { return e.ExitStatus }

func (e *CommandError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "command exited with status %d: %s", e.ExitStatus, e.Command)
	if len(e.Output) > 0 {
		fmt.Fprintf(&b, "\nlast %d lines of output:", len(e.Output))
		for _, l := range e.Output {
			b.WriteString("\n    ")
			b.WriteString(l)
		}
	}
	return b.String()
}

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

// Executor runs a plan's steps through a Target.
type Executor struct {
	Target Target
	// Say reports progress, one line at a time.
	Say func(string)
	// Codename is the image's release codename (Target.Codename of the
	// plan), which finds the image's own archive among its apt sources.
	Codename string
	// Declared reports the actions the back end carried out before the
	// steps ran, in its own terms (mkosi's Packages=, trees and sandbox
	// sources); the executor checks their effect instead of doing them.
	// nil: none.
	Declared func(gpustack.Action) bool
	// Bake bakes the local repository: its download and the host-side
	// index and signature, which the back end arranges with its caches.
	Bake func(ctx context.Context, a gpustack.BakeRepo) error
	// ModuleCache is the cache of DKMS builds across images, asked for when
	// the plan builds modules; nil, or a nil cache, builds every module.
	ModuleCache func() *modcache.Cache
	// HTTP fetches repository keys named by URL (https only); nil for a
	// default client.
	HTTP *http.Client
	// HostPath maps a path of the plan's on the build host (a module
	// signing key) to where this process reads it; nil for as is.
	HostPath func(string) string
	// Now is the clock for step timings; nil for time.Now.
	Now func() time.Time

	keys map[string][]byte
	// driverSource is the driver source a ChooseDriver took ("" before).
	driverSource string
}

// Run runs the steps, numbered among total steps from first (1-based), each
// announced with its title and reported with its time.
func (e *Executor) Run(ctx context.Context, steps []gpustack.Step, first, total int) error {
	for i, s := range steps {
		n := first + i
		start := e.now()
		e.Say(fmt.Sprintf("[%d/%d] %s", n, total, s.Title))
		for _, a := range s.Actions {
			if err := e.Do(ctx, a); err != nil {
				if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
					return fmt.Errorf("podvm-gpu: cancelled during step [%d/%d] %s: %w", n, total, s.ID, err)
				}
				return &StepError{Index: n, Total: total, ID: s.ID, Title: s.Title, Err: err}
			}
		}
		e.Say(fmt.Sprintf("[%d/%d] %s: done in %s", n, total, s.ID, e.since(start)))
	}
	return nil
}

func (e *Executor) now() time.Time {
	if e.Now != nil {
		return e.Now()
	}
	return time.Now()
}

func (e *Executor) since(t time.Time) time.Duration {
	return e.now().Sub(t).Round(100 * time.Millisecond)
}

// Do carries out one action. This is the one switch over the plan's
// actions; a back end knows none of them.
func (e *Executor) Do(ctx context.Context, a gpustack.Action) error {
	if e.Declared != nil && e.Declared(a) {
		return e.checkDeclared(ctx, a)
	}
	switch a := a.(type) {
	case gpustack.AptComponents:
		return e.aptComponents(ctx, a)
	case gpustack.AptSource:
		return e.aptSource(ctx, a)
	case gpustack.AptPin:
		return e.Target.Put(ctx, a.Path(), []byte(a.Preferences()), 0o644, "root:root")
	case gpustack.AptUpdate:
		return e.Target.Update(ctx)
	case gpustack.Install:
		return e.Target.Install(ctx, a.Packages, a.NoRecommends)
	case gpustack.ChooseDriver:
		return e.chooseDriver(ctx, a)
	case gpustack.IfDriverSource:
		return e.ifDriverSource(ctx, a)
	case gpustack.WriteFile:
		return e.Target.Put(ctx, a.Path, []byte(a.Content), a.Mode, a.Owner)
	case gpustack.EnableUnits:
		// systemctl enable works offline (in a chroot, without a running
		// systemd): it only creates the wants symlinks.
		return e.Target.Run(ctx, "systemctl enable "+shellquote.JoinWords(a.Units...))
	case gpustack.BuildModules:
		var c *modcache.Cache
		if e.ModuleCache != nil {
			c = e.ModuleCache()
		}
		return modcache.Build(ctx, e.Target, c, a.Kernels, e.Say)
	case gpustack.SignModules:
		return e.signModules(ctx, a)
	case gpustack.CheckKernelSignatures:
		return e.Target.Run(ctx, a.Command()+" "+shellquote.JoinWords(a.Kernels...))
	case gpustack.CheckModules:
		return e.Target.Run(ctx, a.Command()+" "+shellquote.JoinWords(a.Kernels...))
	case gpustack.HoldPackages:
		return e.Target.Run(ctx, a.Command()+" "+shellquote.JoinWords(a.Kernels...))
	case gpustack.CheckDriverVersion:
		return e.Target.Run(ctx, a.Command()+" "+shellquote.JoinWords(a.Kernels...))
	case gpustack.DeferInitramfs:
		return e.Target.Run(ctx, a.Command())
	case gpustack.UpdateInitramfs:
		return e.Target.Run(ctx, a.Command())
	case gpustack.ToolkitConfig:
		args := []string{"nvidia-ctk", "config", "--in-place", "--config=" + a.Path}
		for _, kv := range a.Settings {
			args = append(args, "--set", kv.Key+"="+kv.Value)
		}
		return e.Target.Run(ctx, shellquote.JoinWords(args...))
	case gpustack.BakeRepo:
		if e.Bake == nil {
			return errors.New("internal error: this back end cannot bake a repository")
		}
		return e.Bake(ctx, a)
	case gpustack.VerifyRepo:
		return e.Target.Run(ctx, VerifyRepoCommand(a, "/var/lib/dpkg/status"))
	case gpustack.VerifyExecutable:
		return e.Target.Run(ctx, `set -- `+shellquote.JoinWords(a.Paths...)+`; for p; do if [ -f "$p" ] && [ -x "$p" ]; then echo "$p: executable"; else echo "$p: missing or not executable" >&2; exit 1; fi; done`)
	}
	return fmt.Errorf("internal error: no handler for plan action %T", a)
}

// checkDeclared checks in the image what the back end did before the
// steps: the packages are installed, the files are there.
func (e *Executor) checkDeclared(ctx context.Context, a gpustack.Action) error {
	switch a := a.(type) {
	case gpustack.Install:
		names := make([]string, len(a.Packages))
		for i, p := range a.Packages {
			names[i], _, _ = strings.Cut(p, "=")
		}
		e.Say("installed by the image's package list: " + strings.Join(names, " "))
		return e.Target.Run(ctx, InstalledCommand(names))
	case gpustack.WriteFile:
		return e.exists(ctx, a.Path)
	case gpustack.AptSource:
		return e.exists(ctx, a.SourcesPath())
	case gpustack.AptPin:
		return e.exists(ctx, a.Path())
	}
	e.Say("done by the back end before the steps: " + gpustack.ActionName(a))
	return nil
}

func (e *Executor) exists(ctx context.Context, p string) error {
	return e.Target.Run(ctx, ExistsCommand(p))
}

// InstalledCommand fails unless dpkg has each package installed.
func InstalledCommand(pkgs []string) string {
	script := `for p; do dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q ' installed$' || { echo "package $p is not installed in the image" >&2; exit 1; }; echo "$p: installed"; done`
	return "sh -c " + shellquote.Quote(script) + " podvm-installed " + shellquote.JoinWords(pkgs...)
}

// ExistsCommand fails unless path exists.
func ExistsCommand(path string) string {
	script := `if [ -e "$1" ]; then printf '%s: in place\n' "$1"; else printf '%s: missing from the image\n' "$1" >&2; exit 1; fi`
	return "sh -c " + shellquote.Quote(script) + " podvm-exists " + shellquote.Word(path)
}

// chooseDriver runs the plan's probe in the image, installs the branch it
// took and records it there.
func (e *Executor) chooseDriver(ctx context.Context, a gpustack.ChooseDriver) error {
	out, err := e.Target.AptOutput(ctx, a.ProbeCommand()+" "+shellquote.JoinWords(a.Kernels...))
	if err != nil {
		return fmt.Errorf("choosing the driver source: %w", err)
	}
	// The probe explains its choice, then names it on its last line.
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for _, l := range lines[:len(lines)-1] {
		e.Say(l)
	}
	taken := strings.TrimSpace(lines[len(lines)-1])
	pkgs, err := a.Packages(taken)
	if err != nil {
		return err
	}
	e.Say(fmt.Sprintf("driver source taken: %s; installing %s", taken, strings.Join(pkgs, " ")))
	if err := e.Target.Install(ctx, pkgs, a.NoRecommends); err != nil {
		return err
	}
	if err := e.Target.Put(ctx, gpustack.DriverSourceFile, []byte(taken+"\n"), 0o644, "root:root"); err != nil {
		return err
	}
	e.driverSource = taken
	return nil
}

// DriverSource is the driver source the build took: this run's choice, or
// the one an earlier run (or phase) recorded in the image.
func (e *Executor) DriverSource(ctx context.Context) (string, error) {
	if e.driverSource == "" {
		out, err := e.Target.Output(ctx, "cat "+shellquote.Word(gpustack.DriverSourceFile))
		if err != nil {
			return "", fmt.Errorf("reading the driver source taken: %w", err)
		}
		e.driverSource = strings.TrimSpace(out)
	}
	return e.driverSource, nil
}

func (e *Executor) ifDriverSource(ctx context.Context, a gpustack.IfDriverSource) error {
	taken, err := e.DriverSource(ctx)
	if err != nil {
		return err
	}
	if taken != a.Source {
		e.Say(fmt.Sprintf("skipped on the %s driver source: %d action(s) for %s", taken, len(a.Actions), a.Source))
		return nil
	}
	for _, x := range a.Actions {
		if err := e.Do(ctx, x); err != nil {
			return err
		}
	}
	return nil
}
