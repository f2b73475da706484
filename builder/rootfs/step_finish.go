package rootfs

import (
	"context"
	"fmt"
	"os"

	"github.com/hashicorp/packer-plugin-sdk/multistep"
	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"
)

// stepTeardown undoes the chroot setup once provisioning succeeded, before
// the tree is packed: the build files restored, then everything unmounted.
// The steps' own cleanups do the same when the build fails.
type stepTeardown struct {
	files *stepChrootFiles
}

func (s *stepTeardown) Run(_ context.Context, state multistep.StateBag) multistep.StepAction {
	ui := state.Get("ui").(packersdk.Ui)
	sess := state.Get("session").(*session)
	if err := s.files.restore(ui); err != nil {
		return halt(state, err)
	}
	if err := sess.takeDown(); err != nil {
		return halt(state, fmt.Errorf("take down the chroot: %w", err))
	}
	ui.Say("Put back the tree's own resolv.conf and policy-rc.d (or their absence)")
	return multistep.ActionContinue
}

func (s *stepTeardown) Cleanup(multistep.StateBag) {}

// stepExport packs the finished tree into output_tarball.
type stepExport struct{}

func (s *stepExport) Run(ctx context.Context, state multistep.StateBag) multistep.StepAction {
	cfg := state.Get("config").(*Config)
	ui := state.Get("ui").(packersdk.Ui)
	root := state.Get("session").(*session).root
	if err := os.MkdirAll(dirOf(cfg.OutputTarball), 0o755); err != nil {
		return halt(state, fmt.Errorf("output_tarball: %w", err))
	}
	err := timed(ui, fmt.Sprintf("Packing %s into %s", root, cfg.OutputTarball), func() error {
		return createTarball(ctx, root, cfg.OutputTarball)
	})
	if err != nil {
		return halt(state, err)
	}
	return multistep.ActionContinue
}

func (s *stepExport) Cleanup(multistep.StateBag) {}
