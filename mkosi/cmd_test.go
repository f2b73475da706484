package mkosi

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/ProtonMail/go-crypto/openpgp"

	"github.com/podvm-gpu/packer-plugin-podvm/agenttree/agenttreetest"
	"github.com/podvm-gpu/packer-plugin-podvm/aptsource"
	"github.com/podvm-gpu/packer-plugin-podvm/gpustack"
)

// TestMkosiMirrors reads made-up apt configurations from aptsource's test
// data, never the host's /etc/apt.
func TestMkosiMirrors(t *testing.T) {
	const apt = "../aptsource/testdata/apt/"
	target := func(distro, rel, arch string) gpustack.Target {
		tg, err := gpustack.LookupRelease(distro, rel, arch)
		if err != nil {
			t.Fatal(err)
		}
		return tg
	}
	debian := target("debian", "13", runtime.GOARCH)
	other := "arm64"
	if runtime.GOARCH == "arm64" {
		other = "amd64"
	}
	none := aptsource.Setting{}
	tests := []struct {
		name, aptDir     string
		t                gpustack.Target
		mirror, security aptsource.Setting
		archive, sec     string
		err              []string // substrings of the error, nil for none
		stderr           []string // substrings of stderr; empty means none
	}{
		{name: "host archives", aptDir: apt + "deb822", t: debian, mirror: none, security: none,
			archive: "http://deb822.example/debian", sec: "http://deb822.example/debian-security"},
		{name: "flags win", aptDir: apt + "deb822", t: debian,
			mirror: aptsource.Setting{Value: "http://mirror.example/debian/", Set: true}, security: aptsource.Setting{Value: "http://mirror.example/debian-security", Set: true},
			archive: "http://mirror.example/debian", sec: "http://mirror.example/debian-security"},
		{name: "no host security archive", aptDir: apt + "twosuites", t: debian, mirror: none, security: none,
			archive: "http://trixie.example/debian", stderr: []string{"no Debian security archive", "no trixie-security suite", "--security-mirror"}},
		{name: "security turned off", aptDir: apt + "deb822", t: debian, mirror: none, security: aptsource.Setting{Value: "", Set: true},
			archive: "http://deb822.example/debian", stderr: []string{"--security-mirror is empty", "no trixie-security suite"}},
		{name: "no host archive for the distro", aptDir: apt + "deb822", t: target("ubuntu", "24.04", runtime.GOARCH), mirror: none, security: none,
			err: []string{"--mirror", "no Ubuntu archive", "ubuntu 24.04 (noble", "pass --mirror URL", "dists/noble", "--security-mirror"}},
		{name: "no apt configuration", aptDir: apt + "missing-directory", t: debian, mirror: none, security: none,
			err: []string{"--mirror", "no Debian archive", "missing-directory"}},
		{name: "empty mirror", aptDir: apt + "deb822", t: debian, mirror: aptsource.Setting{Value: "", Set: true}, security: none,
			err: []string{"--mirror: empty", "Debian mirror"}},
		{name: "not a mirror URL", aptDir: apt + "deb822", t: debian, mirror: aptsource.Setting{Value: "cdrom:/x", Set: true}, security: none,
			err: []string{`--mirror: "cdrom:/x" is not a URL`}},
		{name: "other architecture", aptDir: apt + "deb822", t: target("debian", "13", other), mirror: none, security: none,
			archive: "http://deb822.example/debian", sec: "http://deb822.example/debian-security"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, stderr bytes.Buffer
			archive, sec, err := mkosiMirrors(tt.aptDir, tt.t, tt.mirror, tt.security, &out, &stderr)
			if tt.err != nil {
				if err == nil {
					t.Fatalf("want an error, got archive %q security %q", archive, sec)
				}
				for _, w := range tt.err {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q lacks %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if archive != tt.archive || sec != tt.sec {
				t.Errorf("archive %q security %q, want %q %q", archive, sec, tt.archive, tt.sec)
			}
			if !strings.Contains(out.String(), "mkosi: archive "+tt.archive+" (from ") {
				t.Errorf("stdout does not say where the archive came from:\n%s", out.String())
			}
			for _, w := range tt.stderr {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr.String())
				}
			}
			if len(tt.stderr) == 0 && tt.t.Arch == runtime.GOARCH && stderr.Len() > 0 {
				t.Errorf("unexpected stderr:\n%s", stderr.String())
			}
			if tt.t.Arch != runtime.GOARCH && !strings.Contains(stderr.String(), "if it does not carry "+tt.t.Arch) {
				t.Errorf("other architecture: no note on stderr:\n%s", stderr.String())
			}
		})
	}
}

// TestCheckKeysCommand runs the finalize script's secret-key check: a
// binary secret key in the repository fails it, public keyrings pass.
func TestCheckKeysCommand(t *testing.T) {
	e, err := openpgp.NewEntity("leak", "", "leak@podvm.invalid", nil)
	if err != nil {
		t.Fatal(err)
	}
	var pub, sec bytes.Buffer
	if err := e.Serialize(&pub); err != nil {
		t.Fatal(err)
	}
	if err := e.SerializePrivate(&sec, nil); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	write := func(p string, data []byte) {
		t.Helper()
		f := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("usr/share/keyrings/podvm-local-packages.gpg", pub.Bytes())
	args := []string{"check-keys", "--root", root, "/opt/local-packages", "/usr/share/keyrings", "/etc/apt"}
	if rc := runCommand(args); rc != 0 {
		t.Errorf("public keyring only: rc %d, want 0", rc)
	}
	write("opt/local-packages/signing.key", sec.Bytes())
	if rc := runCommand(args); rc != 1 {
		t.Errorf("secret key in the repository: rc %d, want 1", rc)
	}
	if rc := runCommand([]string{"check-keys", "--root", root}); rc != 2 {
		t.Errorf("no directory: rc %d, want 2", rc)
	}
}

func runCommand(args []string) int {
	return RunCommand(context.Background(), args, io.Discard, io.Discard)
}

// TestGenerateNamesLinksOutsideTheTree: a binaries tree with CAA's kinds
// of links is taken, and the generator names each link whose target the
// tree lacks: below /run, made at boot; elsewhere, for the image or its
// skeleton to provide.
func TestGenerateNamesLinksOutsideTheTree(t *testing.T) {
	tree := agenttreetest.StandIn(t)
	out := filepath.Join(t.TempDir(), "out")
	key, err := filepath.Abs(filepath.Join("testdata", "toolkit-key.asc"))
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	rc, said := runInto(t, []string{"--output", out, "--mirror", "http://deb.example/debian", "--security-mirror=",
		"--nvidia-container-toolkit-repo-keyring", key, "--podvm-bin", exe, "--build-cache", "no", "--podvm-binaries", tree})
	if rc != 0 {
		t.Fatalf("rc %d\n%s", rc, said)
	}
	for _, want := range []string{
		"the link /etc/kata-opa/default-policy.rego -> /run/peerpod/policy.rego points outside the tree (made at boot)",
		"the link /etc/systemd/system/multi-user.target.wants/" + agenttreetest.SkeletonUnit + " -> ../" + agenttreetest.SkeletonUnit + " points outside the tree (the image or its skeleton must provide it)",
	} {
		if !strings.Contains(said, want) {
			t.Errorf("the generator does not say %q:\n%s", want, said)
		}
	}
}
