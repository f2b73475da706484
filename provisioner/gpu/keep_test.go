package gpu

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/podvm-gpu/packer-plugin-podvm/artifact"
)

// TestBakeKeepsUnchangedRepository: a rerun that downloads the very same
// .debs keeps the signed repository (and the key nodes trust) as it is.
func TestBakeKeepsUnchangedRepository(t *testing.T) {
	tests := []struct {
		name     string
		tamper   func(m *artifact.Manifest)
		wantKept bool
	}{
		{"same packages", func(*artifact.Manifest) {}, true},
		{"a package changed", func(m *artifact.Manifest) { m.Repo.Packages[0].SHA256 = strings.Repeat("0", 64) }, false},
		{"a package more", func(m *artifact.Manifest) {
			m.Repo.Packages = append(m.Repo.Packages, artifact.Package{Filename: "extra_1_all.deb", SHA256: "x"})
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			img := debian13()
			old := artifact.Manifest{SchemaVersion: 1, Repo: &artifact.Repo{Path: "/opt/local-packages", Fingerprint: "OLDKEY"}}
			for name, data := range img.debs {
				sum := sha256.Sum256(data)
				old.Repo.Packages = append(old.Repo.Packages, artifact.Package{Filename: poolName(name), SHA256: hex.EncodeToString(sum[:])})
			}
			tt.tamper(&old)
			mjson, _ := json.Marshal(old)
			comm := newFakeComm(img)
			comm.respond = func(n int, inner string) (string, int, bool) {
				switch {
				case strings.Contains(inner, "then cat /opt/local-packages/manifest.json"):
					return string(mjson), 0, true
				case inner == "cat /opt/local-packages/keyring.asc":
					return "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nold\n-----END PGP PUBLIC KEY BLOCK-----\n", 0, true
				}
				return "", 0, false
			}
			p := newTestProvisioner(t, map[string]interface{}{"enable_nvidia_gpu": "no", "local_repo": "yes"})
			if err := provision(t, p, comm); err != nil {
				t.Fatal(err)
			}
			log := strings.Join(comm.log, "\n")
			kept := strings.Contains(log, "unchanged (same 4 packages): kept as signed, key OLDKEY")
			signed := strings.Contains(log, "indexing and signing on the build host")
			if kept != tt.wantKept || signed == tt.wantKept {
				t.Errorf("kept %v, signed %v; want kept %v\n%s", kept, signed, tt.wantKept, log)
			}
			if tt.wantKept && strings.Contains(log, "/opt/local-packages.podvm-new/InRelease") {
				t.Errorf("a kept repository was re-indexed:\n%s", log)
			}
		})
	}
}
