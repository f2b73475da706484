package rootfs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/packer-plugin-sdk/multistep"
	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"
	"github.com/hashicorp/packer-plugin-sdk/packerbuilderdata"

	"github.com/podvm-gpu/packer-plugin-podvm/chroot"
	"github.com/podvm-gpu/packer-plugin-podvm/chroot/mount"
)

// chrootMount is a mount inside the tree, its target as the chroot sees it.
type chrootMount struct {
	mount.Mount
	path string
	// onHostDev: the target lies on the bind of the host's /dev, so it is
	// never created (that would write to the host); without it the mount
	// is skipped.
	onHostDev bool
}

// chrootMounts is what package scripts expect to find: /proc, /sys, /dev
// with ptys and shared memory, and /run as tmpfs as at boot. Order
// matters: dev/pts and dev/shm go on top of the /dev bind.
func chrootMounts() []chrootMount {
	const (
		nosuid = mount.NoSuid
		nodev  = mount.NoDev
		noexec = mount.NoExec
	)
	return []chrootMount{
		{path: "/proc", Mount: mount.Mount{Source: "proc", FSType: "proc", Flags: nosuid | nodev | noexec}},
		// Read-only: nothing in an image build has business changing the
		// host kernel's settings through /sys.
		{path: "/sys", Mount: mount.Mount{Source: "sysfs", FSType: "sysfs", Flags: nosuid | nodev | noexec | mount.ReadOnly}},
		// The host's device nodes, without its submounts (non-recursive),
		// made private so the mounts below stay out of the host's /dev.
		{path: "/dev", Mount: mount.Mount{Source: "/dev", Flags: mount.Bind, Private: true}},
		// A devpts instance of its own: ptys opened in the chroot do not
		// show up among the host's.
		{path: "/dev/pts", onHostDev: true, Mount: mount.Mount{Source: "devpts", FSType: "devpts", Flags: nosuid | noexec,
			Data: "newinstance,ptmxmode=0666,mode=0620,gid=5"}},
		{path: "/dev/shm", onHostDev: true, Mount: mount.Mount{Source: "tmpfs", FSType: "tmpfs", Flags: nosuid | nodev, Data: "mode=1777"}},
		{path: "/run", Mount: mount.Mount{Source: "tmpfs", FSType: "tmpfs", Flags: nosuid | nodev, Data: "mode=0755"}},
	}
}

// stepMount mounts the chroot's filesystems and hands provisioners the
// communicator, under the state key "communicator" that
// commonsteps.StepProvision reads.
type stepMount struct{}

func (s *stepMount) Run(ctx context.Context, state multistep.StateBag) multistep.StepAction {
	ui := state.Get("ui").(packersdk.Ui)
	sess := state.Get("session").(*session)
	var done []string
	for _, m := range chrootMounts() {
		// Resolved inside the tree: an image whose /proc is a symlink to
		// "/etc" must not get proc mounted on the host's /etc.
		target, err := chroot.ResolveIn(sess.root, m.path)
		if err != nil {
			return halt(state, fmt.Errorf("mount %s: %w", m.path, err))
		}
		if m.onHostDev {
			if fi, err := os.Stat(target); err != nil || !fi.IsDir() {
				ui.Say(fmt.Sprintf("Not mounting %s: the host's /dev has no such directory", m.path))
				continue
			}
		} else if err := os.MkdirAll(target, 0o755); err != nil {
			return halt(state, fmt.Errorf("mount %s: %w", m.path, err))
		}
		m.Target = target
		if err := sess.mounts.Mount(m.Mount); err != nil {
			return halt(state, err)
		}
		rel, _ := filepath.Rel(sess.root, target)
		done = append(done, rel)
	}
	ui.Say(fmt.Sprintf("Mounted %s in %s", strings.Join(done, ", "), sess.root))

	comm, err := chroot.New(sess.root, nil)
	if err != nil {
		return halt(state, err)
	}
	sess.comm = comm
	// Packer's RPC layer gives the communicator a context that is never
	// cancelled; this makes cancelling the build end its commands.
	sess.stopCloseOnCancel = context.AfterFunc(ctx, func() { comm.Close() })
	state.Put("communicator", comm)
	(&packerbuilderdata.GeneratedData{State: state}).Put(GeneratedChrootDir, sess.root)
	return multistep.ActionContinue
}

func (s *stepMount) Cleanup(state multistep.StateBag) {
	sess := state.Get("session").(*session)
	if err := sess.takeDown(); err != nil {
		state.Get("ui").(packersdk.Ui).Error(err.Error())
	}
}
