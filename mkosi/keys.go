package mkosi

import (
	"context"
	"fmt"
	"net/http"

	"github.com/podvm-gpu/packer-plugin-podvm/gpustack"
	"github.com/podvm-gpu/packer-plugin-podvm/repokey"
)

// keyring returns the binary public keyring (what apt wants in a .gpg
// Signed-By file) for a repository key, through repokey as the provisioner
// gets it: a host key file is trusted as is; a URL is fetched over https
// only, bounded in size, and only its entities with a pinned fingerprint
// are kept. Only public key material is written either way. The generator
// fetches when it renders, not when mkosi builds: mkosi needs the keys in
// the sandbox before any script runs.
func keyring(ctx context.Context, k gpustack.Key, client *http.Client) ([]byte, error) {
	switch {
	case k.File != "":
		return repokey.ReadFile(k.File, "repository key")
	case k.URL != "":
		kr, err := repokey.Fetch(ctx, client, k.URL, k.Fingerprints)
		if err != nil {
			return nil, fmt.Errorf("repository key (set the repo keyring setting to a local file for offline builds): %w", err)
		}
		return kr, nil
	}
	return nil, nil
}
