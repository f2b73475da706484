package aptrepo

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runCLI(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := RunCommand(context.Background(), args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestRunCommandUsage(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		args []string
		want string
	}{
		{nil, "--debs is required"},
		{[]string{"--debs", dir}, "--out is required"},
		{[]string{"--debs", dir, "--out", dir, "extra"}, "unexpected argument"},
		{[]string{"--debs", dir, "--in-place", "--link"}, "--link makes no sense with --in-place"},
		{[]string{"--debs", dir, "--in-place", "--out", t.TempDir()}, "--out must be omitted"},
		{[]string{"--debs", dir, "--out", dir, "--passphrase-env", "X"}, "--passphrase-env needs --key"},
		{[]string{"--bogus"}, "unknown flag"},
	}
	for _, tt := range tests {
		code, _, stderr := runCLI(tt.args...)
		if code != 2 || !strings.Contains(stderr, tt.want) {
			t.Errorf("repo %q: exit %d, stderr %q; want 2 and %q", tt.args, code, stderr, tt.want)
		}
	}
	if code, _, stderr := runCLI("--help"); code != 0 || !strings.Contains(stderr, "Usage:") {
		t.Errorf("--help: exit %d, %q", code, stderr)
	}
}

func TestRunCommand(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "1714564800")
	debs := t.TempDir()
	smallRepoDebs(t, debs)
	out := filepath.Join(t.TempDir(), "repo")

	code, stdout, stderr := runCLI("--debs", debs, "--out", out, "--origin", "o", "--label", "l")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "repo: 4 packages,") || !strings.Contains(stdout, "pkg-a 1.0 amd64") || !strings.Contains(stdout, out) {
		t.Errorf("summary:\n%s", stdout)
	}
	release := string(readFile(t, filepath.Join(out, ReleaseFile)))
	if !strings.Contains(release, "Origin: o\nLabel: l\nDate: Wed, 01 May 2024 12:00:00 UTC\n") {
		t.Errorf("Release:\n%s", release)
	}
	if _, err := os.Stat(filepath.Join(out, "pkg-a_1.0_amd64.deb")); err != nil {
		t.Error(err)
	}

	// In place, then a bad .deb: exit 1, the file named, the index kept.
	code, _, stderr = runCLI("--debs", debs, "--in-place")
	if code != 0 {
		t.Fatalf("--in-place: exit %d: %s", code, stderr)
	}
	before := snapshot(t, debs)
	bad := filepath.Join(debs, "bad.deb")
	os.WriteFile(bad, []byte("nope"), 0o644)
	code, _, stderr = runCLI("--debs", debs, "--in-place")
	if code != 1 || !strings.Contains(stderr, bad) || !strings.Contains(stderr, "not a Debian binary package") {
		t.Errorf("bad .deb: exit %d, %q", code, stderr)
	}
	os.Remove(bad)
	if !equalSnapshots(before, snapshot(t, debs)) {
		t.Error("failed --in-place run changed the directory")
	}

	// A user key, with its passphrase from the environment, gives the
	// same bytes twice.
	keys := gpgFixtures(t)
	t.Setenv("REPO_PASS", "correct horse")
	t.Setenv("SOURCE_DATE_EPOCH", "")
	var snaps []map[string]string
	for range 2 {
		o := filepath.Join(t.TempDir(), "repo")
		code, stdout, stderr := runCLI("--debs", debs, "--out", o, "--link", "--key", keys["rsa3072-passphrase"], "--passphrase-env", "REPO_PASS")
		if code != 0 {
			t.Fatalf("--key: exit %d: %s", code, stderr)
		}
		snaps = append(snaps, snapshot(t, o))
		_ = stdout
	}
	// SOURCE_DATE_EPOCH is unset: Date is now, so two runs a second apart
	// may differ in Release alone. Compare what does not depend on it.
	for f, v := range snaps[0] {
		if !strings.HasPrefix(f, "Release") && f != InReleaseFile && snaps[1][f] != v {
			t.Errorf("%s differs between two runs", f)
		}
	}
	code, _, stderr = runCLI("--debs", debs, "--out", t.TempDir()+"/r", "--key", keys["rsa1024"])
	if code != 1 || !strings.Contains(stderr, "RSA key of 1024 bits") {
		t.Errorf("weak key: exit %d, %q", code, stderr)
	}
}

// A directory that merely holds a file named Release is not ours: --out
// refuses it and deletes nothing. One this tool wrote is replaced.
func TestRunCommandRefusesForeignOut(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "1714564800")
	debs := t.TempDir()
	smallRepoDebs(t, debs)
	out := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(out, "data.txt"), []byte("x\n"), 0o644))
	must(os.WriteFile(filepath.Join(out, ReleaseFile), nil, 0o644))
	code, _, stderr := runCLI("--debs", debs, "--out", out)
	if code == 0 || !strings.Contains(stderr, "did not write") || !strings.Contains(stderr, MarkerFile) {
		t.Errorf("foreign --out: exit %d, %q", code, stderr)
	}
	if b, err := os.ReadFile(filepath.Join(out, "data.txt")); err != nil || string(b) != "x\n" {
		t.Fatalf("data.txt lost: %v", err)
	}

	repo := filepath.Join(t.TempDir(), "repo")
	for i := 0; i < 2; i++ {
		if code, _, stderr := runCLI("--debs", debs, "--out", repo); code != 0 {
			t.Fatalf("build %d into its own output: exit %d, %s", i+1, code, stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(repo, MarkerFile)); err != nil {
		t.Errorf("no marker in the repository: %v", err)
	}
}

// Staging directories of a killed run are removed by the next; a live
// process's are left alone.
func TestStaleStagingRemoved(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "1714564800")
	debs := t.TempDir()
	smallRepoDebs(t, debs)
	parent := t.TempDir()
	out := filepath.Join(parent, "repo")
	dead := filepath.Join(parent, ".repo.tmp-999999999-123") // no such process
	legacy := filepath.Join(parent, ".repo.tmp-1234567")     // older naming
	live := filepath.Join(parent, fmt.Sprintf(".repo.tmp-%d-456", os.Getppid()))
	other := filepath.Join(parent, ".other.tmp-999999999-1") // another output's
	for _, d := range []string{dead, legacy, live, other} {
		if err := os.MkdirAll(filepath.Join(d, "pool"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if code, _, stderr := runCLI("--debs", debs, "--out", out); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for d, want := range map[string]bool{dead: false, legacy: false, live: true, other: true} {
		if _, err := os.Stat(d); (err == nil) != want {
			t.Errorf("%s exists=%v, want %v", filepath.Base(d), err == nil, want)
		}
	}
}
