package bake

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestPoolName(t *testing.T) {
	for in, want := range map[string]string{
		"libattr1_1%3a2.5.2-3_amd64.deb": "libattr1_2.5.2-3_amd64.deb",
		"libbpf1_1%3a1.5.0-3_amd64.deb":  "libbpf1_1.5.0-3_amd64.deb",
		"gcc-14_14.2.0-19_amd64.deb":     "gcc-14_14.2.0-19_amd64.deb",
		"odd_x%3a1_amd64.deb":            "odd_x%3a1_amd64.deb",
		"noversion.deb":                  "noversion.deb",
	} {
		if got := PoolName(in); got != want {
			t.Errorf("PoolName(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestToPoolNames renames apt's file names in a directory, and only those.
func TestToPoolNames(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"libattr1_1%3a2.5.2-3_amd64.deb", "gcc-14_14.2.0-19_amd64.deb", "notes%3a1.txt"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := ToPoolNames(dir); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	want := []string{"gcc-14_14.2.0-19_amd64.deb", "libattr1_2.5.2-3_amd64.deb", "notes%3a1.txt"}
	if !slices.Equal(got, want) {
		t.Errorf("after ToPoolNames: %v, want %v", got, want)
	}
	if data, _ := os.ReadFile(filepath.Join(dir, "libattr1_2.5.2-3_amd64.deb")); string(data) != "libattr1_1%3a2.5.2-3_amd64.deb" {
		t.Errorf("renamed file holds %q", data)
	}
}
