package mkosi

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"

	"github.com/podvm-gpu/packer-plugin-podvm/gpustack"
)

// Fetcher gets a key over the network. The generator fetches repository
// keys when it renders, not when mkosi builds: mkosi needs them in the
// sandbox before any script runs, and the fingerprint check then happens
// once, here, in Go.
type Fetcher func(ctx context.Context, url string) ([]byte, error)

// HTTPFetch is the default Fetcher: an https GET with a timeout.
func HTTPFetch(ctx context.Context, url string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return io.ReadAll(io.LimitReader(resp.Body, 1<<20))
}

// keyring returns the binary public keyring (what apt wants in a .gpg
// Signed-By file) for a repository key. It refuses keys holding private
// material, so a secret key passed by mistake never lands in the tree.
func keyring(ctx context.Context, k gpustack.Key, fetch Fetcher) ([]byte, error) {
	var data []byte
	var err error
	switch {
	case k.File != "":
		if data, err = os.ReadFile(k.File); err != nil {
			return nil, fmt.Errorf("repository key: %w", err)
		}
	case k.URL != "":
		if data, err = fetch(ctx, k.URL); err != nil {
			return nil, fmt.Errorf("fetch repository key (set the repo keyring setting to a local file for offline builds): %w", err)
		}
	default:
		return nil, nil
	}
	ents, err := readKeys(data)
	if err != nil {
		return nil, fmt.Errorf("repository key %s: %w", k.File+k.URL, err)
	}
	if len(k.Fingerprints) > 0 && !fingerprintMatches(ents, k.Fingerprints) {
		return nil, fmt.Errorf("repository key %s: fingerprint %s is none of the pinned %s",
			k.URL, fingerprints(ents), strings.Join(k.Fingerprints, ", "))
	}
	var out bytes.Buffer
	for _, e := range ents {
		if e.PrivateKey != nil {
			return nil, fmt.Errorf("repository key %s holds a private key; give the public key only", k.File+k.URL)
		}
		if err := e.Serialize(&out); err != nil {
			return nil, fmt.Errorf("repository key: %w", err)
		}
	}
	return out.Bytes(), nil
}

func readKeys(data []byte) (openpgp.EntityList, error) {
	if bytes.Contains(data, []byte("-----BEGIN PGP")) {
		return openpgp.ReadArmoredKeyRing(bytes.NewReader(data))
	}
	return openpgp.ReadKeyRing(bytes.NewReader(data))
}

func fingerprintMatches(ents openpgp.EntityList, want []string) bool {
	for _, e := range ents {
		fp := fmt.Sprintf("%X", e.PrimaryKey.Fingerprint)
		for _, w := range want {
			if strings.EqualFold(strings.ReplaceAll(w, " ", ""), fp) {
				return true
			}
		}
	}
	return false
}

func fingerprints(ents openpgp.EntityList) string {
	var fps []string
	for _, e := range ents {
		fps = append(fps, fmt.Sprintf("%X", e.PrimaryKey.Fingerprint))
	}
	return strings.Join(fps, ", ")
}
