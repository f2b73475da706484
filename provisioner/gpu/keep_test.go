package gpu

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/packet"

	"github.com/podvm-gpu/packer-plugin-podvm/bake"
)

// testSigningKey returns a fresh signing key and the path of its armored
// private key file (no passphrase).
func testSigningKey(t *testing.T, name string) (*openpgp.Entity, string) {
	t.Helper()
	created := time.Unix(1600000000, 0)
	e, err := openpgp.NewEntity(name, "", "", &packet.Config{
		Algorithm: packet.PubKeyAlgoEdDSA, Curve: packet.Curve25519,
		Time: func() time.Time { return created },
	})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	w, err := armor.Encode(&b, openpgp.PrivateKeyType, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.SerializePrivate(w, nil); err != nil {
		t.Fatal(err)
	}
	w.Close()
	path := filepath.Join(t.TempDir(), name+".asc")
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return e, path
}

func armoredPublic(t *testing.T, e *openpgp.Entity) string {
	t.Helper()
	var b bytes.Buffer
	w, _ := armor.Encode(&b, openpgp.PublicKeyType, nil)
	if err := e.Serialize(w); err != nil {
		t.Fatal(err)
	}
	w.Close()
	return b.String()
}

// TestBakeKeepsUnchangedRepository: a rerun that downloads the very same
// .debs and would sign the same way keeps the signed repository (and the
// key nodes trust) as it is, and still writes the keyring, the sources file
// and a fresh manifest.
func TestBakeKeepsUnchangedRepository(t *testing.T) {
	oldKey, oldKeyFile := testSigningKey(t, "old")
	_, otherKeyFile := testSigningKey(t, "other")
	oldFP := strings.ToUpper(hex.EncodeToString(oldKey.PrimaryKey.Fingerprint))
	tests := []struct {
		name       string
		tamper     func(m *bake.Manifest)
		signingKey string
		wantKept   bool
	}{
		{"same packages, ephemeral key", func(*bake.Manifest) {}, "", true},
		{"same packages, same key file", func(*bake.Manifest) {}, oldKeyFile, true},
		{"same packages, another key file", func(*bake.Manifest) {}, otherKeyFile, false},
		{"a package changed", func(m *bake.Manifest) { m.Repo.Packages[0].SHA256 = strings.Repeat("0", 64) }, "", false},
		{"a package more", func(m *bake.Manifest) {
			m.Repo.Packages = append(m.Repo.Packages, bake.Package{Filename: "extra_1_all.deb", SHA256: "x"})
		}, "", false},
		{"key in the repository is not the manifest's", func(m *bake.Manifest) { m.Repo.Fingerprint = "0123" }, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			img := debian13()
			old := bake.Manifest{SchemaVersion: 1, Created: "2001-01-01T00:00:00Z",
				Repo: &bake.Repo{Path: "/opt/local-packages", Fingerprint: oldFP}}
			for name, data := range img.debs {
				sum := sha256.Sum256(data)
				old.Repo.Packages = append(old.Repo.Packages, bake.Package{Name: strings.Split(name, "_")[0], Filename: bake.PoolName(name), SHA256: hex.EncodeToString(sum[:])})
			}
			tt.tamper(&old)
			mjson, _ := json.Marshal(old)
			comm := newFakeComm(img)
			comm.respond = func(n int, inner string) (string, int, bool) {
				switch {
				case strings.Contains(inner, "then cat /opt/local-packages/manifest.json"):
					return string(mjson), 0, true
				case inner == "cat /opt/local-packages/keyring.asc":
					return armoredPublic(t, oldKey), 0, true
				}
				return "", 0, false
			}
			settings := map[string]interface{}{"enable_nvidia_gpu": "no", "local_repo": "yes", "local_repo_sources_file": "yes"}
			if tt.signingKey != "" {
				settings["local_repo_signing_key"] = tt.signingKey
			}
			p := newTestProvisioner(t, settings)
			if err := provision(t, p, comm); err != nil {
				t.Fatal(err)
			}
			log := strings.Join(comm.log, "\n")
			kept := strings.Contains(log, "unchanged (same 4 packages): kept as signed, key "+oldFP)
			signed := strings.Contains(log, "indexing and signing on the build host")
			if kept != tt.wantKept || signed == tt.wantKept {
				t.Errorf("kept %v, signed %v; want kept %v\n%s", kept, signed, tt.wantKept, log)
			}
			if !tt.wantKept {
				return
			}
			if strings.Contains(log, "/opt/local-packages.podvm-new/InRelease") {
				t.Errorf("a kept repository was re-indexed:\n%s", log)
			}
			// The keyring, the sources file and a fresh manifest are (re)written.
			var keyring []byte
			var manifest bake.Manifest
			var sources bool
			for path, data := range comm.uploads {
				switch {
				case strings.HasSuffix(path, ".podvm-local-packages.gpg"):
					keyring = data
				case strings.HasSuffix(path, ".manifest.json"):
					if err := json.Unmarshal(data, &manifest); err != nil {
						t.Fatal(err)
					}
				case strings.HasSuffix(path, ".local-packages.sources"):
					sources = true
				}
			}
			ents, err := openpgp.ReadKeyRing(bytes.NewReader(keyring))
			if err != nil || len(ents) != 1 || strings.ToUpper(hex.EncodeToString(ents[0].PrimaryKey.Fingerprint)) != oldFP {
				t.Errorf("keyring at local_repo_keyring not rewritten from the kept key: %v", err)
			}
			if !sources {
				t.Errorf("sources file not written:\n%s", log)
			}
			for _, want := range []string{"/opt/local-packages/manifest.json", "/usr/share/keyrings/podvm-local-packages.gpg", "/etc/apt/sources.list.d/"} {
				if !strings.Contains(log, "install -D -m 0644 -o root -g root") || !strings.Contains(log, want) {
					t.Errorf("nothing installed at %s:\n%s", want, log)
				}
			}
			if manifest.Created == old.Created || manifest.Repo == nil || manifest.Repo.Fingerprint != oldFP || len(manifest.Repo.Packages) != 4 {
				t.Errorf("manifest in the repository is not fresh with the old repo section: %+v", manifest)
			}
			host, err := os.ReadFile(filepath.Join(p.options.OutputDir, bake.ManifestFile))
			if err != nil {
				t.Fatal(err)
			}
			var hm bake.Manifest
			if err := json.Unmarshal(host, &hm); err != nil || hm.Created != manifest.Created || hm.Repo.Fingerprint != oldFP {
				t.Errorf("host manifest %v: %s", err, host)
			}
		})
	}
}
