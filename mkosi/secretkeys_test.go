package mkosi

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
)

func testKeys(t *testing.T) (public, secret []byte) {
	t.Helper()
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
	return pub.Bytes(), sec.Bytes()
}

func armored(t *testing.T, blockType string, data []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	w, err := armor.Encode(&b, blockType, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(data)
	w.Close()
	return b.Bytes()
}

func TestCheckSecretKeys(t *testing.T) {
	pub, sec := testKeys(t)
	root := t.TempDir()
	for p, data := range map[string][]byte{
		"usr/share/keyrings/podvm-local-packages.gpg": pub,
		"usr/share/keyrings/nvidia.gpg":               pub,
		"etc/apt/trusted.gpg.d/leak.asc":              armored(t, "PGP PRIVATE KEY BLOCK", sec),
		"opt/local-packages/keyring.gpg":              sec,
		"srv/other.key":                               sec, // not a directory we check
	} {
		f := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := CheckSecretKeys(root, []string{"/opt/local-packages", "/usr/share/keyrings", "/etc/apt", "/missing"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/opt/local-packages/keyring.gpg: OpenPGP secret key packet", "/etc/apt/trusted.gpg.d/leak.asc: PEM BEGIN PGP PRIVATE KEY BLOCK"}
	if !slices.Equal(got, want) {
		t.Errorf("found %v, want %v", got, want)
	}
	if _, err := CheckSecretKeys(root, []string{"relative"}); err == nil {
		t.Error("relative directory: want an error")
	}
}
