package aptrepo

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestBuildRefusesOverlap: an input inside the output would be deleted
// with the previous repository when the output is replaced, and an output
// inside the input directory is a repository inside the tree indexed.
// Both are refused, through symbolic links too, before anything changes.
func TestBuildRefusesOverlap(t *testing.T) {
	type layout struct{ root, out, pool string }
	tests := []struct {
		name string
		// args returns the repo command's flags for the layout.
		args func(t *testing.T, l layout) []string
		want string
	}{
		{"input dir inside the output", func(t *testing.T, l layout) []string {
			return []string{"--debs", l.pool, "--out", l.out}
		}, "lies inside the output"},
		{"input dir is the output", func(t *testing.T, l layout) []string {
			return []string{"--debs", l.out, "--out", l.out}
		}, "lies inside the output"},
		{"input dir inside the output through a link", func(t *testing.T, l layout) []string {
			link := filepath.Join(l.root, "link")
			if err := os.Symlink(l.pool, link); err != nil {
				t.Fatal(err)
			}
			return []string{"--debs", link, "--out", l.out}
		}, "lies inside the output"},
		{"output through a link to it", func(t *testing.T, l layout) []string {
			link := filepath.Join(l.root, "outlink")
			if err := os.Symlink(l.out, link); err != nil {
				t.Fatal(err)
			}
			return []string{"--debs", l.pool, "--out", link, "--link"}
		}, "lies inside the output"},
		{"output inside the input dir", func(t *testing.T, l layout) []string {
			return []string{"--debs", l.pool, "--out", filepath.Join(l.pool, "repo")}
		}, "lies inside the .deb directory"},
		{"new output below the input dir", func(t *testing.T, l layout) []string {
			return []string{"--debs", l.pool, "--out", filepath.Join(l.pool, "a/b/repo")}
		}, "lies inside the .deb directory"},
	}
	t.Setenv("SOURCE_DATE_EPOCH", "1714564800")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			l := layout{root: root, out: filepath.Join(root, "out"), pool: filepath.Join(root, "out", "pool")}
			// An earlier repository in out, then the user's pool in it.
			first := t.TempDir()
			smallRepoDebs(t, first)
			if code, _, stderr := runCLI("--debs", first, "--out", l.out); code != 0 {
				t.Fatalf("first build: %s", stderr)
			}
			if err := os.Mkdir(l.pool, 0o755); err != nil {
				t.Fatal(err)
			}
			smallRepoDebs(t, l.pool)
			user := filepath.Join(l.pool, "notes.txt")
			if err := os.WriteFile(user, []byte("mine\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			before := snapshot(t, l.out)
			args := tt.args(t, l)
			code, _, stderr := runCLI(args...)
			if code != 1 || !strings.Contains(stderr, tt.want) {
				t.Errorf("repo %q: exit %d, stderr %q; want 1 and %q", args, code, stderr, tt.want)
			}
			if after := snapshot(t, l.out); !equalSnapshots(before, after) {
				t.Errorf("a refused build changed %s", l.out)
			}
			if _, err := os.Stat(user); err != nil {
				t.Errorf("the user's file in the input: %v", err)
			}
		})
	}
	// A single .deb named inside the output is refused just the same.
	t.Run("deb file inside the output", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "repo")
		in := t.TempDir()
		smallRepoDebs(t, in)
		if code, _, stderr := runCLI("--debs", in, "--out", out); code != 0 {
			t.Fatal(stderr)
		}
		_, err := Build(context.Background(), Options{Debs: []string{filepath.Join(out, "pkg-a_1.0_amd64.deb")}, Out: out, Date: testDate, Signer: testSigner(t, testDate)})
		if err == nil || !strings.Contains(err.Error(), "lies inside the output") {
			t.Errorf("got %v, want the .deb inside the output refused", err)
		}
		if _, err := os.Stat(filepath.Join(out, "pkg-a_1.0_amd64.deb")); err != nil {
			t.Error(err)
		}
	})
}

// TestConcurrentInPlace runs pairs of in-place builds of one directory at
// once, each with its own key, many times: afterwards InRelease and
// Release.gpg must verify against keyring.gpg with real gpgv, every time.
func TestConcurrentInPlace(t *testing.T) {
	need(t, "gpgv")
	dir := t.TempDir()
	smallRepoDebs(t, dir)
	const pairs = 30
	for i := range pairs {
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for j := range 2 {
			signer := testSigner(t, testDate)
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[j] = Build(context.Background(), Options{DebDir: dir, Out: dir, Placement: IndexOnly, Date: testDate, Signer: signer, Label: fmt.Sprintf("writer %d", j)})
			}()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatalf("pair %d: %v", i, err)
			}
		}
		keyring := filepath.Join(dir, KeyringFile)
		for _, args := range [][]string{
			{filepath.Join(dir, InReleaseFile)},
			{filepath.Join(dir, ReleaseGPGFile), filepath.Join(dir, ReleaseFile)},
		} {
			out, err := exec.Command("gpgv", append([]string{"--keyring", keyring}, args...)...).CombinedOutput()
			if err != nil {
				t.Fatalf("pair %d: gpgv %s: %v\n%s", i, filepath.Base(args[0]), err, out)
			}
		}
		if left := leftovers(t, dir); len(left) > 0 {
			t.Fatalf("pair %d left %v", i, left)
		}
	}
}

// TestBuildRefusesWhatAptCannotRead: a control paragraph or a Release
// line beyond what apt and gpgv read is refused, naming the .deb or the
// flag and the limit; at the limits, real apt reads the repository.
func TestBuildRefusesWhatAptCannotRead(t *testing.T) {
	need(t, "apt-get", "gpgv")
	// bigControl is a control paragraph whose Packages stanza is n bytes.
	bigControl := func(n int) string {
		head := "Package: big\nVersion: 1\nArchitecture: all\nMaintainer: T <t@e.org>\nDescription: big\n"
		// Filename, Size and SHA256 as the index adds them.
		extra := len("Filename: big_1_all.deb\nSize: 0000\nSHA256: \n") + 64
		body := n - len(head) - extra
		var b strings.Builder
		b.WriteString(head)
		line := " " + strings.Repeat("x", 99) + "\n"
		for b.Len()+len(line) <= len(head)+body {
			b.WriteString(line)
		}
		return b.String()
	}
	tests := []struct {
		name    string
		control string
		label   string
		want    string // "" for accepted, then read by apt
	}{
		{name: "1.5 MB paragraph", control: bigControl(1500 << 10), want: "big_1_all.deb: its Packages stanza would be"},
		{name: "paragraph past the cap", control: bigControl(MaxStanza + 200), want: fmt.Sprintf("more than the %d allowed", MaxStanza)},
		{name: "paragraph at the cap", control: bigControl(MaxStanza - 200)},
		{name: "20,000 character label", label: strings.Repeat("l", 20000), want: fmt.Sprintf("Label of 20000 bytes: at most %d", MaxReleaseField)},
		{name: "label past the cap", label: strings.Repeat("l", MaxReleaseField+1), want: "Label of"},
		{name: "label at the cap", label: strings.Repeat("l", MaxReleaseField)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := t.TempDir()
			if tt.control != "" {
				writeDeb(t, in, "big_1_all.deb", debSpec{control: tt.control, comp: "xz"})
			} else {
				smallRepoDebs(t, in)
			}
			out := filepath.Join(worldReadableTempDir(t), "repo")
			_, err := Build(context.Background(), Options{DebDir: in, Out: out, Date: testDate, Signer: testSigner(t, testDate), Label: tt.label})
			if tt.want != "" {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("got %v, want an error saying %q", err, tt.want)
				}
				if _, err := os.Stat(out); err == nil {
					t.Error("a refused build wrote its output")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			out2, err := exec.Command("gpgv", "--keyring", filepath.Join(out, KeyringFile), filepath.Join(out, InReleaseFile)).CombinedOutput()
			if err != nil {
				t.Fatalf("gpgv InRelease: %v\n%s", err, out2)
			}
			a := newAptRoot(t, sourceFor(out, keyringPath, nil), "")
			a.mustUpdate()
			if tt.control != "" {
				if o, ok := a.run("apt-cache", "show", "big"); !ok {
					t.Errorf("apt-cache show big:\n%s", o)
				}
			}
		})
	}
	// The CLI names the flag.
	t.Setenv("SOURCE_DATE_EPOCH", "1714564800")
	in := t.TempDir()
	smallRepoDebs(t, in)
	code, _, stderr := runCLI("--debs", in, "--out", filepath.Join(t.TempDir(), "r"), "--label", strings.Repeat("l", 20000))
	if code != 2 || !strings.Contains(stderr, fmt.Sprintf("--label of 20000 bytes: at most %d", MaxReleaseField)) {
		t.Errorf("repo --label of 20000: exit %d, %q", code, stderr)
	}
}
