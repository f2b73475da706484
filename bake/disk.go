package bake

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/podvm-gpu/packer-plugin-podvm/diskrecord"
	"github.com/podvm-gpu/packer-plugin-podvm/sbom"
)

// DiskFile binds the build's record to its disk. The manifest cannot hold
// the disk's digest, since the manifest is inside the disk: this record,
// written once the disk exists, holds the disk's digest and root hash
// and the digests of the manifest and the SBOM beside it.
const DiskFile = "disk.json"

// DiskRecord is DiskFile's content.
type DiskRecord struct {
	Disk     diskrecord.Disk `json:"disk"`
	Manifest string          `json:"manifest_sha256"`
	SBOM     string          `json:"sbom_sha256,omitempty"`
}

// WriteDiskRecord records disk in dir, the artefacts directory that holds
// the build's manifest, and signs the record with sign (DiskFile +
// SignatureSuffix); a nil sign writes it unsigned and removes a stale
// signature. It returns the paths written.
func WriteDiskRecord(dir string, disk diskrecord.Disk, sign func([]byte) ([]byte, error)) ([]string, error) {
	rec := DiskRecord{Disk: disk}
	for _, f := range []struct {
		name     string
		sum      *string
		optional bool
	}{{ManifestFile, &rec.Manifest, false}, {sbom.File, &rec.SBOM, true}} {
		b, err := os.ReadFile(filepath.Join(dir, f.name))
		if f.optional && errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("record the disk: %w", err)
		}
		s := sha256.Sum256(b)
		*f.sum = hex.EncodeToString(s[:])
	}
	data, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("record the disk: %w", err)
	}
	data = append(data, '\n')
	p, sigPath := filepath.Join(dir, DiskFile), filepath.Join(dir, DiskFile+SignatureSuffix)
	if err := WriteFile(p, data); err != nil {
		return nil, fmt.Errorf("record the disk: %w", err)
	}
	if sign == nil {
		if err := os.Remove(sigPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("record the disk: %w", err)
		}
		return []string{p}, nil
	}
	sig, err := sign(data)
	if err != nil {
		return nil, fmt.Errorf("record the disk: signing %s: %w", DiskFile, err)
	}
	if err := WriteFile(sigPath, sig); err != nil {
		return nil, fmt.Errorf("record the disk: %w", err)
	}
	return []string{p, sigPath}, nil
}
