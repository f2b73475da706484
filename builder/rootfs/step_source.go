package rootfs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/packer-plugin-sdk/multistep"
	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"

	"github.com/podvm-gpu/packer-plugin-podvm/cachedir"
	"github.com/podvm-gpu/packer-plugin-podvm/chroot/mount"
)

// stepSource fills the empty output directory: from debootstrap (through
// the base tree cache), a tarball or a directory.
type stepSource struct {
	now func() time.Time // for tests; nil means time.Now
}

func (s *stepSource) Run(ctx context.Context, state multistep.StateBag) multistep.StepAction {
	cfg := state.Get("config").(*Config)
	ui := state.Get("ui").(packersdk.Ui)
	root := state.Get("session").(*session).root
	var err error
	switch cfg.SourceType {
	case sourceDebootstrap:
		err = s.bootstrap(ctx, cfg, ui, root)
	case sourceTarball:
		err = timed(ui, fmt.Sprintf("Unpacking %s into %s", cfg.SourcePath, root), func() error {
			return extractTarball(ctx, cfg.SourcePath, root)
		})
	case sourceDirectory:
		err = timed(ui, fmt.Sprintf("Copying %s into %s", cfg.SourcePath, root), func() error {
			return copyTree(ctx, cfg.SourcePath, root)
		})
	}
	if err != nil {
		return halt(state, err)
	}
	return multistep.ActionContinue
}

func (s *stepSource) Cleanup(multistep.StateBag) {}

func (s *stepSource) bootstrap(ctx context.Context, cfg *Config, ui packersdk.Ui, root string) error {
	now := time.Now
	if s.now != nil {
		now = s.now
	}
	key := newBaseKey(cfg, now())
	if !cfg.SkipCache {
		done, err := s.fromCache(ctx, cfg, ui, key, root)
		if done || err != nil {
			return err
		}
	}

	mirror := cfg.Mirror
	if mirror == "" {
		mirror = "debootstrap's default mirror"
	}
	ui.Say(fmt.Sprintf("Mirror: %s (from %s)", mirror, cfg.mirrorOrigin))
	what := fmt.Sprintf("Running debootstrap %s (variant %s, %s, components %s", cfg.Suite, key.variantName(), cfg.Arch, strings.Join(cfg.Components, ","))
	if len(cfg.Include) > 0 {
		what += ", including " + strings.Join(cfg.Include, ",")
	}
	what += ")"
	err := timed(ui, what, func() error {
		cmd := exec.Command("debootstrap", debootstrapArgs(cfg, root)...)
		// The host's locale may not exist in the new tree; perl in the
		// package scripts would warn about it on every call.
		cmd.Env = append(os.Environ(), "LC_ALL=C", "DEBIAN_FRONTEND=noninteractive")
		return runHost(ctx, cmd)
	})
	// debootstrap mounts proc and sys in the target and unmounts them from
	// an exit trap, which a kill skips.
	if found, serr := mount.Sweep(root, nil); serr != nil {
		return fmt.Errorf("after debootstrap: %w", serr)
	} else if len(found) > 0 {
		ui.Say(fmt.Sprintf("Unmounted what debootstrap left mounted: %s", strings.Join(found, ", ")))
	}
	if err != nil {
		return err
	}
	if err := scrubHostIdentity(root); err != nil {
		return err
	}
	if cfg.SkipCache {
		return nil
	}

	entry := filepath.Join(cfg.CacheDir, key.fileName())
	err = timed(ui, "Saving the base tree to the cache as "+entry, func() error {
		// The cache directory itself is made as cachedir makes it, and
		// checked before anything is written into it.
		if err := os.MkdirAll(filepath.Dir(cfg.CacheDir), 0o755); err != nil {
			return fmt.Errorf("cache_dir: %w", err)
		}
		d, err := cachedir.OpenDir(cfg.CacheDir, cfg.CacheDir, true)
		if err != nil {
			return fmt.Errorf("cache_dir: %w", err)
		}
		defer d.Close()
		_, err = writeTarball(ctx, root, entry, true)
		return err
	})
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		// The tree itself is fine; only the next build gets slower.
		ui.Error(fmt.Sprintf("Warning: could not cache the base tree: %v", err))
		return nil
	}
	for _, old := range key.olderEntries(cfg.CacheDir) {
		if err := os.Remove(old); err == nil {
			os.Remove(old + digestSuffix)
			ui.Say("Removed the outdated cache entry " + old)
		}
	}
	return nil
}

// fromCache fills root from the cache entry of key when there is one that
// can be trusted, and says whether it did. An entry that is refused (no
// recorded SHA256, a mismatch, a link, the wrong owner or mode) or that
// fails to unpack is removed with a warning that says why, and the caller
// bootstraps afresh. A cache directory that fails the owner and mode rules
// fails the build: Prepare checked it, so someone changed it since.
func (s *stepSource) fromCache(ctx context.Context, cfg *Config, ui packersdk.Ui, key baseKey, root string) (bool, error) {
	d, err := cachedir.OpenDir(cfg.CacheDir, cfg.CacheDir, false)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("cache_dir: %w", err)
	}
	defer d.Close()
	name := key.fileName()
	cached := filepath.Join(cfg.CacheDir, name)
	f, err := openEntry(d, name)
	if errors.Is(err, errNoEntry) {
		return false, nil
	}
	if err != nil {
		ui.Error(fmt.Sprintf("Warning: refusing the cache entry %s: %v; removing it and bootstrapping afresh", cached, err))
		dropEntry(d, name)
		return false, nil
	}
	defer f.Close()
	err = timed(ui, "Unpacking the cached base tree "+cached, func() error {
		return extractFrom(ctx, f, root)
	})
	if err == nil {
		return true, scrubHostIdentity(root)
	}
	if ctx.Err() != nil {
		return false, err
	}
	// A damaged entry must not fail every build of the day.
	ui.Error(fmt.Sprintf("Warning: dropping the unusable cache entry %s; bootstrapping afresh", cached))
	dropEntry(d, name)
	if err := emptyTree(root); err != nil {
		return false, err
	}
	return false, nil
}

func debootstrapArgs(cfg *Config, root string) []string {
	args := []string{"--arch=" + cfg.Arch}
	if cfg.Variant != "" {
		args = append(args, "--variant="+cfg.Variant)
	}
	args = append(args, "--components="+strings.Join(cfg.Components, ","))
	if len(cfg.Include) > 0 {
		args = append(args, "--include="+strings.Join(cfg.Include, ","))
	}
	if cfg.Keyring != "" {
		args = append(args, "--keyring="+cfg.Keyring)
	}
	args = append(args, cfg.Suite, root)
	if cfg.Mirror != "" {
		args = append(args, cfg.Mirror)
	}
	return args
}

// debootstrap copies the build host's hostname, hosts and resolv.conf into
// the tree; an image must not carry them. The image gets Debian's neutral
// defaults and no resolv.conf (the builder supplies one only while it runs).
func scrubHostIdentity(root string) error {
	files := map[string]string{
		"etc/hostname": "localhost\n",
		"etc/hosts": "127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n" +
			"ff02::1\t\tip6-allnodes\nff02::2\t\tip6-allrouters\n",
	}
	for name, content := range files {
		p := filepath.Join(root, name)
		// Never write through a link that might point out of the tree.
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("reset %s: %w", name, err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return fmt.Errorf("reset %s: %w", name, err)
		}
	}
	p := filepath.Join(root, "etc/resolv.conf")
	if fi, err := os.Lstat(p); err == nil && fi.Mode().IsRegular() {
		if err := os.Remove(p); err != nil {
			return fmt.Errorf("remove the host's resolv.conf: %w", err)
		}
	}
	return nil
}
