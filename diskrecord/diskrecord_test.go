package diskrecord

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podvm-gpu/packer-plugin-podvm/chroot/chroottest"
)

// repart makes a disk with the host's systemd-repart from partition
// definitions, and returns the disk and the root hashes repart reports.
func repart(t *testing.T, defs map[string]string) (disk string, hashes []string) {
	t.Helper()
	chroottest.RequireRoot(t) // repart formats through a loop device
	if _, err := exec.LookPath("systemd-repart"); err != nil {
		t.Fatal("systemd-repart not found (Debian: systemd)")
	}
	dir := t.TempDir()
	src, d := filepath.Join(dir, "src"), filepath.Join(dir, "repart.d")
	for _, p := range []string{src, d} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(src, "hello"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, text := range defs {
		text = strings.ReplaceAll(text, "{src}", src)
		if err := os.WriteFile(filepath.Join(d, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	disk = filepath.Join(dir, "disk.raw")
	out, err := exec.Command("systemd-repart", "--empty=create", "--size=auto", "--dry-run=no",
		"--definitions="+d, "--json=short", "--seed=random", disk).Output()
	if err != nil {
		t.Fatalf("systemd-repart: %v\n%s", err, out)
	}
	var parts []struct {
		RootHash *string `json:"roothash"`
	}
	if err := json.Unmarshal(out, &parts); err != nil {
		t.Fatalf("systemd-repart --json: %v\n%s", err, out)
	}
	for _, p := range parts {
		if p.RootHash != nil {
			hashes = append(hashes, *p.RootHash)
		}
	}
	return disk, hashes
}

const (
	rootData = "[Partition]\nType=root\nFormat=ext4\nVerity=data\nVerityMatchKey=root\nCopyFiles={src}:/\nSizeMinBytes=16M\nSizeMaxBytes=16M\n"
	rootHash = "[Partition]\nType=root-verity\nVerity=hash\nVerityMatchKey=root\nSizeMinBytes=4M\nSizeMaxBytes=4M\n"
	usrData  = "[Partition]\nType=usr\nFormat=ext4\nVerity=data\nVerityMatchKey=usr\nCopyFiles={src}:/\nSizeMinBytes=16M\nSizeMaxBytes=16M\n"
	usrHash  = "[Partition]\nType=usr-verity\nVerity=hash\nVerityMatchKey=usr\nSizeMinBytes=4M\nSizeMaxBytes=4M\n"
	esp      = "[Partition]\nType=esp\nFormat=vfat\nSizeMinBytes=64M\nSizeMaxBytes=64M\n"
	plain    = "[Partition]\nType=root\nFormat=ext4\nCopyFiles={src}:/\nSizeMinBytes=16M\nSizeMaxBytes=16M\n"
)

// The root hashes Read finds are the ones systemd-repart made the disk
// with, and its digest is the file's.
func TestReadRepartDisks(t *testing.T) {
	for _, tt := range []struct {
		name      string
		defs      map[string]string
		root, usr bool
	}{
		{"verity root", map[string]string{"00-esp.conf": esp, "10-root.conf": rootData, "20-root-verity.conf": rootHash}, true, false},
		{"verity usr", map[string]string{"10-usr.conf": usrData, "20-usr-verity.conf": usrHash}, false, true},
		{"no verity", map[string]string{"00-esp.conf": esp, "10-root.conf": plain}, false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			disk, hashes := repart(t, tt.defs)
			d, err := Read(disk)
			if err != nil {
				t.Fatal(err)
			}
			want := ""
			if len(hashes) > 0 {
				want = hashes[0]
			}
			if got := d.RootHash + d.UsrHash; got != want || (d.RootHash != "") != tt.root || (d.UsrHash != "") != tt.usr {
				t.Errorf("root hash %q, usr hash %q; systemd-repart made %q", d.RootHash, d.UsrHash, want)
			}
			checkLayout(t, disk)
			b, err := os.ReadFile(disk)
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(b)
			if d.SHA256 != hex.EncodeToString(sum[:]) || d.Size != int64(len(b)) || d.File != "disk.raw" {
				t.Errorf("record %+v; the file has %d bytes, SHA256 %x", d, len(b), sum)
			}
		})
	}
}

// Two verity pairs of one kind: which is the root is not for a record to
// guess.
func TestReadAmbiguous(t *testing.T) {
	second := strings.ReplaceAll(rootData, "VerityMatchKey=root", "VerityMatchKey=other")
	disk, _ := repart(t, map[string]string{"10-root.conf": rootData, "20-root-verity.conf": rootHash,
		"30-root.conf": second, "40-root-verity.conf": strings.ReplaceAll(rootHash, "VerityMatchKey=root", "VerityMatchKey=other")})
	if _, err := Read(disk); err == nil || !strings.Contains(err.Error(), "ambiguous") {
		t.Fatalf("Read of a disk with two verity roots: %v, want an ambiguity error", err)
	}
}

func TestReadNotADisk(t *testing.T) {
	for _, tt := range []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"short", []byte("EFI PART")},
		{"zeros", make([]byte, 64<<10)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "image.raw.zst")
			if err := os.WriteFile(p, tt.data, 0o644); err != nil {
				t.Fatal(err)
			}
			d, err := Read(p)
			if err != nil || d.RootHash != "" || d.Size != int64(len(tt.data)) {
				t.Fatalf("Read: %+v, %v; want a digest only", d, err)
			}
		})
	}
	if _, err := Read(filepath.Join(t.TempDir(), "missing.raw")); err == nil {
		t.Fatal("Read of a missing file: no error")
	}
}

// A table that claims absurd entry sizes is refused, not read.
func TestReadGPTBounds(t *testing.T) {
	img := make([]byte, 8192)
	copy(img[512:], "EFI PART")
	img[512+84] = 0x10 // entry size 16
	img[512+80] = 1
	if _, err := ReadGPT(bytes.NewReader(img)); err == nil {
		t.Fatal("ReadGPT took 16-byte entries")
	}
}

// checkLayout holds ReadGPT's partitions to what sfdisk reads.
func checkLayout(t *testing.T, disk string) {
	t.Helper()
	out, err := exec.Command("sfdisk", "--json", disk).Output()
	if err != nil {
		t.Fatalf("sfdisk --json: %v", err)
	}
	var pt struct {
		PartitionTable struct {
			Partitions []struct {
				Start, Size int64
				Type, UUID  string
				Name        string
			}
		}
	}
	if err := json.Unmarshal(out, &pt); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(disk)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	parts, err := ReadGPT(f)
	if err != nil {
		t.Fatal(err)
	}
	want := pt.PartitionTable.Partitions
	if len(parts) != len(want) {
		t.Fatalf("ReadGPT: %d partitions, sfdisk %d", len(parts), len(want))
	}
	for i, p := range parts {
		w := want[i]
		uuid := func(s string) string { return strings.ToLower(strings.ReplaceAll(s, "-", "")) }
		if p.Offset != w.Start*512 || p.Size != w.Size*512 || p.Type != uuid(w.Type) || p.UUID != uuid(w.UUID) || p.Name != w.Name {
			t.Errorf("partition %d: ReadGPT %+v, sfdisk %+v", i, p, w)
		}
	}
}
