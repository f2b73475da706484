package record

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"

	"github.com/podvm-gpu/packer-plugin-podvm/bake"
)

// gpgKey makes an OpenPGP key with GnuPG, as a user makes one, and
// returns the armored secret key's path and the armored public key's.
func gpgKey(t *testing.T) (secret, public string) {
	t.Helper()
	dir := t.TempDir()
	home := filepath.Join(dir, "gnupg")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	gpg := func(args ...string) []byte {
		cmd := exec.Command("gpg", append([]string{"--batch", "--homedir", home, "--pinentry-mode", "loopback", "--passphrase", ""}, args...)...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("gpg %v: %v", args, err)
		}
		return out
	}
	gpg("--quick-gen-key", "podvm record test", "ed25519", "sign", "never")
	secret, public = filepath.Join(dir, "key.asc"), filepath.Join(dir, "keyring.asc")
	if err := os.WriteFile(secret, gpg("--armor", "--export-secret-keys"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(public, gpg("--armor", "--export"), 0o644); err != nil {
		t.Fatal(err)
	}
	return secret, public
}

func TestConfigure(t *testing.T) {
	key, public := gpgKey(t)
	for _, tt := range []struct {
		name string
		raw  map[string]interface{}
		want string // "" for no error
	}{
		{"minimal", map[string]interface{}{"artifacts_directory": "out"}, ""},
		{"with key", map[string]interface{}{"artifacts_directory": "out", "local_repo_signing_key": key}, ""},
		{"no directory", map[string]interface{}{}, "artifacts_directory: required"},
		{"control character", map[string]interface{}{"artifacts_directory": "out\x1b[2J"}, "artifacts_directory:"},
		{"missing key", map[string]interface{}{"artifacts_directory": "out", "local_repo_signing_key": "/nonexistent/key.asc"}, "local_repo_signing_key: /nonexistent/key.asc"},
		{"public key only", map[string]interface{}{"artifacts_directory": "out", "local_repo_signing_key": public}, "local_repo_signing_key: " + public},
		{"passphrase without key", map[string]interface{}{"artifacts_directory": "out", "local_repo_passphrase_env": "PASS"}, `local_repo_passphrase_env: "PASS" goes with local_repo_signing_key`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var p PostProcessor
			err := p.Configure(tt.raw)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Configure: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Configure: %v; want an error with %q", err, tt.want)
			}
		})
	}
}

type artifact struct{ files []string }

func (a *artifact) BuilderId() string        { return "podvm-gpu.rootfs" }
func (a *artifact) Files() []string          { return a.files }
func (a *artifact) Id() string               { return "test" }
func (a *artifact) String() string           { return "test artifact" }
func (a *artifact) State(string) interface{} { return nil }
func (a *artifact) Destroy() error           { return nil }

// PostProcess records the artifact's disk beside the manifest, signed
// when a key is given (sqv verifies it with the public key, as docs say),
// and keeps the artifact.
func TestPostProcess(t *testing.T) {
	key, public := gpgKey(t)
	for _, tt := range []struct {
		name   string
		files  []string
		key    string
		noMan  bool
		signed bool
		err    string
	}{
		{name: "unsigned", files: []string{"rootfs", "rootfs.qcow2"}},
		{name: "signed", files: []string{"rootfs", "disk.raw"}, key: key, signed: true},
		{name: "no disk", files: []string{"rootfs", "rootfs.tar.zst"}, err: "want one disk image"},
		{name: "two disks", files: []string{"a.raw", "b.qcow2"}, err: "found 2"},
		{name: "no manifest", files: []string{"disk.raw"}, noMan: true, err: "no manifest.json beside it"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			arts := filepath.Join(dir, "artifacts")
			if err := os.Mkdir(arts, 0o755); err != nil {
				t.Fatal(err)
			}
			if !tt.noMan {
				if err := os.WriteFile(filepath.Join(arts, bake.ManifestFile), []byte("{}\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			var files []string
			for _, f := range tt.files {
				p := filepath.Join(dir, f)
				if err := os.WriteFile(p, []byte("bytes of "+f), 0o644); err != nil {
					t.Fatal(err)
				}
				files = append(files, p)
			}
			raw := map[string]interface{}{"artifacts_directory": arts}
			if tt.key != "" {
				raw["local_repo_signing_key"] = tt.key
			}
			var p PostProcessor
			if err := p.Configure(raw); err != nil {
				t.Fatal(err)
			}
			in := &artifact{files}
			out, keep, force, err := p.PostProcess(context.Background(), packersdk.TestUi(t), in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("PostProcess: %v; want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if out != packersdk.Artifact(in) || !keep || !force {
				t.Errorf("PostProcess returned %v, keep %v, force %v; want the artifact kept as it was", out, keep, force)
			}
			b, err := os.ReadFile(filepath.Join(arts, bake.DiskFile))
			if err != nil {
				t.Fatal(err)
			}
			var rec bake.DiskRecord
			if err := json.Unmarshal(b, &rec); err != nil {
				t.Fatal(err)
			}
			if rec.Disk.File != filepath.Base(files[len(files)-1]) || rec.Disk.SHA256 == "" || rec.Manifest == "" {
				t.Errorf("record %+v", rec)
			}
			sig := filepath.Join(arts, bake.DiskFile+bake.SignatureSuffix)
			_, statErr := os.Stat(sig)
			if (statErr == nil) != tt.signed {
				t.Fatalf("signature present %v, want %v", statErr == nil, tt.signed)
			}
			if tt.signed {
				if out, err := exec.Command("sqv", "--keyring", public, sig, filepath.Join(arts, bake.DiskFile)).CombinedOutput(); err != nil {
					t.Errorf("sqv: %v\n%s", err, out)
				}
			}
		})
	}
}
