package aptrepo

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
)

// A key valid at an old SOURCE_DATE_EPOCH but expired today is refused:
// nodes check signatures against their own clock.
func TestLoadSignerExpiredToday(t *testing.T) {
	created := time.Now().Add(-10 * 24 * time.Hour).Truncate(time.Second)
	cfg := &packet.Config{
		Algorithm:       packet.PubKeyAlgoEdDSA,
		Time:            func() time.Time { return created },
		KeyLifetimeSecs: 24 * 3600,
	}
	e, err := openpgp.NewEntity("old key", "", "old@example.invalid", cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "old.asc")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := armor.Encode(f, openpgp.PrivateKeyType, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.SerializePrivate(w, cfg); err != nil {
		t.Fatal(err)
	}
	w.Close()
	f.Close()

	_, err = LoadSigner(path, "", created.Add(time.Hour))
	if err == nil || !strings.Contains(err.Error(), "expired or revoked now") || !strings.Contains(err.Error(), path) {
		t.Fatalf("got %v, want a refusal naming %s", err, path)
	}
}
