package rootfs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/hashicorp/packer-plugin-sdk/multistep"
	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"

	"github.com/podvm-gpu/packer-plugin-podvm/aptsource"
	"github.com/podvm-gpu/packer-plugin-podvm/chroot"
	"github.com/podvm-gpu/packer-plugin-podvm/distro"
)

// Where the image's apt sources go, as the chroot sees them.
const (
	debianSourcesPath  = "/etc/apt/sources.list.d/debian.sources"
	oneLineSourcesPath = "/etc/apt/sources.list"
	// Where the keyring setting is copied to, so the image's apt trusts the
	// mirror debootstrap trusted.
	mirrorKeyringPath = "/etc/apt/keyrings/podvm-rootfs-mirror.gpg"
)

// renderSources writes sources in deb822 form (sources.list(5)).
func renderSources(sources []aptsource.Source) string {
	return aptsource.Render("Written by the podvm-rootfs builder (apt_sources).", sources)
}

// imageSources lists the image's apt sources: the archive from mirror with
// its updates, then the security suite from security, if there is one.
func imageSources(suite, mirror, security string, components []string, signedBy string) []aptsource.Source {
	srcs := []aptsource.Source{{Types: []string{"deb"}, URIs: []string{strings.TrimSuffix(mirror, "/")}, Suites: aptsource.UpdatesSuites(suite), Components: components, SignedBy: signedBy}}
	if sec := aptsource.SecuritySuite(suite); sec != "" && security != "" {
		srcs = append(srcs, aptsource.Source{Types: []string{"deb"}, URIs: []string{strings.TrimSuffix(security, "/")}, Suites: []string{sec}, Components: components, SignedBy: distro.DebianArchiveKeyring})
	}
	return srcs
}

// treeMirror returns the archive debootstrap wrote into the tree's
// sources.list: the mirror it used when none was given.
func treeMirror(aptDir, suite string) string {
	return aptsource.DistroMirror(aptsource.Read(aptDir), "debian", suite)
}

// stepAptSources gives a debootstrapped tree the release's update and
// security suites (apt_sources). It runs on every build, after the tree
// is bootstrapped or unpacked from the cache, whose entries keep
// debootstrap's own sources.list.
type stepAptSources struct{}

func (s *stepAptSources) Run(_ context.Context, state multistep.StateBag) multistep.StepAction {
	cfg := state.Get("config").(*Config)
	if !cfg.AptSources.True() {
		return multistep.ActionContinue
	}
	ui := state.Get("ui").(packersdk.Ui)
	root := state.Get("session").(*session).root
	if err := writeAptSources(cfg, ui, root); err != nil {
		return halt(state, fmt.Errorf("apt_sources: %w", err))
	}
	return multistep.ActionContinue
}

func (s *stepAptSources) Cleanup(multistep.StateBag) {}

func writeAptSources(cfg *Config, ui packersdk.Ui, root string) error {
	aptDir, err := chroot.ResolveIn(root, "/etc/apt")
	if err != nil {
		return err
	}
	mirror, origin := cfg.Mirror, cfg.mirrorOrigin
	if mirror == "" {
		mirror = treeMirror(aptDir, cfg.Suite)
		if mirror == "" {
			return fmt.Errorf("debootstrap used its default mirror and the tree's %s names none; set mirror", oneLineSourcesPath)
		}
		origin = "the mirror debootstrap wrote into " + oneLineSourcesPath
	}
	signedBy := distro.DebianArchiveKeyring
	if cfg.Keyring != "" {
		// The mirror is signed with the keyring setting's key, which the
		// image's apt must trust as debootstrap did.
		data, err := os.ReadFile(cfg.Keyring)
		if err != nil {
			return fmt.Errorf("keyring: %w", err)
		}
		if err := replaceFile(root, mirrorKeyringPath, data, 0o644); err != nil {
			return err
		}
		signedBy = mirrorKeyringPath
	}
	srcs := imageSources(cfg.Suite, mirror, cfg.SecurityMirror, cfg.Components, signedBy)
	if err := replaceFile(root, debianSourcesPath, []byte(renderSources(srcs)), 0o644); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(aptDir, "sources.list")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", oneLineSourcesPath, err)
	}
	ui.Say(fmt.Sprintf("Wrote %s: %s from %s (from %s)", debianSourcesPath, strings.Join(srcs[0].Suites, " "), mirror, origin))
	switch {
	case len(srcs) > 1:
		ui.Say(fmt.Sprintf("Security updates: %s from %s (from %s)", srcs[1].Suites[0], cfg.SecurityMirror, cfg.securityOrigin))
	case aptsource.SecuritySuite(cfg.Suite) == "":
		ui.Say(fmt.Sprintf("No security suite: %s has none", cfg.Suite))
	default:
		for _, w := range cfg.warnings() {
			ui.Error("Warning: " + w)
		}
	}
	return nil
}

// replaceFile writes name (as the chroot sees it) inside root with mode,
// owned by root, replacing whatever was there without following a link.
func replaceFile(root, name string, data []byte, mode fs.FileMode) error {
	dir, err := chroot.ResolveIn(root, path.Dir(name))
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	p := filepath.Join(dir, path.Base(name))
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := writeMode(p, data, mode); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := os.Lchown(p, 0, 0); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}
