package staging

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRemoveStale(t *testing.T) {
	dir := t.TempDir()
	live, err := os.MkdirTemp(dir, Pattern(".out.tmp-"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(filepath.Base(live), fmt.Sprintf("-%d-", os.Getpid())) {
		t.Fatalf("%s does not name this process", live)
	}
	dead := filepath.Join(dir, ".out.tmp-999999999-1")
	legacy := filepath.Join(dir, ".out.tmp-12345")
	other := filepath.Join(dir, ".other.tmp-999999999-1")
	file := filepath.Join(dir, ".out.tmp-999999999-file")
	for _, d := range []string{dead, legacy, other} {
		if err := os.MkdirAll(filepath.Join(d, "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(file, nil, 0o644)
	RemoveStale(dir, ".out.tmp-")
	for p, want := range map[string]bool{live: true, dead: false, legacy: false, other: true, file: true} {
		if _, err := os.Stat(p); (err == nil) != want {
			t.Errorf("%s: exists=%v, want %v", filepath.Base(p), err == nil, want)
		}
	}
}
