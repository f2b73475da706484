package gpu

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
)

// writePrivateKey writes an armored private key, optionally encrypted,
// optionally with a lifetime, created at 1600000000.
func writePrivateKey(t *testing.T, passphrase string, lifetime uint32) string {
	t.Helper()
	created := time.Unix(1600000000, 0)
	e, err := openpgp.NewEntity("prepare test", "", "", &packet.Config{
		Algorithm: packet.PubKeyAlgoEdDSA, Curve: packet.Curve25519,
		Time: func() time.Time { return created }, KeyLifetimeSecs: lifetime,
	})
	if err != nil {
		t.Fatal(err)
	}
	if passphrase != "" {
		if err := e.EncryptPrivateKeys([]byte(passphrase), nil); err != nil {
			t.Fatal(err)
		}
	}
	var b bytes.Buffer
	w, _ := armor.Encode(&b, openpgp.PrivateKeyType, nil)
	if err := e.SerializePrivateWithoutSigning(w, nil); err != nil {
		t.Fatal(err)
	}
	w.Close()
	path := filepath.Join(t.TempDir(), "signing.asc")
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestPrepareChecksKeys: key problems fail Prepare, naming the setting.
func TestPrepareChecksKeys(t *testing.T) {
	t.Setenv("PODVM_TEST_PASSPHRASE", "right")
	pubKey, _ := testKey(t)
	garbage := filepath.Join(t.TempDir(), "garbage.gpg")
	os.WriteFile(garbage, []byte("not a key"), 0o644)
	unreadable := filepath.Join(t.TempDir(), "dir.gpg")
	os.Mkdir(unreadable, 0o755)
	repo := map[string]interface{}{"local_repo": "yes", "nvidia_container_toolkit_repo_keyring": pubKey}

	for _, tc := range []struct {
		name     string
		settings map[string]interface{}
		wantErr  []string // nil: Prepare succeeds
	}{
		{"good signing key", map[string]interface{}{"local_repo_signing_key": writePrivateKey(t, "", 0)}, nil},
		{"encrypted key, right passphrase", map[string]interface{}{
			"local_repo_signing_key": writePrivateKey(t, "right", 0), "local_repo_passphrase_env": "PODVM_TEST_PASSPHRASE"}, nil},
		{"encrypted key, wrong passphrase", map[string]interface{}{
			"local_repo_signing_key": writePrivateKey(t, "wrong", 0), "local_repo_passphrase_env": "PODVM_TEST_PASSPHRASE"},
			[]string{"local_repo_signing_key", "passphrase", "PODVM_TEST_PASSPHRASE"}},
		{"expired signing key", map[string]interface{}{"local_repo_signing_key": writePrivateKey(t, "", 3600)},
			[]string{"local_repo_signing_key", "expired"}},
		{"public key as signing key", map[string]interface{}{"local_repo_signing_key": pubKey},
			[]string{"local_repo_signing_key", "private key"}},
		{"cuda keyring garbage", map[string]interface{}{"nvidia_cuda_repo_keyring": garbage},
			[]string{"nvidia_cuda_repo_keyring", garbage}},
		{"toolkit keyring unreadable", map[string]interface{}{"nvidia_container_toolkit_repo_keyring": unreadable},
			[]string{"nvidia_container_toolkit_repo_keyring"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := map[string]interface{}{"source_date_epoch": "1700000000", "output_dir": t.TempDir()}
			for k, v := range repo {
				raw[k] = v
			}
			for k, v := range tc.settings {
				raw[k] = v
			}
			p := &Provisioner{lookupEnv: func(string) (string, bool) { return "", false }}
			err := p.Prepare(raw)
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("Prepare: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Prepare succeeded")
			}
			for _, s := range tc.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not name %q", err, s)
				}
			}
		})
	}
}
