package rootfs

import (
	"context"
	"fmt"

	"github.com/hashicorp/packer-plugin-sdk/multistep"
	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"
)

// upgradeCommands bring the tree up to date with its apt sources. The
// communicator's environment sets DEBIAN_FRONTEND=noninteractive; the
// dpkg options keep a changed configuration file without asking, and skip
// dpkg's fsync calls, as mkosi does: a crash loses only this build's own
// tree. The downloaded packages are not needed once installed.
var upgradeCommands = []string{
	"apt-get -q update",
	"apt-get -q -y -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold -o Dpkg::Options::=--force-unsafe-io full-upgrade",
	"apt-get -q clean",
}

// stepUpgrade runs upgradeCommands in the chroot (upgrade), after the
// mounts, resolv.conf and policy-rc.d are in place and before any
// provisioner.
type stepUpgrade struct{}

func (s *stepUpgrade) Run(ctx context.Context, state multistep.StateBag) multistep.StepAction {
	cfg := state.Get("config").(*Config)
	if !cfg.Upgrade.True() {
		return multistep.ActionContinue
	}
	ui := state.Get("ui").(packersdk.Ui)
	comm := state.Get("communicator").(packersdk.Communicator)
	err := timed(ui, "Upgrading the tree's packages", func() error {
		for _, c := range upgradeCommands {
			if err := timed(ui, "Running "+c, func() error { return runInChroot(ctx, comm, ui, c) }); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return halt(state, fmt.Errorf("upgrade: %w", err))
	}
	return multistep.ActionContinue
}

func (s *stepUpgrade) Cleanup(multistep.StateBag) {}

// runInChroot runs command through comm, its output shown line by line,
// and fails with the exit status and the last lines.
func runInChroot(ctx context.Context, comm packersdk.Communicator, ui packersdk.Ui, command string) error {
	out := &lineLog{prefix: "chroot", echo: ui.Say}
	rc := &packersdk.RemoteCmd{Command: command, Stdout: out, Stderr: out}
	if err := comm.Start(ctx, rc); err != nil {
		return err
	}
	status := rc.Wait()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%q: %w", command, err)
	}
	if status != 0 {
		return fmt.Errorf("%q exited %d%s", command, status, out.tail())
	}
	return nil
}
