package bake

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podvm-gpu/packer-plugin-podvm/aptrepo"
	"github.com/podvm-gpu/packer-plugin-podvm/diskrecord"
	"github.com/podvm-gpu/packer-plugin-podvm/sbom"
)

// The disk record names the digests of the manifest and the SBOM beside
// it, verifies with sqv against the keyring when signed, and a rerun
// without a key leaves no stale signature.
func TestWriteDiskRecord(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{ManifestFile: "{\"schema_version\":1}\n", sbom.File: "{\"bomFormat\":\"CycloneDX\"}\n"}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	date := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	signer, err := aptrepo.NewEphemeralSigner("test", date)
	if err != nil {
		t.Fatal(err)
	}
	defer signer.Discard()
	keyring := filepath.Join(dir, KeyFile)
	if err := os.WriteFile(keyring, signer.ArmoredPublicKey(), 0o644); err != nil {
		t.Fatal(err)
	}
	disk := diskrecord.Disk{File: "image.raw", Size: 3, SHA256: strings.Repeat("ab", 32), RootHash: strings.Repeat("cd", 32)}
	paths, err := WriteDiskRecord(dir, disk, func(b []byte) ([]byte, error) { return signer.DetachSign(b, date) })
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 2 {
		t.Fatalf("wrote %v, want the record and its signature", paths)
	}
	b, err := os.ReadFile(filepath.Join(dir, DiskFile))
	if err != nil {
		t.Fatal(err)
	}
	var rec DiskRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	digest := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	if rec.Disk != disk || rec.Manifest != digest(files[ManifestFile]) || rec.SBOM != digest(files[sbom.File]) {
		t.Errorf("record %+v", rec)
	}
	sig := filepath.Join(dir, DiskFile+SignatureSuffix)
	if out, err := exec.Command("sqv", "--keyring", keyring, sig, filepath.Join(dir, DiskFile)).CombinedOutput(); err != nil {
		t.Errorf("sqv %s: %v\n%s", DiskFile+SignatureSuffix, err, out)
	}
	if paths, err := WriteDiskRecord(dir, disk, nil); err != nil || len(paths) != 1 {
		t.Fatalf("unsigned rerun: %v, %v", paths, err)
	}
	if _, err := os.Stat(sig); !os.IsNotExist(err) {
		t.Errorf("a stale signature survived an unsigned record: %v", err)
	}
	// No manifest, no record: the record binds the disk to it.
	if err := os.Remove(filepath.Join(dir, ManifestFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteDiskRecord(dir, disk, nil); err == nil || !strings.Contains(err.Error(), ManifestFile) {
		t.Errorf("without a manifest: %v, want an error naming it", err)
	}
}
