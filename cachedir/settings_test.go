package cachedir

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseMode(t *testing.T) {
	for _, tt := range []struct{ in, want, err string }{
		{"", ModeAuto, ""},
		{"auto", ModeAuto, ""},
		{"yes", ModeYes, ""},
		{"no", ModeNo, ""},
		{"NO", ModeNo, ""},
		{" No ", ModeNo, ""},
		{"Yes", ModeYes, ""},
		{"off", "", `build_cache: "off" is not allowed; allowed: auto, yes, no`},
		{"true", "", `"true" is not allowed`},
		{"n", "", `"n" is not allowed`},
	} {
		got, err := ParseMode(tt.in)
		switch {
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("ParseMode(%q) = %q, %v; want error %q", tt.in, got, err, tt.err)
		case tt.err == "" && (err != nil || got != tt.want):
			t.Errorf("ParseMode(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestParseMaxSize(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int64
		err  string
	}{
		{"", 4 << 30, ""},
		{"0", 0, ""},
		{"512", 512, ""},
		{"4GiB", 4 << 30, ""},
		{"4G", 4 << 30, ""},
		{"500 MiB", 500 << 20, ""},
		{" 1T ", 1 << 40, ""},
		{"1KiB", 1024, ""},
		{"-1", 0, "build_cache_max_size: size \"-1\": not a whole number"},
		{"4gb", 0, `unknown unit "gb"`},
		{"GiB", 0, "not a whole number"},
		{"1.5G", 0, `unknown unit ".5G"`},
		{"99999999999T", 0, "too large"},
	} {
		got, err := ParseMaxSize(tt.in)
		switch {
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err) || !strings.Contains(err.Error(), "allowed: "+SizeHelp)):
			t.Errorf("ParseMaxSize(%q) = %d, %v; want error %q naming what is allowed", tt.in, got, err, tt.err)
		case tt.err == "" && (err != nil || got != tt.want):
			t.Errorf("ParseMaxSize(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
}

// Open resolves like Root and refuses a root that Trusted refuses.
func TestOpen(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	if err := os.Mkdir(good, 0o755); err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(dir, "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if got, err := Open(good); err != nil || got != good {
		t.Errorf("Open(%s) = %q, %v", good, got, err)
	}
	if got, err := Open(filepath.Join(dir, "missing")); err != nil || got != filepath.Join(dir, "missing") {
		t.Errorf("Open(missing) = %q, %v; a missing root is made by the build", got, err)
	}
	if _, err := Open(open); err == nil || !strings.Contains(err.Error(), "writable by group or others") {
		t.Errorf("Open(%s) = %v; want the mode refused", open, err)
	}
	t.Setenv("PODVM_CACHE", good)
	if got, err := Open(""); err != nil || got != good {
		t.Errorf("Open(\"\") with PODVM_CACHE = %q, %v; want %s", got, err, good)
	}
}
