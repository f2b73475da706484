package rootfs

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

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

// stepHygiene leaves the tree as cloud images are: no machine ID, no SSH
// host keys, no apt lists or package cache; then checks that it is so,
// and fails the build otherwise.
type stepHygiene struct{}

func (s *stepHygiene) Run(_ context.Context, state multistep.StateBag) multistep.StepAction {
	ui := state.Get("ui").(packersdk.Ui)
	root := state.Get("session").(*session).root
	if err := scrubImage(root); err != nil {
		return halt(state, fmt.Errorf("image hygiene: %w", err))
	}
	if problems := hygieneProblems(root); len(problems) > 0 {
		return halt(state, fmt.Errorf("image hygiene: the tree still carries:\n  %s", strings.Join(problems, "\n  ")))
	}
	ui.Say("Image hygiene: empty /etc/machine-id, no SSH host keys, no apt lists or package cache, no private key material in any file")
	return multistep.ActionContinue
}

func (s *stepHygiene) Cleanup(multistep.StateBag) {}

// stepDisk writes the bootable disk image.
type stepDisk struct{}

func (s *stepDisk) Run(ctx context.Context, state multistep.StateBag) multistep.StepAction {
	cfg := state.Get("config").(*Config)
	ui := state.Get("ui").(packersdk.Ui)
	root := state.Get("session").(*session).root
	if err := os.MkdirAll(dirOf(cfg.OutputImage), 0o755); err != nil {
		return halt(state, fmt.Errorf("output_image: %w", err))
	}
	var res diskResult
	start := time.Now()
	err := timed(ui, fmt.Sprintf("Writing bootable %s disk %s", cfg.Format, cfg.OutputImage), func() error {
		var err error
		res, err = buildDisk(ctx, diskBuild{
			Root: root, Arch: cfg.Arch, Format: cfg.Format, Size: cfg.diskBytes, Cmdline: cfg.KernelCmdline,
			Output: cfg.OutputImage, HostBootloaderDir: hostBootloaderDir, Say: ui.Say,
		})
		return err
	})
	if err != nil {
		return halt(state, err)
	}
	ui.Say(fmt.Sprintf("Disk %s: %s, virtual size %d MiB, %d MiB on disk, kernels %s, built in %s",
		cfg.OutputImage, cfg.Format, res.Layout.Size/mib, diskUsage(cfg.OutputImage)/mib, kernelList(res.Kernels), time.Since(start).Round(time.Second)))
	return multistep.ActionContinue
}

// Cleanup has nothing to undo: the image is renamed into place only when
// complete, and its work directory is removed by buildDisk, so a failed
// build leaves an earlier image as it was.
func (s *stepDisk) Cleanup(multistep.StateBag) {}

// hostBootloaderDir is where Debian's systemd-boot-efi puts systemd-boot.
const hostBootloaderDir = "/usr/lib/systemd/boot/efi"
