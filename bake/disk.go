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

	"github.com/podvm-gpu/packer-plugin-podvm/aptrepo"
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

// RecordDisk reads the disk at path and records it in dir, the artefacts
// directory that holds the build's manifest: both back ends' last step.
// keyFile is the user's repository key ("": unsigned, as the build's
// ephemeral key is gone by the time the disk exists); passphraseEnv names
// the variable that holds its passphrase. It returns the record and the
// paths written (the record, then its signature if any).
func RecordDisk(dir, path, keyFile, passphraseEnv string) (diskrecord.Disk, []string, error) {
	if _, err := os.Stat(filepath.Join(dir, ManifestFile)); err != nil {
		return diskrecord.Disk{}, nil, fmt.Errorf("record the disk: no %s beside it: %w", ManifestFile, err)
	}
	d, err := diskrecord.Read(path)
	if err != nil {
		return diskrecord.Disk{}, nil, err
	}
	var sign func([]byte) ([]byte, error)
	if keyFile != "" {
		date, err := aptrepo.DateFromEnvironment()
		if err != nil {
			return diskrecord.Disk{}, nil, fmt.Errorf("record the disk: %w", err)
		}
		signer, err := aptrepo.LoadSigner(keyFile, passphraseEnv, date)
		if err != nil {
			return diskrecord.Disk{}, nil, fmt.Errorf("record the disk: local_repo_signing_key: %w", err)
		}
		defer signer.Discard()
		sign = func(msg []byte) ([]byte, error) { return signer.DetachSign(msg, date) }
	}
	paths, err := WriteDiskRecord(dir, d, sign)
	return d, paths, err
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
	sig, err := detachedSignature(dir, DiskFile, data, sign)
	if err != nil {
		return nil, fmt.Errorf("record the disk: %w", err)
	}
	paths := []string{filepath.Join(dir, DiskFile)}
	if err := WriteFile(paths[0], data); err != nil {
		return nil, fmt.Errorf("record the disk: %w", err)
	}
	if sig != nil {
		paths = append(paths, filepath.Join(dir, DiskFile+SignatureSuffix))
		if err := WriteFile(paths[1], sig); err != nil {
			return nil, fmt.Errorf("record the disk: %w", err)
		}
	}
	return paths, nil
}
