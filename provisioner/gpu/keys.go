package gpu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
)

// maxKeySize bounds a fetched key; real repository keys are a few KiB.
const maxKeySize = 1 << 20

// readKeyring parses an OpenPGP public keyring, armored or binary.
func readKeyring(data []byte) (openpgp.EntityList, error) {
	if block, err := armor.Decode(bytes.NewReader(data)); err == nil {
		return openpgp.ReadKeyRing(block.Body)
	}
	return openpgp.ReadKeyRing(bytes.NewReader(data))
}

// binaryKeyring serializes the public parts of entities the way apt wants a
// .gpg keyring: a binary OpenPGP export, not armored and not a keybox.
func binaryKeyring(entities openpgp.EntityList) ([]byte, error) {
	var b bytes.Buffer
	for _, e := range entities {
		if err := e.Serialize(&b); err != nil {
			return nil, fmt.Errorf("serializing key %X: %w", e.PrimaryKey.Fingerprint, err)
		}
	}
	return b.Bytes(), nil
}

func normFingerprint(s string) string {
	return strings.ToUpper(strings.ReplaceAll(s, " ", ""))
}

// keepPinned returns the entities whose primary key has one of the pinned
// fingerprints; a fetched keyring with anything else in it does not get
// those extra keys trusted.
func keepPinned(entities openpgp.EntityList, fingerprints []string) (openpgp.EntityList, error) {
	want := make([]string, len(fingerprints))
	for i, f := range fingerprints {
		want[i] = normFingerprint(f)
	}
	var kept openpgp.EntityList
	var seen []string
	for _, e := range entities {
		fp := fmt.Sprintf("%X", e.PrimaryKey.Fingerprint)
		seen = append(seen, fp)
		if slices.Contains(want, fp) {
			kept = append(kept, e)
		}
	}
	if len(kept) == 0 {
		return nil, fmt.Errorf("no key with fingerprint %s (got %s)", strings.Join(want, " or "), strings.Join(seen, ", "))
	}
	return kept, nil
}

// fetchKey downloads a repository key over https on the build host and
// checks its fingerprint before anything of it reaches the image.
func fetchKey(ctx context.Context, client *http.Client, url string, fingerprints []string) ([]byte, error) {
	if !strings.HasPrefix(url, "https://") {
		return nil, fmt.Errorf("key URL %s: only https is allowed", url)
	}
	if len(fingerprints) == 0 {
		return nil, fmt.Errorf("key URL %s: no pinned fingerprint to check it against", url)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetching key: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetching key %s: %s", url, resp.Status)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxKeySize+1))
	if err != nil {
		return nil, fmt.Errorf("fetching key %s: %w", url, err)
	}
	if len(data) > maxKeySize {
		return nil, fmt.Errorf("fetching key %s: larger than %d bytes", url, maxKeySize)
	}
	entities, err := readKeyring(data)
	if err != nil {
		return nil, fmt.Errorf("key %s: %w", url, err)
	}
	kept, err := keepPinned(entities, fingerprints)
	if err != nil {
		return nil, fmt.Errorf("key %s: %w", url, err)
	}
	return binaryKeyring(kept)
}

// keyFile reads a key file on the build host, armored or binary, and
// returns it as a binary keyring. The user named it, so it is trusted as is.
func keyFile(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	entities, err := readKeyring(data)
	if err != nil {
		return nil, fmt.Errorf("key file %s: %w", path, err)
	}
	if len(entities) == 0 {
		return nil, fmt.Errorf("key file %s: %w", path, errors.New("no public key in it"))
	}
	return binaryKeyring(entities)
}
