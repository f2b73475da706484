// Package rootfs is the podvm-rootfs Packer builder: it builds a Debian
// root filesystem in a local directory, with debootstrap or from a tarball
// or directory, and lets provisioners work on it through a chroot. No
// cloud account or virtual machine is needed.
package rootfs

import (
	"context"
	"errors"

	"github.com/hashicorp/hcl/v2/hcldec"
	"github.com/hashicorp/packer-plugin-sdk/multistep"
	"github.com/hashicorp/packer-plugin-sdk/multistep/commonsteps"
	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"
	"github.com/hashicorp/packer-plugin-sdk/packerbuilderdata"
)

// Builder is the podvm-rootfs builder.
type Builder struct {
	config Config
	// testHost replaces the real host in tests.
	testHost *host
}

func (b *Builder) host() host {
	if b.testHost != nil {
		return *b.testHost
	}
	return realHost()
}

var _ packersdk.Builder = (*Builder)(nil)

func (b *Builder) ConfigSpec() hcldec.ObjectSpec { return b.config.FlatMapstructure().HCL2Spec() }

func (b *Builder) Prepare(raws ...interface{}) ([]string, []string, error) {
	if err := checkPlatform(); err != nil {
		return nil, nil, err
	}
	if err := b.config.Prepare(realHost(), raws...); err != nil {
		return nil, nil, err
	}
	return []string{GeneratedChroot, GeneratedChrootDir}, append(b.config.warnings(), b.config.hostProblems(realHost())...), nil
}

// GeneratedChroot is the builder's generated variable that tells
// provisioners their target is this builder's chroot ("true"): the
// podvm-gpu provisioner then runs dpkg without fsync, as mkosi does.
const GeneratedChroot = "PodvmChroot"

// GeneratedChrootDir is the tree's path on the build host, where the
// podvm-gpu provisioner places cached .debs for apt in the chroot.
const GeneratedChrootDir = "PodvmChrootDir"

func (b *Builder) Run(ctx context.Context, ui packersdk.Ui, hook packersdk.Hook) (packersdk.Artifact, error) {
	if problems := b.config.hostProblems(b.host()); len(problems) > 0 {
		var errs *packersdk.MultiError
		for _, p := range problems {
			errs = packersdk.MultiErrorAppend(errs, errors.New(p))
		}
		return nil, errs
	}
	sess := newSession(ui)
	// Deferred so it also runs when a step panics, and when -on-error=abort
	// skips the steps' cleanups: the tree is kept then, its mounts are not.
	defer func() {
		if err := sess.release(); err != nil {
			ui.Error(err.Error())
		}
	}()

	state := new(multistep.BasicStateBag)
	state.Put("config", &b.config)
	state.Put("hook", hook)
	state.Put("ui", ui)
	state.Put("session", sess)
	(&packerbuilderdata.GeneratedData{State: state}).Put(GeneratedChroot, "true")

	runner := commonsteps.NewRunnerWithPauseFn(b.steps(), b.config.PackerConfig, ui, state)
	runner.Run(ctx, state)

	if err, ok := state.GetOk("error"); ok {
		return nil, err.(error)
	}
	if _, ok := state.GetOk(multistep.StateCancelled); ok {
		return nil, errors.New("build was cancelled")
	}
	if _, ok := state.GetOk(multistep.StateHalted); ok {
		return nil, errors.New("build was halted")
	}
	a := &Artifact{Dir: b.config.OutputDirectory, Tarball: b.config.OutputTarball, Image: b.config.OutputImage}
	ui.Say(a.String())
	return a, nil
}

func (b *Builder) steps() []multistep.Step {
	files := &stepChrootFiles{}
	steps := []multistep.Step{
		&stepLock{},
		&stepOutputDir{},
		&stepSource{},
		&stepAptSources{},
		&stepMount{},
		files,
		&stepUpgrade{},
		&commonsteps.StepProvision{},
		&stepTeardown{files: files},
		&stepHygiene{},
	}
	if b.config.OutputTarball != "" {
		steps = append(steps, &stepExport{})
	}
	if b.config.isDisk() {
		steps = append(steps, &stepDisk{})
	}
	return steps
}
