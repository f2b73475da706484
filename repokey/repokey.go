// Package repokey fetches, reads and pins the OpenPGP public keys that
// sign apt repositories, on the build host, before any of them reaches an
// image. A fetched key is trusted only through a pinned primary-key
// fingerprint; a key file named by the user is trusted as is. Keys are
// handed on as binary keyrings, the form apt reads from a .gpg file.
package repokey

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"

	"github.com/podvm-gpu/packer-plugin-podvm/keyfile"
)

// MaxSize bounds a fetched key; real repository keys are a few KiB.
const MaxSize = 1 << 20

// DefaultTimeout bounds a whole fetch when the client sets no timeout.
const DefaultTimeout = 60 * time.Second

// Fetcher downloads repository keys over https.
type Fetcher struct {
	// Client is used for the request; nil means a default client. Its
	// redirect policy is wrapped so that a redirect to anything but https
	// is refused.
	Client *http.Client
	// MaxSize is the largest accepted response body; 0 means MaxSize.
	MaxSize int64
	// Timeout bounds the whole fetch; 0 means the client's timeout, or
	// DefaultTimeout when the client has none.
	Timeout time.Duration
}

// Fetch downloads a key with the default Fetcher around client.
func Fetch(ctx context.Context, client *http.Client, keyURL string, fingerprints []string) ([]byte, error) {
	return Fetcher{Client: client}.Fetch(ctx, keyURL, fingerprints)
}

// Fetch downloads the key at keyURL (https only, redirects only to https),
// keeps the entities whose primary fingerprint is one of fingerprints and
// returns them as a binary keyring.
func (f Fetcher) Fetch(ctx context.Context, keyURL string, fingerprints []string) ([]byte, error) {
	if err := requireHTTPS(keyURL); err != nil {
		return nil, fmt.Errorf("key URL %s: %w", keyURL, err)
	}
	if len(fingerprints) == 0 {
		return nil, fmt.Errorf("key URL %s: no pinned fingerprint to check it against", keyURL)
	}
	client := http.Client{Timeout: DefaultTimeout}
	if f.Client != nil {
		client = *f.Client
		if client.Timeout == 0 {
			client.Timeout = DefaultTimeout
		}
	}
	if f.Timeout > 0 {
		client.Timeout = f.Timeout
	}
	next := client.CheckRedirect
	client.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if err := requireHTTPS(req.URL.String()); err != nil {
			return fmt.Errorf("redirect to %s refused: %w", req.URL.Redacted(), err)
		}
		if next != nil {
			return next(req, via)
		}
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
	limit := f.MaxSize
	if limit <= 0 {
		limit = MaxSize
	}

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, keyURL, nil)
	if err != nil {
		return nil, fmt.Errorf("key URL %s: %w", keyURL, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetching key %s: %w", keyURL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetching key %s: %s", keyURL, resp.Status)
	}
	if resp.ContentLength > limit {
		return nil, fmt.Errorf("fetching key %s: %d bytes, larger than the %d-byte limit", keyURL, resp.ContentLength, limit)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("fetching key %s: %w", keyURL, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("fetching key %s: larger than the %d-byte limit", keyURL, limit)
	}
	entities, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("key %s: %w", keyURL, err)
	}
	kept, err := KeepPinned(entities, fingerprints)
	if err != nil {
		return nil, fmt.Errorf("key %s: %w", keyURL, err)
	}
	return Binary(kept)
}

func requireHTTPS(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	if u.Scheme != "https" || u.Host == "" {
		return errors.New("only https is allowed")
	}
	return nil
}

// Parse reads an OpenPGP public keyring, armored or binary.
func Parse(data []byte) (openpgp.EntityList, error) {
	if block, err := armor.Decode(bytes.NewReader(data)); err == nil {
		return openpgp.ReadKeyRing(block.Body)
	}
	return openpgp.ReadKeyRing(bytes.NewReader(data))
}

// Binary serializes the public parts of entities the way apt wants a .gpg
// keyring: a binary OpenPGP export, not armored and not a keybox.
func Binary(entities openpgp.EntityList) ([]byte, error) {
	var b bytes.Buffer
	for _, e := range entities {
		if err := e.Serialize(&b); err != nil {
			return nil, fmt.Errorf("serializing key %s: %w", Fingerprint(e), err)
		}
	}
	return b.Bytes(), nil
}

// Fingerprint is an entity's primary-key fingerprint in upper-case hex.
func Fingerprint(e *openpgp.Entity) string {
	return fmt.Sprintf("%X", e.PrimaryKey.Fingerprint)
}

// NormFingerprint upper-cases a fingerprint and drops its spaces.
func NormFingerprint(s string) string {
	return strings.ToUpper(strings.ReplaceAll(s, " ", ""))
}

// KeepPinned returns the entities whose primary key has one of the pinned
// fingerprints; anything else in a fetched keyring is dropped, not trusted.
func KeepPinned(entities openpgp.EntityList, fingerprints []string) (openpgp.EntityList, error) {
	want := make([]string, len(fingerprints))
	for i, f := range fingerprints {
		want[i] = NormFingerprint(f)
	}
	var kept openpgp.EntityList
	var seen []string
	for _, e := range entities {
		fp := Fingerprint(e)
		seen = append(seen, fp)
		if slices.Contains(want, fp) {
			kept = append(kept, e)
		}
	}
	if len(kept) == 0 {
		found := strings.Join(seen, ", ")
		if found == "" {
			found = "no key"
		}
		return nil, fmt.Errorf("no key with fingerprint %s (found %s)", strings.Join(want, " or "), found)
	}
	return kept, nil
}

// ReadFile reads a key file on the build host, armored or binary, and
// returns it as a binary keyring. setting names the option that gave the
// path, for the error message. The user named the file, so it is trusted
// as is.
func ReadFile(path, setting string) ([]byte, error) {
	data, err := keyfile.Read(path, setting, keyfile.MaxSize)
	if err != nil {
		return nil, err
	}
	entities, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: key file %s: %w", setting, path, err)
	}
	if len(entities) == 0 {
		return nil, fmt.Errorf("%s: key file %s: no public key in it", setting, path)
	}
	return Binary(entities)
}
