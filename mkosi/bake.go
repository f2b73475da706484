package mkosi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/podvm-gpu/packer-plugin-podvm/aptrepo"
	"github.com/podvm-gpu/packer-plugin-podvm/artifact"
)

// Bake is the host-side half of the local repository step. The
// post-installation script has downloaded the .debs into the image's
// repository directory; Bake indexes and signs them in place on the build
// host, writes the public keyring, the sources file and the manifest into
// the image, and the host artifacts into ArtifactsDir. The signing key is
// read from the host (through $SRCDIR) and never written anywhere.
type Bake struct {
	Root         string   // the image ($BUILDROOT)
	Spec         string   // the tree's podvm-bake.json
	SrcDir       string   // $SRCDIR, against which the spec's key path resolves
	Kernels      []string // the image kernels the repository serves
	ArtifactsDir string   // host artifacts ($OUTPUTDIR/...)
}

// Run bakes the repository and returns the aptrepo result.
func (b Bake) Run(ctx context.Context) (*aptrepo.Result, error) {
	data, err := os.ReadFile(b.Spec)
	if err != nil {
		return nil, fmt.Errorf("bake-repo: %w", err)
	}
	var spec bakeSpec
	if err := json.Unmarshal(data, &spec); err != nil {
		return nil, fmt.Errorf("bake-repo: %s: %w", b.Spec, err)
	}
	if !path.IsAbs(spec.Dir) || !path.IsAbs(spec.Keyring) {
		return nil, fmt.Errorf("bake-repo: %s: dir and keyring must be absolute paths in the image", b.Spec)
	}
	date, err := aptrepo.DateFromEnvironment()
	if err != nil {
		return nil, fmt.Errorf("bake-repo: %w", err)
	}
	var signer *aptrepo.Signer
	if spec.SigningKey != "" {
		signer, err = aptrepo.LoadSigner(filepath.Join(b.SrcDir, filepath.FromSlash(spec.SigningKey)), spec.Passphrase, date)
	} else {
		signer, err = aptrepo.NewEphemeralSigner("podvm local packages, ephemeral key", date)
	}
	if err != nil {
		return nil, fmt.Errorf("bake-repo: %w", err)
	}
	defer signer.Discard()

	dir := filepath.Join(b.Root, filepath.FromSlash(spec.Dir))
	res, err := aptrepo.Build(ctx, aptrepo.Options{
		DebDir: dir, Out: dir, Placement: aptrepo.IndexOnly,
		Origin: "podvm", Label: "podvm local packages", Date: date, Signer: signer,
	})
	if err != nil {
		return nil, fmt.Errorf("bake-repo: %w", err)
	}
	if err := artifact.WriteFile(filepath.Join(b.Root, filepath.FromSlash(spec.Keyring)), signer.PublicKeyring()); err != nil {
		return nil, fmt.Errorf("bake-repo: %w", err)
	}
	if spec.SourcesFile != "" {
		src := artifact.Sources(spec.Dir, spec.Keyring)
		if err := artifact.WriteFile(filepath.Join(b.Root, filepath.FromSlash(spec.SourcesFile)), []byte(src)); err != nil {
			return nil, fmt.Errorf("bake-repo: %w", err)
		}
	}

	var cert []byte
	if spec.ModuleCert != "" {
		if cert, err = os.ReadFile(filepath.Join(b.Root, filepath.FromSlash(spec.ModuleCert))); err != nil {
			return nil, fmt.Errorf("bake-repo: the module signing certificate: %w", err)
		}
	}
	m := spec.Manifest
	m.Stamp(date)
	if m.GPU != nil && m.GPU.ModuleSigning != nil && cert != nil {
		m.GPU.ModuleSigning.CertSHA256 = artifact.CertSHA256(cert)
	}
	m.Kernels = b.Kernels
	m.Repo = artifact.NewRepo(spec.Dir, spec.Keyring, res.Fingerprint, res.Packages)
	if m.GPU != nil {
		pkgs, err := installedPackages(filepath.Join(b.Root, "var/lib/dpkg/status"), spec.Installed)
		if err != nil {
			return nil, fmt.Errorf("bake-repo: %w", err)
		}
		m.GPU.Packages = pkgs
	}
	manifest, err := m.JSON()
	if err != nil {
		return nil, fmt.Errorf("bake-repo: %w", err)
	}
	if err := artifact.WriteFile(filepath.Join(dir, artifact.ManifestFile), manifest); err != nil {
		return nil, fmt.Errorf("bake-repo: %w", err)
	}
	if b.ArtifactsDir != "" {
		if _, err := artifact.Write(b.ArtifactsDir, artifact.Set{
			RepoPath: spec.Dir, ExposePath: spec.ExposePath, KeyringPath: spec.Keyring, ArmoredKey: signer.ArmoredPublicKey(), Manifest: m, ModuleCert: cert,
		}); err != nil {
			return nil, fmt.Errorf("bake-repo: %w", err)
		}
	}
	return res, nil
}

// installedPackages lists the installed packages of a dpkg status file
// whose names the plan installed, in status order.
func installedPackages(status string, names []string) ([]artifact.Package, error) {
	data, err := os.ReadFile(status)
	if err != nil {
		return nil, err
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	var out []artifact.Package
	for _, para := range bytes.Split(data, []byte("\n\n")) {
		f := map[string]string{}
		sc := bufio.NewScanner(bytes.NewReader(para))
		sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if k, v, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(line, " ") {
				f[k] = strings.TrimSpace(v)
			}
		}
		if want[f["Package"]] && strings.HasSuffix(f["Status"], " installed") {
			out = append(out, artifact.Package{Name: f["Package"], Version: f["Version"], Arch: f["Architecture"]})
		}
	}
	return out, nil
}
