package mkosi

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/podvm-gpu/packer-plugin-podvm/aptrepo"
	"github.com/podvm-gpu/packer-plugin-podvm/bake"
)

// Bake is the host-side half of the local repository step, which run-steps
// runs once it has downloaded the .debs into the image's repository
// directory. The bake package does the work, as for
// the Packer provisioner; this only locates its inputs in mkosi's
// sandbox. The signing key is read from the host (through $SRCDIR) and
// never written anywhere.
type Bake struct {
	Root         string   // the image ($BUILDROOT)
	Spec         string   // the tree's podvm-bake.json
	SrcDir       string   // $SRCDIR, against which the spec's key path resolves
	Kernels      []string // the image kernels the repository serves
	ArtifactsDir string   // host artifacts ($OUTPUTDIR/...)
}

// Run bakes the repository.
func (b Bake) Run(ctx context.Context) (*bake.Index, error) {
	data, err := os.ReadFile(b.Spec)
	if err != nil {
		return nil, fmt.Errorf("bake local repository: %w", err)
	}
	var spec bake.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		return nil, fmt.Errorf("bake local repository: %s: %w", b.Spec, err)
	}
	date, err := aptrepo.DateFromEnvironment()
	if err != nil {
		return nil, fmt.Errorf("bake local repository: %w", err)
	}
	var key string
	if k := spec.Repo.SigningKey; k != "" {
		key = filepath.Join(b.SrcDir, filepath.FromSlash(k))
	}
	idx, err := spec.InTree(ctx, bake.Tree{Root: b.Root, Kernels: b.Kernels, KeyFile: key, Date: date, ArtifactsDir: b.ArtifactsDir})
	if err != nil {
		return nil, fmt.Errorf("bake local repository: %w", err)
	}
	return idx, nil
}
