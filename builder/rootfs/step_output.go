package rootfs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/hashicorp/packer-plugin-sdk/multistep"
	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"

	"github.com/podvm-gpu/packer-plugin-podvm/chroot"
	"github.com/podvm-gpu/packer-plugin-podvm/chroot/mount"
)

func halt(state multistep.StateBag, err error) multistep.StepAction {
	state.Put("error", err)
	state.Get("ui").(packersdk.Ui).Error(err.Error())
	return multistep.ActionHalt
}

func failed(state multistep.StateBag) bool {
	_, cancelled := state.GetOk(multistep.StateCancelled)
	_, halted := state.GetOk(multistep.StateHalted)
	return cancelled || halted
}

// stepLock takes the output directory's lock, so two builds cannot share
// it.
type stepLock struct{}

func (s *stepLock) Run(_ context.Context, state multistep.StateBag) multistep.StepAction {
	cfg := state.Get("config").(*Config)
	sess := state.Get("session").(*session)
	l, err := lockDir(cfg.OutputDirectory)
	if err != nil {
		return halt(state, err)
	}
	sess.lock = l
	return multistep.ActionContinue
}

func (s *stepLock) Cleanup(state multistep.StateBag) {
	sess := state.Get("session").(*session)
	if err := sess.release(); err != nil {
		state.Get("ui").(packersdk.Ui).Error(err.Error())
	}
}

// stepOutputDir makes the output directory, replacing an existing one
// only with -force, and removes it again when the build fails.
type stepOutputDir struct {
	created bool
}

func (s *stepOutputDir) Run(_ context.Context, state multistep.StateBag) multistep.StepAction {
	cfg := state.Get("config").(*Config)
	ui := state.Get("ui").(packersdk.Ui)
	sess := state.Get("session").(*session)
	dir := cfg.OutputDirectory

	for key, f := range map[string]string{"output_tarball": cfg.OutputTarball, "output_image": cfg.OutputImage} {
		if f == "" {
			continue
		}
		if _, err := os.Stat(f); err == nil && !cfg.PackerForce {
			return halt(state, fmt.Errorf("%s %s already exists; remove it or run packer build -force", key, f))
		}
	}

	fi, err := os.Lstat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return halt(state, fmt.Errorf("output_directory: %w", err))
	case !fi.IsDir():
		return halt(state, fmt.Errorf("output_directory %s exists and is not a directory", dir))
	default:
		entries, err := os.ReadDir(dir)
		if err != nil {
			return halt(state, fmt.Errorf("output_directory: %w", err))
		}
		if len(entries) == 0 {
			break
		}
		// Nothing in a directory is touched without -force: it may be
		// somebody else's, processes and mounts included.
		if !cfg.PackerForce {
			return halt(state, fmt.Errorf("output_directory %s already exists and is not empty; remove it or run packer build -force", dir))
		}
		// We hold the lock, so no live build owns mounts or processes
		// under the directory: any there were left by one that was killed
		// (SIGKILL skips every cleanup). Its processes go first: they
		// keep the mounts busy and would run on in a deleted tree.
		real := dir
		if r, err := filepath.EvalSymlinks(dir); err == nil {
			real = r
		}
		killed, err := chroot.KillProcesses(real, killWait)
		if len(killed) > 0 {
			ui.Error(fmt.Sprintf("Warning: killed %d processes that an earlier, interrupted build left running in %s: %s", len(killed), dir, processList(killed)))
		}
		if err != nil {
			return halt(state, fmt.Errorf("output_directory: %w", err))
		}
		found, err := mount.Sweep(dir, sess.mounts.Warn)
		if len(found) > 0 {
			ui.Error(fmt.Sprintf("Warning: unmounted %d mounts that an earlier, interrupted build left under %s", len(found), dir))
		}
		if err != nil {
			return halt(state, fmt.Errorf("output_directory: %w", err))
		}
		ui.Say(fmt.Sprintf("Removing the existing output_directory %s (-force)", dir))
		if err := removeTree(dir); err != nil {
			return halt(state, err)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return halt(state, fmt.Errorf("output_directory: %w", err))
	}
	// A root directory is 0755 whatever the umask.
	if err := os.Chmod(dir, 0o755); err != nil {
		return halt(state, fmt.Errorf("output_directory: %w", err))
	}
	s.created = true
	// The kernel reports mounts and process roots by their real path.
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return halt(state, fmt.Errorf("output_directory: %w", err))
	}
	sess.root = real
	return multistep.ActionContinue
}

func (s *stepOutputDir) Cleanup(state multistep.StateBag) {
	if !s.created || !failed(state) {
		return
	}
	cfg := state.Get("config").(*Config)
	ui := state.Get("ui").(packersdk.Ui)
	sess := state.Get("session").(*session)
	if err := sess.takeDown(); err != nil {
		ui.Error(fmt.Sprintf("Not removing %s: %v", cfg.OutputDirectory, err))
		return
	}
	ui.Say(fmt.Sprintf("Removing output_directory %s as the build failed or was cancelled (-on-error=abort keeps it)", cfg.OutputDirectory))
	if err := removeTree(cfg.OutputDirectory); err != nil {
		ui.Error(err.Error())
	}
}
