// Package gpu is the Packer provisioner podvm-gpu. It detects the image over
// the communicator, asks gpustack for a Plan and executes the Plan's typed
// actions. It holds no distro knowledge: package names, repositories and
// file contents all come from the Plan.
package gpu

//go:generate go tool packer-sdc mapstructure-to-hcl2 -type Config

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"
	"text/template"
	"time"

	"github.com/hashicorp/hcl/v2/hcldec"
	"github.com/hashicorp/packer-plugin-sdk/common"
	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"
	"github.com/hashicorp/packer-plugin-sdk/template/config"
	"github.com/hashicorp/packer-plugin-sdk/template/interpolate"

	"github.com/podvm-gpu/packer-plugin-podvm/bake"
	"github.com/podvm-gpu/packer-plugin-podvm/settings"
)

// DefaultExecuteCommand runs each command with the communicator user's
// shell. {{.Command}} is already quoted as one shell word, because the
// commands carry file paths and quotes of their own that a template author
// could not quote correctly.
const DefaultExecuteCommand = "sh -c {{.Command}}"

// Config is the provisioner's configuration: the shared settings table plus
// the Packer manners every provisioner has.
type Config struct {
	common.PackerConfig `mapstructure:",squash"`
	settings.HCL        `mapstructure:",squash"`

	// How each command runs on the machine. {{.Command}} is the command,
	// already quoted as one shell word (do not quote it again); {{.Vars}} is
	// the env map as quoted NAME=value words (they are also exported inside
	// {{.Command}}, so templates need not use it). The default runs the
	// command as the communicator's user; for a non-root SSH user use
	// `sudo -n sh -c {{.Command}}` (or `echo 'pw' | sudo -S sh -c {{.Command}}`,
	// except with nvidia_module_signing=key, whose key travels on the
	// command's input: see the execute_command section below).
	ExecuteCommand string `mapstructure:"execute_command" required:"false"`
	// Environment variables exported to every command, for example
	// `{ http_proxy = "http://proxy:3128" }`.
	Env map[string]string `mapstructure:"env" required:"false"`
	// Directory on the machine where files are uploaded before they are
	// installed in place. It must be writable by the communicator's user.
	// Defaults to /tmp.
	RemoteFolder string `mapstructure:"remote_folder" required:"false"`
	// How many times uploads and downloads are retried, and apt commands
	// that failed on a transient network error. Defaults to 3; 0 disables
	// retries; at most 100. (Packer's own `max_retries` reruns the whole provisioner,
	// DKMS build included, and never reaches the plugin.)
	TransferRetries *int `mapstructure:"transfer_retries" required:"false"`
	// Whether dpkg skips its fsync calls (--force-unsafe-io), as mkosi's
	// builds do: auto (the default) does so only where the target is a
	// chroot of the podvm-rootfs builder, whose files a crash would
	// discard with the build anyway; yes also anywhere else, a live
	// machine included; no never.
	DpkgUnsafeIO string `mapstructure:"dpkg_unsafe_io" required:"false"`

	ctx interpolate.Context
}

// Provisioner is the podvm-gpu provisioner.
type Provisioner struct {
	config  Config
	options settings.Options
	retries int
	// warnings are Resolve's, shown through the ui when the build starts.
	warnings []string

	// Seams for tests; zero values mean the real thing.
	lookupEnv  func(string) (string, bool)
	httpClient *http.Client
	backoff    func(attempt int) time.Duration
	runID      string
	indexer    indexer
	now        func() time.Time
}

// ConfigSpec returns the HCL spec of Config.
func (p *Provisioner) ConfigSpec() hcldec.ObjectSpec { return p.config.FlatMapstructure().HCL2Spec() }

var envNameRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// maxTransferRetries bounds transfer_retries: with the backoff between
// attempts, a hundred retries outlast any transient failure, and a larger
// count would only keep a broken build alive for days.
const maxTransferRetries = 100

// Prepare decodes and validates the configuration, reporting every problem
// at once.
func (p *Provisioner) Prepare(raws ...interface{}) error {
	err := config.Decode(&p.config, &config.DecodeOpts{
		PluginType:         "podvm-gpu",
		Interpolate:        true,
		InterpolateContext: &p.config.ctx,
		InterpolateFilter: &interpolate.RenderFilter{
			// Rendered per command, with that command's data.
			Exclude: []string{"execute_command"},
		},
	}, raws...)
	if err != nil {
		return err
	}
	// Decode zeroes the struct for HCL2 input, so defaults come afterwards.
	c := &p.config
	if c.ExecuteCommand == "" {
		c.ExecuteCommand = DefaultExecuteCommand
	}
	if c.RemoteFolder == "" {
		c.RemoteFolder = "/tmp"
	}
	if c.DpkgUnsafeIO == "" {
		c.DpkgUnsafeIO = "auto"
	}
	p.retries = 3
	if c.TransferRetries != nil {
		p.retries = *c.TransferRetries
	}

	var errs *packersdk.MultiError
	if _, err := template.New("execute_command").Parse(c.ExecuteCommand); err != nil {
		errs = packersdk.MultiErrorAppend(errs, fmt.Errorf("execute_command: %w", err))
	} else if !strings.Contains(c.ExecuteCommand, ".Command") {
		errs = packersdk.MultiErrorAppend(errs, errors.New("execute_command: must contain {{.Command}}"))
	}
	for name := range c.Env {
		if !envNameRe.MatchString(name) {
			errs = packersdk.MultiErrorAppend(errs, fmt.Errorf("env: %q is not a valid environment variable name", name))
		}
	}
	if !strings.HasPrefix(c.RemoteFolder, "/") || strings.ContainsAny(c.RemoteFolder, "'\"\\$` \t\n") {
		errs = packersdk.MultiErrorAppend(errs, fmt.Errorf("remote_folder: %q must be an absolute path without spaces, quotes or $", c.RemoteFolder))
	}
	switch c.DpkgUnsafeIO {
	case "auto", "yes", "no":
	default:
		errs = packersdk.MultiErrorAppend(errs, fmt.Errorf("dpkg_unsafe_io: %q; allowed: auto, yes, no", c.DpkgUnsafeIO))
	}
	switch {
	case p.retries < 0:
		errs = packersdk.MultiErrorAppend(errs, fmt.Errorf("transfer_retries: %d is negative; allowed: 0 (no retries) to %d", p.retries, maxTransferRetries))
	case p.retries > maxTransferRetries:
		errs = packersdk.MultiErrorAppend(errs, fmt.Errorf("transfer_retries: %d is too many; allowed: 0 (no retries) to %d", p.retries, maxTransferRetries))
	}

	lookup := p.lookupEnv
	if lookup == nil {
		lookup = os.LookupEnv
	}
	res, err := settings.Resolve(settings.Input{
		Explicit:     c.HCL.Explicit(),
		ExplicitFrom: settings.FromHCL,
		LookupEnv:    lookup,
	})
	if err != nil {
		var se *settings.Error
		if errors.As(err, &se) {
			for _, e := range se.Errs {
				errs = packersdk.MultiErrorAppend(errs, e)
			}
		} else {
			errs = packersdk.MultiErrorAppend(errs, err)
		}
	}
	p.options, p.warnings = res.Options, res.Warnings
	if err == nil {
		for _, e := range bake.CheckInputs(p.options, time.Now()) {
			errs = packersdk.MultiErrorAppend(errs, e)
		}
		if err := checkKeyModeExecuteCommand(c.ExecuteCommand, p.options); err != nil {
			errs = packersdk.MultiErrorAppend(errs, err)
		}
	}
	if errs != nil && len(errs.Errors) > 0 {
		return errs
	}
	return nil
}

// Provision detects the image, plans and executes the plan.
func (p *Provisioner) Provision(ctx context.Context, ui packersdk.Ui, comm packersdk.Communicator, generatedData map[string]interface{}) error {
	p.config.ctx.Data = generatedData
	o := p.options
	// Prepare has no ui; the warnings come first here, before any step.
	for _, w := range p.warnings {
		ui.Say("podvm-gpu: warning: " + w)
	}
	r := &runner{
		comm:     comm,
		ui:       ui,
		tmpl:     p.config.ExecuteCommand,
		ictx:     p.config.ctx,
		env:      p.config.Env,
		retries:  p.retries,
		backoff:  p.backoff,
		runID:    p.runID,
		now:      p.now,
		stageDir: p.config.RemoteFolder,
	}
	if r.backoff == nil {
		r.backoff = defaultBackoff
	}
	if r.now == nil {
		r.now = time.Now
	}
	if r.runID == "" {
		r.runID = newRunID()
	}
	// The agent stack lands before the GPU layer: its units are there when
	// the GPU units are written to order against them.
	note, err := agentStack(ctx, r, o.PodVMBinaries)
	if err != nil {
		return err
	}
	ui.Say(note)
	// Before anything else touches the image: an idle provisioner works on
	// any image, supported or not.
	if idle := o.Idle(); idle != "" {
		ui.Say("podvm-gpu: " + idle)
		return nil
	}
	e := &executor{
		r:       r,
		ui:      ui,
		http:    p.httpClient,
		indexer: p.indexer,
	}
	if e.http == nil {
		e.http = &http.Client{Timeout: 60 * time.Second}
	}
	if e.indexer == nil {
		e.indexer = bake.IndexRepo
	}
	e.signerFingerprint = bake.SignerFingerprint
	e.unsafeIO = p.config.DpkgUnsafeIO
	e.generated = generatedData
	return e.provision(ctx, o)
}
