package rootfs

import (
	"bytes"
	"context"
	"fmt"

	"github.com/podvm-gpu/packer-plugin-podvm/cachedir"
	"github.com/podvm-gpu/packer-plugin-podvm/chroot"
	"github.com/podvm-gpu/packer-plugin-podvm/debcache"

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

// upgradeDownloads is the command of upgradeCommands that downloads.
const upgradeDownloads = 1

// debStore is the host's deb cache the builder shares with the podvm-gpu
// provisioner, in build_cache_dir/debs; none with skip_cache or
// build_cache=no.
func debStore(cfg *Config, ui packersdk.Ui) *debcache.Store {
	if cfg.SkipCache || cfg.BuildCache == cachedir.ModeNo {
		return nil
	}
	root, err := cachedir.Open(cfg.BuildCacheDir)
	if err != nil {
		ui.Say(fmt.Sprintf("deb cache: off: %v", err))
		return nil
	}
	return debcache.New(root, cfg.buildCacheMax)
}

// outputInChroot runs command through comm and returns its standard
// output; a non-zero exit is an error with the end of its output.
func outputInChroot(ctx context.Context, comm packersdk.Communicator, command string) (string, error) {
	var stdout bytes.Buffer
	out := lineLog("chroot", nil)
	rc := &packersdk.RemoteCmd{Command: command, Stdout: &stdout, Stderr: out}
	if err := comm.Start(ctx, rc); err != nil {
		return "", err
	}
	if status := rc.Wait(); status != 0 {
		return "", fmt.Errorf("%q exited %d%s", command, status, tail(out))
	}
	return stdout.String(), nil
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
	sess := state.Get("session").(*session)
	debs := debStore(cfg, ui)
	err := timed(ui, "Upgrading the tree's packages", func() error {
		for i, c := range upgradeCommands {
			run := func() error { return runInChroot(ctx, comm, ui, c) }
			if i == upgradeDownloads && debs != nil {
				// Through the host's deb cache (debcache): apt's archive
				// directory, resolved inside the tree.
				dir := func() (string, error) { return chroot.ResolveIn(sess.root, "/var/cache/apt/archives") }
				query := func(cmd string) (string, error) { return outputInChroot(ctx, comm, cmd) }
				inner := run
				run = func() error { return debs.Around(query, c, dir, inner, ui.Say) }
			}
			if err := timed(ui, "Running "+c, run); err != nil {
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
	out := lineLog("chroot", ui.Say)
	rc := &packersdk.RemoteCmd{Command: command, Stdout: out, Stderr: out}
	if err := comm.Start(ctx, rc); err != nil {
		return err
	}
	status := rc.Wait()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%q: %w", command, err)
	}
	if status != 0 {
		return fmt.Errorf("%q exited %d%s", command, status, tail(out))
	}
	return nil
}
