package mkosi

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/podvm-gpu/packer-plugin-podvm/bake"
)

// RecordDisk is the post-output step: once mkosi has written the disk, it
// records the disk's digest and root hash beside the manifest
// (bake.DiskFile), signed with the repository's key when the user gave
// one. An ephemeral key is gone by then, by design: the record is then
// unsigned, and says so.
type RecordDisk struct {
	Config    string // $MKOSI_CONFIG: mkosi's configuration as JSON
	OutputDir string // $OUTPUTDIR
	Artifacts string // the artefacts directory below it
	Spec      string // the tree's podvm-bake.json
	SrcDir    string // $SRCDIR, against which the spec's key path resolves
}

// Run records the disk; disk "" and no error when the output is no disk.
func (r RecordDisk) Run() (disk string, paths []string, err error) {
	b, err := os.ReadFile(r.Config)
	if err != nil {
		return "", nil, fmt.Errorf("record-disk: %w", err)
	}
	var c struct{ Output, Format string }
	if err := json.Unmarshal(b, &c); err != nil {
		return "", nil, fmt.Errorf("record-disk: %s: %w", r.Config, err)
	}
	if c.Format != "disk" || c.Output == "" {
		return "", nil, nil
	}
	// mkosi names a disk Output.raw, with its compression's suffix when
	// compressed.
	matches, err := filepath.Glob(filepath.Join(r.OutputDir, c.Output+".raw*"))
	if err != nil || len(matches) != 1 {
		return "", nil, fmt.Errorf("record-disk: want one disk %s.raw[.*] in %s, found %q", c.Output, r.OutputDir, matches)
	}
	disk = matches[0]
	data, err := os.ReadFile(r.Spec)
	if err != nil {
		return "", nil, fmt.Errorf("record-disk: %w", err)
	}
	var spec bake.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		return "", nil, fmt.Errorf("record-disk: %s: %w", r.Spec, err)
	}
	var key string
	if k := spec.Repo.SigningKey; k != "" {
		key = filepath.Join(r.SrcDir, filepath.FromSlash(k))
	}
	if _, paths, err = bake.RecordDisk(r.Artifacts, disk, key, spec.Repo.Passphrase); err != nil {
		return "", nil, fmt.Errorf("record-disk: %w", err)
	}
	return disk, paths, nil
}
