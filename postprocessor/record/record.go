//go:generate go tool packer-sdc mapstructure-to-hcl2 -type Config

// Package record is the podvm-record post-processor: once the builder has
// written the disk, it records the disk's size, SHA256 and dm-verity root
// hash beside the manifest that the podvm-gpu provisioner wrote
// (disk.json), signed with the repository's key when the user gave one.
// The manifest cannot hold the disk's digest: it is inside the disk.
package record

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2/hcldec"
	"github.com/hashicorp/packer-plugin-sdk/common"
	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"
	"github.com/hashicorp/packer-plugin-sdk/template/config"
	"github.com/hashicorp/packer-plugin-sdk/template/interpolate"

	"github.com/podvm-gpu/packer-plugin-podvm/bake"
	"github.com/podvm-gpu/packer-plugin-podvm/inputcheck"
)

// Config is the podvm-record post-processor's configuration.
type Config struct {
	common.PackerConfig `mapstructure:",squash"`

	// The podvm-gpu provisioner's output_dir: manifest.json and
	// sbom.cdx.json are read from it, disk.json (and disk.json.asc) written
	// into it.
	ArtifactsDirectory string `mapstructure:"artifacts_directory" required:"true"`
	// The disk to record. Defaults to the one disk image (.raw, .qcow2,
	// .vhd, .img) among the build artifact's files.
	Disk string `mapstructure:"disk"`
	// The OpenPGP key that signs disk.json: the provisioner's
	// local_repo_signing_key. Without it disk.json is unsigned, as the
	// build's ephemeral key is gone by the time the disk exists.
	SigningKey string `mapstructure:"local_repo_signing_key"`
	// The environment variable that holds the signing key's passphrase.
	PassphraseEnv string `mapstructure:"local_repo_passphrase_env"`

	ctx interpolate.Context
}

// PostProcessor records a build's disk beside its manifest.
type PostProcessor struct {
	config Config
}

func (p *PostProcessor) ConfigSpec() hcldec.ObjectSpec { return p.config.FlatMapstructure().HCL2Spec() }

// Configure decodes and checks every setting up front: a key that cannot
// be loaded fails the build before it starts, not after the disk is made.
func (p *PostProcessor) Configure(raws ...interface{}) error {
	c := &p.config
	if err := config.Decode(c, &config.DecodeOpts{
		PluginType:         "podvm-record",
		Interpolate:        true,
		InterpolateContext: &c.ctx,
	}, raws...); err != nil {
		return err
	}
	var errs *packersdk.MultiError
	add := func(format string, a ...any) { errs = packersdk.MultiErrorAppend(errs, fmt.Errorf(format, a...)) }
	if c.ArtifactsDirectory == "" {
		add("artifacts_directory: required: the podvm-gpu provisioner's output_dir, where manifest.json is")
	} else if err := inputcheck.HostPath(c.ArtifactsDirectory); err != nil {
		add("artifacts_directory: %v", err)
	}
	if c.Disk != "" {
		if err := inputcheck.HostPath(c.Disk); err != nil {
			add("disk: %v", err)
		}
	}
	if c.PassphraseEnv != "" && c.SigningKey == "" {
		add("local_repo_passphrase_env: %q goes with local_repo_signing_key, which is not set", c.PassphraseEnv)
	}
	if c.SigningKey != "" {
		if err := inputcheck.HostPath(c.SigningKey); err != nil {
			add("local_repo_signing_key: %v", err)
		} else if _, err := bake.SignerFingerprint(c.SigningKey, c.PassphraseEnv, time.Now()); err != nil {
			add("local_repo_signing_key: %s: %v", c.SigningKey, err)
		}
	}
	if errs != nil && len(errs.Errors) > 0 {
		return errs
	}
	return nil
}

// diskSuffixes are the names of disk images among an artifact's files.
var diskSuffixes = []string{".raw", ".qcow2", ".vhd", ".img"}

// PostProcess records the disk and passes the artifact on unchanged.
func (p *PostProcessor) PostProcess(ctx context.Context, ui packersdk.Ui, a packersdk.Artifact) (packersdk.Artifact, bool, bool, error) {
	c := p.config
	disk := c.Disk
	if disk == "" {
		var disks []string
		for _, f := range a.Files() {
			if slices.ContainsFunc(diskSuffixes, func(s string) bool { return strings.HasSuffix(f, s) }) {
				disks = append(disks, f)
			}
		}
		if len(disks) != 1 {
			return nil, false, false, fmt.Errorf("podvm-record: want one disk image (%s) among the artifact's files %q, found %d; set disk", strings.Join(diskSuffixes, ", "), a.Files(), len(disks))
		}
		disk = disks[0]
	}
	start := time.Now()
	ui.Say(fmt.Sprintf("Recording %s beside %s...", disk, filepath.Join(c.ArtifactsDirectory, bake.ManifestFile)))
	d, paths, err := bake.RecordDisk(c.ArtifactsDirectory, disk, c.SigningKey, c.PassphraseEnv)
	if err != nil {
		return nil, false, false, fmt.Errorf("podvm-record: %w (artifacts_directory %s: the podvm-gpu provisioner's output_dir)", err, c.ArtifactsDirectory)
	}
	how := "unsigned (no local_repo_signing_key: the build's ephemeral key is gone)"
	if len(paths) > 1 {
		how = "signed with the repository's key"
	}
	msg := fmt.Sprintf("Recorded %s: %d bytes, SHA256 %s", d.File, d.Size, d.SHA256)
	if d.RootHash != "" {
		msg += ", root hash " + d.RootHash
	}
	ui.Say(fmt.Sprintf("%s; %s, %s (%s)", msg, paths[0], how, time.Since(start).Round(time.Millisecond)))
	// The artifact goes on as it was: keep it, and let the user's
	// keep_input_artifact have no say, as nothing replaced it.
	return a, true, true, nil
}
