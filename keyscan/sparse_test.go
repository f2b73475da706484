package keyscan

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestTreeSparseFile: a sparse file of many GiB with a key in a small data
// extent far into it is scanned in seconds, not by reading its holes (43 s
// for 20 GiB did), and the key is found wherever it lies in an extent.
func TestTreeSparseFile(t *testing.T) {
	const size = 16 << 30
	pem := []byte("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEA\n")
	tests := []struct {
		name string
		at   int64  // where the data extent starts
		data []byte // what it holds
		want string // "": nothing found
	}{
		{"key far in", size - 3<<30 + 12345, pem, "PEM BEGIN OPENSSH PRIVATE KEY"},
		// Reads start at the extent (block aligned), so the marker starts
		// 10 bytes before the end of the first 1 MiB read.
		{"key across a read chunk inside an extent", size / 2, append(bytes.Repeat([]byte("x"), 1<<20+256-10), pem...), "PEM BEGIN OPENSSH PRIVATE KEY"},
		{"key after megabytes of data", 5 << 30, append(bytes.Repeat([]byte("x"), 3<<20), pem...), "PEM BEGIN OPENSSH PRIVATE KEY"},
		{"binary OpenSSH key at the start", 0, append([]byte(nil), opensshMagic...), "OpenSSH private key (binary)"},
		{"no key", 7 << 30, bytes.Repeat([]byte("log line\n"), 1000), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			f, err := os.Create(filepath.Join(root, "sparse.img"))
			must(t, err)
			must(t, f.Truncate(size))
			_, err = f.WriteAt(tt.data, tt.at)
			must(t, err)
			must(t, f.Close())
			start := time.Now()
			found, files, err := Tree(root, nil, nil)
			took := time.Since(start)
			must(t, err)
			// Generous for a loaded two-core machine: reading the holes
			// takes tens of seconds.
			if took > 5*time.Second {
				t.Errorf("scanning a %d GiB sparse file took %v", size>>30, took)
			}
			if files != 1 {
				t.Errorf("read %d files, want 1", files)
			}
			switch {
			case tt.want == "" && len(found) != 0:
				t.Errorf("found %v in a file with no key", found)
			case tt.want != "" && (len(found) != 1 || found[0].Kind != tt.want):
				t.Errorf("found %v, want one %q", found, tt.want)
			}
		})
	}
}
