package gpu

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/podvm-gpu/packer-plugin-podvm/aptrepo"
	"github.com/podvm-gpu/packer-plugin-podvm/artifact"
	"github.com/podvm-gpu/packer-plugin-podvm/gpustack"
	"github.com/podvm-gpu/packer-plugin-podvm/version"
)

// indexer indexes and signs the downloaded .debs on the build host. The
// private key stays in this process; only index files and public keys come
// back.
type indexer interface {
	Index(ctx context.Context, req indexRequest) (*indexResult, error)
}

type indexRequest struct {
	DebDir, OutDir string
	SigningKey     string // "" for an ephemeral key
	PassphraseEnv  string
	Date           time.Time
}

type indexResult struct {
	Files       []string // base names written into OutDir
	Packages    []aptrepo.Package
	Fingerprint string
	Keyring     []byte // binary public keyring
	ArmoredKey  []byte
}

// aptrepoIndexer is the real indexer.
type aptrepoIndexer struct{}

func (aptrepoIndexer) Index(ctx context.Context, req indexRequest) (*indexResult, error) {
	var signer *aptrepo.Signer
	var err error
	if req.SigningKey != "" {
		signer, err = aptrepo.LoadSigner(req.SigningKey, req.PassphraseEnv, req.Date)
	} else {
		signer, err = aptrepo.NewEphemeralSigner("podvm local packages", req.Date)
	}
	if err != nil {
		return nil, err
	}
	// The private half is dropped as soon as the index is signed: an
	// ephemeral key can then never sign anything else.
	defer signer.Discard()
	res, err := aptrepo.Build(ctx, aptrepo.Options{
		DebDir:    req.DebDir,
		Out:       req.OutDir,
		Placement: aptrepo.IndexOnly,
		Origin:    "podvm",
		Label:     "podvm local packages",
		Date:      req.Date,
		Signer:    signer,
	})
	if err != nil {
		return nil, err
	}
	return &indexResult{
		Files:       res.Files,
		Packages:    res.Packages,
		Fingerprint: res.Fingerprint,
		Keyring:     signer.PublicKeyring(),
		ArmoredKey:  signer.ArmoredPublicKey(),
	}, nil
}

// bake builds the node-local repository. The .debs are resolved and
// downloaded by the image's own apt into a directory beside the repository,
// copied to the build host, indexed and signed there, and the index goes
// back into that directory, which is then renamed into place: a failure at
// any point leaves the previous repository (or none), never a half-written
// one.
func (e *executor) bake(ctx context.Context, b gpustack.BakeRepo) (err error) {
	newDir, oldDir := b.Dir+".podvm-new", b.Dir+".podvm-old"
	defer func() {
		if err == nil {
			return
		}
		// Leave no debris beside the repository. The build's context may be
		// cancelled already; the cleanup gets a short one of its own.
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, cerr := e.r.query(cctx, "rm -rf "+shellQuote(newDir)); cerr != nil {
			e.ui.Error(fmt.Sprintf("could not remove %s: %v", newDir, cerr))
		}
	}()
	if _, err := e.r.runApt(ctx, downloadCommand(b, newDir)); err != nil {
		return err
	}
	listing, err := e.r.query(ctx, "cd "+shellQuote(newDir)+` && for f in *.deb; do [ -f "$f" ] && echo "$f"; done; true`)
	if err != nil {
		return fmt.Errorf("listing downloaded packages: %w", err)
	}
	names := strings.Fields(listing)
	if len(names) == 0 {
		return fmt.Errorf("apt downloaded no packages into %s", newDir)
	}

	host, err := os.MkdirTemp("", "podvm-gpu-repo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(host)
	debDir, outDir := filepath.Join(host, "debs"), filepath.Join(host, "index")
	for _, d := range []string{debDir, outDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
	}
	var total int64
	var renames []string
	for _, n := range names {
		if strings.ContainsAny(n, "/\x00") || strings.HasPrefix(n, ".") {
			return fmt.Errorf("unexpected file name %q in %s", n, newDir)
		}
		safe := poolName(n)
		if safe != n {
			renames = append(renames, "mv "+shellQuote(newDir+"/"+n)+" "+shellQuote(newDir+"/"+safe))
		}
		dst := filepath.Join(debDir, safe)
		err := e.r.download(ctx, newDir+"/"+n, func() (io.WriteCloser, error) { return os.Create(dst) })
		if err != nil {
			return err
		}
		if fi, err := os.Stat(dst); err == nil {
			total += fi.Size()
		}
	}
	e.ui.Say(fmt.Sprintf("copied %d packages (%.1f MiB) to the build host", len(names), float64(total)/(1<<20)))

	// A rerun that resolves the very same .debs keeps the signed repository
	// as it is: re-signing with a new ephemeral key would change the key
	// nodes trust for no reason.
	if kept, err := e.keepUnchanged(ctx, b, debDir, newDir); err != nil || kept {
		return err
	}
	e.ui.Say("indexing and signing on the build host")

	o := e.plan.Options
	date := o.Timestamp()
	res, err := e.indexer.Index(ctx, indexRequest{
		DebDir: debDir, OutDir: outDir,
		SigningKey: b.SigningKey, PassphraseEnv: b.Passphrase,
		Date: date,
	})
	if err != nil {
		return fmt.Errorf("indexing and signing on the build host: %w", err)
	}
	manifest := e.manifest(b, res, date)
	mjson, err := manifest.JSON()
	if err != nil {
		return err
	}

	// Upload the index, keys and manifest, then fix ownership and modes
	// and swap the directory into place.
	var installs []string
	var staged []string
	files := append(slices.Clone(res.Files), artifact.ManifestFile)
	for _, f := range files {
		var data []byte
		if f == artifact.ManifestFile {
			data = mjson
		} else if data, err = os.ReadFile(filepath.Join(outDir, f)); err != nil {
			return err
		}
		s, err := e.r.stage(ctx, f, data)
		if err != nil {
			return err
		}
		staged = append(staged, s)
		installs = append(installs, "install -m 0644 "+shellQuote(s)+" "+shellQuote(newDir+"/"+f))
	}
	n, o2, d := shellQuote(newDir), shellQuote(oldDir), shellQuote(b.Dir)
	swap := strings.Join(append(renames, installs...), " && ") +
		" && chown -R root:root " + n +
		" && find " + n + " -type d -exec chmod 0755 {} + && find " + n + " -type f -exec chmod 0644 {} +" +
		" && rm -rf " + o2 + " && if [ -e " + d + " ]; then mv " + d + " " + o2 + "; fi && mv " + n + " " + d + " && rm -rf " + o2 +
		"; rc=$?; rm -f " + quoteAll(staged...) + "; exit $rc"
	if _, err := e.r.run(ctx, swap); err != nil {
		return err
	}

	if err := e.writeFile(ctx, b.Keyring, res.Keyring, 0o644, "root:root"); err != nil {
		return err
	}
	if b.SourcesFile {
		if err := e.writeFile(ctx, b.SourcesPath(), []byte(artifact.Sources(b.Dir, b.Keyring)), 0o644, "root:root"); err != nil {
			return err
		}
	}
	paths, err := artifact.Write(b.OutputDir, artifact.Set{
		RepoPath:    b.Dir,
		KeyringPath: b.Keyring,
		ArmoredKey:  res.ArmoredKey,
		Manifest:    manifest,
	})
	if err != nil {
		return fmt.Errorf("writing host artifacts: %w", err)
	}
	e.ui.Say(fmt.Sprintf("repository %s: %d packages, key %s", b.Dir, len(res.Packages), res.Fingerprint))
	e.ui.Say("host artifacts:")
	for _, p := range paths {
		e.ui.Say("  " + p)
	}
	return nil
}

// poolName is the archive's own file name for a .deb apt saved: apt writes
// an epoch's colon as %3a ("libattr1_1%3a2.5.2-3_amd64.deb"), the Debian
// pool leaves the epoch out ("libattr1_2.5.2-3_amd64.deb"). The pool name
// needs no quoting in Packages or in URLs.
func poolName(n string) string {
	name, rest, ok := strings.Cut(n, "_")
	if !ok {
		return n
	}
	if epoch, version, ok := strings.Cut(rest, "%3a"); ok && epoch != "" && strings.Trim(epoch, "0123456789") == "" {
		return name + "_" + version
	}
	return n
}

// downloadCommand prepares newDir and fills it with the .debs. With the
// full closure, apt-get install --download-only resolves against an empty
// dpkg status: apt's own resolver picks exactly what a consumer with
// nothing installed needs, alternatives and virtual packages included,
// which no hand-walk of apt-cache depends gets right. Recommends are left
// out: a consumer installing headers does not need them. The package caches
// are disabled so the image's apt state is not touched.
func downloadCommand(b gpustack.BakeRepo, newDir string) string {
	n := shellQuote(newDir)
	apt := `-o Dir::State::status="$t/status" -o Dir::Cache::archives="$t/archives" -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache= -o APT::Sandbox::User=root`
	prep := "rm -rf " + n + " && mkdir -p " + n + `/.apt/archives/partial && t=` + n + `/.apt && : > "$t/status" && `
	if b.Closure {
		return prep + aptPrefix + " " + apt + " -o APT::Install-Recommends=false --download-only install " + quoteAll(b.Packages...) +
			` && mv "$t"/archives/*.deb ` + n + `/ && rm -rf "$t"`
	}
	return prep + "cd " + n + " && " + aptPrefix + ` -o APT::Sandbox::User=root download ` + quoteAll(b.Packages...) + ` && rm -rf "$t"`
}

func (e *executor) manifest(b gpustack.BakeRepo, res *indexResult, date time.Time) artifact.Manifest {
	p, o := e.plan, e.plan.Options
	m := artifact.Manifest{
		SchemaVersion: 1,
		Generator:     "packer-plugin-podvm " + version.PluginVersion.FormattedVersion() + " (podvm-gpu provisioner)",
		Created:       date.Format(time.RFC3339),
		Target:        artifact.Target{Distro: p.Target.Distro, Version: p.Target.Version, Codename: p.Target.Codename, Arch: p.Target.Arch},
		Kernels:       p.Kernels,
	}
	if o.EnableGPU {
		m.GPU = &artifact.GPU{
			DriverBranch:   p.Driver.Branch,
			DriverVersion:  p.Driver.Version,
			Flavour:        string(p.Driver.Flavour),
			Source:         string(p.Driver.Source),
			Modules:        p.Driver.Modules,
			Toolkit:        o.Toolkit,
			ToolkitVersion: o.ToolkitVersion,
		}
		if o.Toolkit {
			m.GPU.HookMode = string(o.HookMode)
		}
	}
	repo := &artifact.Repo{Path: b.Dir, Keyring: b.Keyring, Fingerprint: res.Fingerprint}
	for _, pk := range res.Packages {
		repo.Packages = append(repo.Packages, artifact.Package{
			Name: pk.Name, Version: pk.Version, Arch: pk.Architecture,
			Filename: pk.Filename, Size: pk.Size, SHA256: pk.SHA256,
		})
	}
	m.Repo = repo
	return m
}

// keepUnchanged reports whether the repository in the image already holds
// exactly the .debs in debDir (same file names and SHA256). If so it drops
// newDir, rewrites the host artifacts from the repository's own manifest and
// key, and says so.
func (e *executor) keepUnchanged(ctx context.Context, b gpustack.BakeRepo, debDir, newDir string) (bool, error) {
	dir := shellQuote(b.Dir)
	probe := "if [ -f " + dir + "/manifest.json ] && [ -f " + dir + "/keyring.asc ] && [ -f " + dir + "/InRelease ] && [ -f " + shellQuote(b.Keyring) + " ]; then cat " + dir + "/manifest.json; fi"
	mjson, err := e.r.query(ctx, probe)
	if err != nil {
		return false, err
	}
	if strings.TrimSpace(mjson) == "" {
		return false, nil // no complete repository yet: bake one
	}
	var old artifact.Manifest
	if json.Unmarshal([]byte(mjson), &old) != nil || old.Repo == nil {
		return false, nil
	}
	have := map[string]string{}
	for _, p := range old.Repo.Packages {
		have[p.Filename] = p.SHA256
	}
	entries, err := os.ReadDir(debDir)
	if err != nil {
		return false, err
	}
	if len(entries) != len(have) {
		return false, nil
	}
	for _, ent := range entries {
		sum, err := fileSHA256(filepath.Join(debDir, ent.Name()))
		if err != nil {
			return false, err
		}
		if have[ent.Name()] != sum {
			return false, nil
		}
	}
	key, err := e.r.query(ctx, "cat "+dir+"/keyring.asc")
	if err != nil {
		return false, err
	}
	if _, err := e.r.run(ctx, "rm -rf "+shellQuote(newDir)); err != nil {
		return false, err
	}
	paths, err := artifact.Write(b.OutputDir, artifact.Set{RepoPath: b.Dir, KeyringPath: b.Keyring, ArmoredKey: []byte(key), Manifest: old})
	if err != nil {
		return false, fmt.Errorf("writing host artifacts: %w", err)
	}
	e.ui.Say(fmt.Sprintf("repository %s unchanged (same %d packages): kept as signed, key %s", b.Dir, len(have), old.Repo.Fingerprint))
	e.ui.Say("host artifacts:")
	for _, p := range paths {
		e.ui.Say("  " + p)
	}
	return true, nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
