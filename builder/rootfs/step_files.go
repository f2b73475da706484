package rootfs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"syscall"

	"github.com/hashicorp/packer-plugin-sdk/multistep"
	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"

	"github.com/podvm-gpu/packer-plugin-podvm/chroot"
)

// policyRcD makes invoke-rc.d refuse to start or restart any service
// (policy-rc.d(8), exit status 101 = action forbidden): a package's daemon
// must not start on the build host.
const policyRcD = "#!/bin/sh\n# Installed by the podvm-rootfs builder for the build only.\nexit 101\n"

// stepChrootFiles puts the host's resolv.conf (so apt can resolve the
// mirror) and a policy-rc.d into the tree for the build, and restores what
// was there before.
type stepChrootFiles struct {
	overrides []*override
}

func (s *stepChrootFiles) Run(_ context.Context, state multistep.StateBag) multistep.StepAction {
	ui := state.Get("ui").(packersdk.Ui)
	root := state.Get("session").(*session).root
	if resolv, err := os.ReadFile("/etc/resolv.conf"); err != nil {
		ui.Say(fmt.Sprintf("Not copying the host's resolv.conf (%v): the chroot keeps its own", err))
	} else if err := s.install(root, "/etc/resolv.conf", resolv, 0o644); err != nil {
		return halt(state, err)
	}
	if err := s.install(root, "/usr/sbin/policy-rc.d", []byte(policyRcD), 0o755); err != nil {
		return halt(state, err)
	}
	return multistep.ActionContinue
}

func (s *stepChrootFiles) install(root, p string, data []byte, mode fs.FileMode) error {
	o, err := installOverride(root, p, data, mode)
	if err != nil {
		return err
	}
	s.overrides = append(s.overrides, o)
	return nil
}

// restore puts back the original files, newest first. It may be called
// more than once.
func (s *stepChrootFiles) restore(ui packersdk.Ui) error {
	var errs []error
	for i := len(s.overrides) - 1; i >= 0; i-- {
		kept, err := s.overrides[i].restore()
		if err != nil {
			errs = append(errs, err)
		}
		if kept {
			ui.Say(fmt.Sprintf("Keeping %s as the build changed it", s.overrides[i].name))
		}
	}
	s.overrides = nil
	return errors.Join(errs...)
}

func (s *stepChrootFiles) Cleanup(state multistep.StateBag) {
	ui := state.Get("ui").(packersdk.Ui)
	if err := s.restore(ui); err != nil {
		ui.Error(err.Error())
	}
}

// override is a file replaced for the duration of the build.
type override struct {
	name string // as the chroot sees it
	path string // on the host, inside the tree
	data []byte // what we installed

	existed bool
	link    string // the original was a symlink to this
	orig    []byte
	mode    fs.FileMode
	uid     int
	gid     int
}

func installOverride(root, name string, data []byte, mode fs.FileMode) (*override, error) {
	dir, err := chroot.ResolveIn(root, path.Dir(name))
	if err != nil {
		return nil, fmt.Errorf("install %s: %w", name, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("install %s: %w", name, err)
	}
	o := &override{name: name, path: filepath.Join(dir, path.Base(name)), data: data}
	fi, err := os.Lstat(o.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("install %s: %w", name, err)
	case fi.Mode()&fs.ModeSymlink != 0:
		o.existed = true
		if o.link, err = os.Readlink(o.path); err != nil {
			return nil, fmt.Errorf("install %s: %w", name, err)
		}
	case fi.Mode().IsRegular():
		o.existed = true
		if o.orig, err = os.ReadFile(o.path); err != nil {
			return nil, fmt.Errorf("install %s: %w", name, err)
		}
		o.mode = fi.Mode()
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			o.uid, o.gid = int(st.Uid), int(st.Gid)
		}
	default:
		return nil, fmt.Errorf("install %s: %s is a %s", name, o.path, fi.Mode().Type())
	}
	if o.existed {
		if err := os.Remove(o.path); err != nil {
			return nil, fmt.Errorf("install %s: %w", name, err)
		}
	}
	if err := writeMode(o.path, data, mode); err != nil {
		return nil, fmt.Errorf("install %s: %w", name, err)
	}
	return o, nil
}

// restore puts the original back. If the build replaced our file with
// something else (a package that manages resolv.conf, say), that stays and
// kept is true.
func (o *override) restore() (kept bool, err error) {
	now, err := os.Lstat(o.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// Removed by the build: put the original back all the same.
	case err != nil:
		return false, fmt.Errorf("restore %s: %w", o.name, err)
	case !now.Mode().IsRegular():
		return true, nil
	default:
		cur, err := os.ReadFile(o.path)
		if err != nil {
			return false, fmt.Errorf("restore %s: %w", o.name, err)
		}
		if !bytes.Equal(cur, o.data) {
			return true, nil
		}
		if err := os.Remove(o.path); err != nil {
			return false, fmt.Errorf("restore %s: %w", o.name, err)
		}
	}
	if !o.existed {
		return false, nil
	}
	if o.link != "" {
		if err := os.Symlink(o.link, o.path); err != nil {
			return false, fmt.Errorf("restore %s: %w", o.name, err)
		}
		return false, nil
	}
	if err := writeMode(o.path, o.orig, o.mode); err != nil {
		return false, fmt.Errorf("restore %s: %w", o.name, err)
	}
	if err := os.Lchown(o.path, o.uid, o.gid); err != nil {
		return false, fmt.Errorf("restore %s: %w", o.name, err)
	}
	// chown clears setuid and setgid bits: set the mode again.
	if err := os.Chmod(o.path, o.mode); err != nil {
		return false, fmt.Errorf("restore %s: %w", o.name, err)
	}
	return false, nil
}

// writeMode creates path with data and exactly mode, whatever the umask.
func writeMode(path string, data []byte, mode fs.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
