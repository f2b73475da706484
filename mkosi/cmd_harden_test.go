package mkosi

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHiddenSubcommandsReportBadFlags: a flag a hidden subcommand does not
// know is reported on stderr with its flags, never a silent exit 2.
func TestHiddenSubcommandsReportBadFlags(t *testing.T) {
	for _, c := range []struct{ sub, flag string }{
		{"run-steps", "--plan"},
		{"record-disk", "--spec"},
		{"check-keys", "--root"},
	} {
		var stderr bytes.Buffer
		rc := RunCommand(context.Background(), []string{c.sub, "--bogus"}, io.Discard, &stderr)
		out := stderr.String()
		if rc != 2 || !strings.Contains(out, "unknown flag: --bogus") || !strings.Contains(out, c.flag) {
			t.Errorf("mkosi %s --bogus: exit %d, stderr:\n%s\nwant exit 2, the flag error and the usage (%s)", c.sub, rc, out, c.flag)
		}
	}
}

// TestGeneratorRefusesBadHostPaths: a --podvm-bin that mkosi could not
// run, and a host path that mkosi would misread in BuildSources= or
// ExtraSearchPaths=, are refused before anything is written or fetched,
// naming the flag or setting.
func TestGeneratorRefusesBadHostPaths(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "podvm")
	plain := filepath.Join(dir, "plain")
	for name, mode := range map[string]os.FileMode{exe: 0o755, plain: 0o644} {
		if err := os.WriteFile(name, []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	odd := filepath.Join(dir, "a:b")
	if err := os.Mkdir(odd, 0o755); err != nil {
		t.Fatal(err)
	}
	oddExe := filepath.Join(odd, "podvm")
	if err := os.WriteFile(oddExe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want []string
	}{
		{"missing bin", nil, []string{"--podvm-bin", filepath.Join(dir, "nope")}, []string{"--podvm-bin", "nope", "no such file"}},
		{"bin is a directory", nil, []string{"--podvm-bin", dir}, []string{"--podvm-bin", "not a regular file"}},
		{"bin not executable", nil, []string{"--podvm-bin", plain}, []string{"--podvm-bin", "not executable"}},
		{"PODVM_BIN missing", map[string]string{"PODVM_BIN": filepath.Join(dir, "gone")}, nil, []string{"PODVM_BIN", "gone"}},
		{"bin below a colon", nil, []string{"--podvm-bin", oddExe}, []string{"--podvm-bin", "holds ':'"}},
		{"cache dir with a colon", nil, []string{"--podvm-bin", exe, "--build-cache-dir", filepath.Join(dir, "c:d")}, []string{"build_cache_dir", "holds ':'"}},
		{"cache dir with a dollar", nil, []string{"--podvm-bin", exe, "--build-cache-dir", filepath.Join(dir, "$HOME")}, []string{"build_cache_dir", "holds '$'"}},
		{"signing key below a dollar", map[string]string{"LOCAL_REPO_SIGNING_KEY": filepath.Join(dir, "${X}", "key.asc")}, []string{"--podvm-bin", exe}, []string{"local_repo_signing_key", "holds '$'"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			// A toolkit key URL that cannot be fetched: reaching it would show.
			t.Setenv("NVIDIA_CONTAINER_TOOLKIT_REPO_URL", "https://unreachable.invalid/deb")
			out := filepath.Join(t.TempDir(), "tree")
			var stderr bytes.Buffer
			rc := RunCommand(context.Background(), append([]string{"--output", out}, tt.args...), io.Discard, &stderr)
			msg := stderr.String()
			if rc != 2 {
				t.Errorf("exit %d, want 2; stderr:\n%s", rc, msg)
			}
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("stderr lacks %q:\n%s", w, msg)
				}
			}
			if strings.Contains(msg, "unreachable.invalid") || strings.Contains(msg, "fetching key") {
				t.Errorf("the key fetch was reached:\n%s", msg)
			}
			if _, err := os.Stat(out); err == nil {
				t.Error("a refused run wrote its output directory")
			}
		})
	}
}

// TestGeneratorWarnsAndChecksCacheLevels: explicit settings that others
// make useless are named on stderr, as plan and the provisioner name them;
// and a module cache whose modules/ level anyone may write is not mounted
// into the build (inside mkosi's sandbox only that level is seen, so the
// host checks every level).
func TestGeneratorWarnsAndChecksCacheLevels(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "podvm")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(dir, "cache")
	open := filepath.Join(cache, "modules")
	if err := os.MkdirAll(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		args    []string
		want    []string
		notWant []string
	}{
		{"ignored hook mode", []string{"--enable-nvidia-gpu=no", "--nvidia-hook-mode=cdi"},
			[]string{"mkosi: warning:", "--nvidia-hook-mode"}, nil},
		{"a Debian node image", []string{"--enable-nvidia-gpu=no", "--local-repo=yes"},
			[]string{"mkosi: warning:", "no GPU Operator driver container for debian"}, nil},
		// With the GPU stack off nothing is mounted: only the root counts.
		{"modules/ writable by all, GPU off", []string{"--enable-nvidia-gpu=no", "--build-cache-dir", cache}, nil, []string{"module cache off"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "tree")
			var stderr bytes.Buffer
			rc := RunCommand(context.Background(), append([]string{"--output", out, "--podvm-bin", exe, "--distribution", "debian", "--release", "13"}, tt.args...), io.Discard, &stderr)
			if rc != 0 {
				t.Fatalf("exit %d; stderr:\n%s", rc, stderr.String())
			}
			for _, w := range tt.want {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr.String())
				}
			}
			for _, w := range tt.notWant {
				if strings.Contains(stderr.String(), w) {
					t.Errorf("stderr has %q:\n%s", w, stderr.String())
				}
			}
		})
	}
	if got := trustModuleCache(cache, true); got == nil {
		t.Error("trustModuleCache accepted a modules/ level anyone may write")
	}
	fine := filepath.Join(dir, "fine")
	if err := trustModuleCache(fine, true); err != nil {
		t.Errorf("trustModuleCache on a fresh root: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(fine, "modules")); err != nil || !fi.IsDir() {
		t.Errorf("trustModuleCache did not create the mounted level: %v", err)
	}
}
