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

func TestHoldsSecretKey(t *testing.T) {
	pub, sec := testKeys(t)
	for name, c := range map[string]struct {
		data []byte
		want bool
	}{
		"public binary":            {pub, false},
		"public armored":           {armored(t, "PGP PUBLIC KEY BLOCK", pub), false},
		"secret binary":            {sec, true},
		"secret armored":           {armored(t, "PGP PRIVATE KEY BLOCK", sec), true},
		"secret mislabelled":       {armored(t, "PGP PUBLIC KEY BLOCK", sec), true},
		"public then secret":       {append(slices.Clone(pub), sec...), true},
		"text then armored secret": {append([]byte("comment\n"), armored(t, "PGP PUBLIC KEY BLOCK", sec)...), true},
		// Old-format headers: a 3-byte public-key packet (tag 6), then a
		// secret-key packet (tag 5).
		"old format":        {[]byte{0x98, 3, 1, 2, 3, 0x94, 1, 0}, true},
		"old format public": {[]byte{0x98, 3, 1, 2, 3}, false},
		"not openpgp":       {[]byte("just text\n"), false},
		"empty":             {nil, false},
	} {
		if got := HoldsSecretKey(c.data); got != c.want {
			t.Errorf("%s: HoldsSecretKey = %v, want %v", name, got, c.want)
		}
	}
}

func TestCheckSecretKeys(t *testing.T) {
	pub, sec := testKeys(t)
	root := t.TempDir()
	for p, data := range map[string][]byte{
		"usr/share/keyrings/podvm-local-packages.gpg": pub,
		"usr/share/keyrings/nvidia.gpg":               pub,
		"etc/apt/trusted.gpg.d/leak.asc":              armored(t, "PGP PRIVATE KEY BLOCK", sec),
		"opt/local-packages/keyring.gpg":              sec,
		"opt/local-packages/notes.txt":                sec, // not a key file name
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
	want := []string{"/opt/local-packages/keyring.gpg", "/etc/apt/trusted.gpg.d/leak.asc"}
	if !slices.Equal(got, want) {
		t.Errorf("found %v, want %v", got, want)
	}
	if _, err := CheckSecretKeys(root, []string{"relative"}); err == nil {
		t.Error("relative directory: want an error")
	}
}
