package gpu

import (
	"bytes"
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

	"github.com/podvm-gpu/packer-plugin-podvm/bake"
	"github.com/podvm-gpu/packer-plugin-podvm/dpkgstatus"
	"github.com/podvm-gpu/packer-plugin-podvm/gpustack"
	"github.com/podvm-gpu/packer-plugin-podvm/imagestep"
	"github.com/podvm-gpu/packer-plugin-podvm/inputcheck"
	"github.com/podvm-gpu/packer-plugin-podvm/repokey"
	"github.com/podvm-gpu/packer-plugin-podvm/sbom"
	"github.com/podvm-gpu/packer-plugin-podvm/shellquote"
)

// indexer indexes and signs the downloaded .debs on the build host. The
// private key stays in this process; only index files and public keys come
// back. The real one is bake.IndexRepo.
type indexer func(ctx context.Context, s bake.Spec, in bake.IndexInput) (*bake.Index, error)

// bake builds the node-local repository. The .debs are resolved and
// downloaded by the image's own apt into a directory beside the repository,
// copied to the build host, indexed and signed there, and the index goes
// back into that directory, which is then renamed into place: a failure at
// any point leaves the previous repository (or none), never a half-written
// one.
func (e *executor) bake(ctx context.Context, b gpustack.BakeRepo) (err error) {
	// Before anything touches the image, not even the cleanup below.
	if err := checkSwapDir(b.Dir); err != nil {
		return err
	}
	newDir, oldDir := b.Dir+".podvm-new", b.Dir+".podvm-old"
	defer func() {
		if err == nil {
			return
		}
		// Leave no debris beside the repository. The build's context may be
		// cancelled already; the cleanup gets a short one of its own.
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, cerr := e.r.query(cctx, "rm -rf "+shellquote.Word(newDir)); cerr != nil {
			e.ui.Error(fmt.Sprintf("could not remove %s: %v", newDir, cerr))
		}
	}()
	names, err := e.downloadInImage(ctx, b, newDir)
	if err != nil {
		return err
	}

	// Not os.MkdirTemp: an interrupted build kills this process before
	// any defer runs (see hostTemp).
	tmp, err := newHostTemp("podvm-gpu-repo-")
	if err != nil {
		return err
	}
	defer tmp.Remove()
	host := tmp.Dir
	debDir, outDir := filepath.Join(host, "debs"), filepath.Join(host, "index")
	for _, d := range []string{debDir, outDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
	}
	renames, err := e.copyToHost(ctx, newDir, names, debDir)
	if err != nil {
		return err
	}

	// A rerun that resolves the very same .debs keeps the signed repository
	// as it is: re-signing with a new ephemeral key would change the key
	// nodes trust for no reason.
	if kept, err := e.keepUnchanged(ctx, b, debDir, newDir); err != nil || kept {
		return err
	}
	e.ui.Say("indexing and signing on the build host")

	date := e.plan.Timestamp
	in := bake.IndexInput{DebDir: debDir, OutDir: outDir, KeyFile: b.SigningKey, Date: date}
	if e.debs != nil {
		in.Checked = e.debs.Sound()
	}
	res, err := e.indexer(ctx, e.spec, in)
	if err != nil {
		return fmt.Errorf("indexing and signing on the build host: %w", err)
	}
	defer res.Close()
	manifest, bom, err := e.manifest(ctx, bake.NewRepo(b.Dir, b.Keyring, res.Fingerprint, res.Packages), date)
	if err != nil {
		return err
	}
	mjson, err := manifest.JSON()
	if err != nil {
		return err
	}
	if err := e.installAndSwap(ctx, b.Dir, newDir, oldDir, outDir, res.Files, mjson, renames); err != nil {
		return err
	}
	known := ""
	if in.Checked != nil {
		known = fmt.Sprintf(" (%d found sound by an earlier build, not decompressed again)", res.KnownSound)
	}
	e.ui.Say(fmt.Sprintf("repository %s: %d packages%s, key %s", b.Dir, len(res.Packages), known, res.Fingerprint))
	return e.publish(ctx, b, res.Keyring, res.ArmoredKey, manifest, bom, res.Sign)
}

// downloadInImage has the image's apt resolve and download the .debs into
// newDir, and lists them.
func (e *executor) downloadInImage(ctx context.Context, b gpustack.BakeRepo, newDir string) ([]string, error) {
	d := imagestep.DownloadCommands(b, newDir, aptPrefix)
	if _, err := e.r.run(ctx, d.Prep); err != nil {
		return nil, err
	}
	// The cache keeps what apt fetched before Finish moves it.
	err := e.withDebs(ctx, d.Fetch, d.Archives, func() error {
		_, err := e.r.runApt(ctx, d.Fetch)
		return err
	})
	if err != nil {
		return nil, err
	}
	// Finish makes the .debs readable for their copy; the swap sets the
	// repository's final modes.
	if _, err := e.r.run(ctx, d.Finish); err != nil {
		return nil, err
	}
	listing, err := e.r.query(ctx, "cd "+shellquote.Word(newDir)+` && for f in *.deb; do [ -f "$f" ] && echo "$f"; done; true`)
	if err != nil {
		return nil, fmt.Errorf("listing downloaded packages: %w", err)
	}
	names := strings.Fields(listing)
	if len(names) == 0 {
		return nil, fmt.Errorf("apt downloaded no packages into %s", newDir)
	}
	return names, nil
}

// copyToHost copies the listed .debs from newDir into debDir on the build
// host, under their pool names; renames are the commands that give them
// the same names in the image.
func (e *executor) copyToHost(ctx context.Context, newDir string, names []string, debDir string) ([]string, error) {
	var total int64
	var renames []string
	for _, n := range names {
		if strings.ContainsAny(n, "/\x00") || strings.HasPrefix(n, ".") {
			return nil, fmt.Errorf("unexpected file name %q in %s", n, newDir)
		}
		safe := bake.PoolName(n)
		if safe != n {
			renames = append(renames, "mv "+shellquote.Word(newDir+"/"+n)+" "+shellquote.Word(newDir+"/"+safe))
		}
		dst := filepath.Join(debDir, safe)
		err := e.r.download(ctx, newDir+"/"+n, func() (io.WriteCloser, error) { return os.Create(dst) })
		if err != nil {
			return nil, err
		}
		if fi, err := os.Stat(dst); err == nil {
			total += fi.Size()
		}
	}
	e.ui.Say(fmt.Sprintf("copied %d packages (%.1f MiB) to the build host", len(names), float64(total)/(1<<20)))
	return renames, nil
}

// installAndSwap uploads the index, keys and manifest into newDir, fixes
// ownership and modes, and swaps the directory into place as dir.
func (e *executor) installAndSwap(ctx context.Context, dir, newDir, oldDir, outDir string, indexFiles []string, mjson []byte, renames []string) (err error) {
	var installs []string
	var staged []string
	defer func() {
		// The swap command removes its staged files itself; a failure
		// before or during it must not leave them in remote_folder.
		if err != nil {
			e.r.removeStaged(staged...)
		}
	}()
	files := append(slices.Clone(indexFiles), bake.ManifestFile)
	for _, f := range files {
		var data []byte
		if f == bake.ManifestFile {
			data = mjson
		} else if data, err = os.ReadFile(filepath.Join(outDir, f)); err != nil {
			return err
		}
		s, serr := e.r.stage(ctx, f, data)
		if serr != nil {
			return serr
		}
		staged = append(staged, s)
		installs = append(installs, "install -m 0644 "+shellquote.Word(s)+" "+shellquote.Word(newDir+"/"+f))
	}
	swap, err := swapCommand(newDir, oldDir, dir, append(renames, installs...), staged)
	if err != nil {
		return err
	}
	sres, err := e.r.exec(ctx, swap, false)
	if err != nil {
		return err // did not run to its end: the deferred cleanup removes the staged files
	}
	staged = nil // the swap command removed them, whatever its outcome
	if err := sres.check(swap); err != nil {
		return err
	}
	return nil
}

// swapCommand prepares newDir (extra commands first, then ownership and
// modes) and renames it to dir, the previous repository going to oldDir
// only for the moment of the swap. If the final rename fails the previous
// repository is put back; it is never deleted before the new one is in
// place. A previous repository that an interrupted swap left in oldDir is
// restored first. The staged files are removed whatever happens.
func swapCommand(newDir, oldDir, dir string, prepare, staged []string) (string, error) {
	if err := checkSwapDir(dir); err != nil {
		return "", err
	}
	n, o, d := shellquote.Word(newDir), shellquote.Word(oldDir), shellquote.Word(dir)
	// The allowed roots hold directories that packages own (/var/lib/pam,
	// /opt/<vendor>), which no list can name: an existing directory is
	// replaced only when it is empty or a repository a podvm build made.
	guard := "{ [ ! -e " + d + " ] || { [ -d " + d + " ] && [ ! -L " + d + " ] && { [ -z \"$(ls -A " + d + ")\" ] || { [ -f " + d + "/manifest.json ] && [ -f " + d + "/InRelease ]; }; }; } || " +
		"{ echo " + shellquote.Quote("podvm-gpu: "+dir+" (local_repo_path) exists and is not a repository that a podvm build made: refusing to replace it; choose a directory of its own") + " >&2; false; }; }"
	cmds := append([]string{guard}, prepare...)
	cmds = append(cmds,
		"chown -R root:root "+n,
		"find "+n+" -type d -exec chmod 0755 {} + && find "+n+" -type f -exec chmod 0644 {} +",
		"if [ ! -e "+d+" ] && [ -e "+o+" ]; then mv "+o+" "+d+"; fi",
		"rm -rf "+o,
		"if [ -e "+d+" ]; then mv "+d+" "+o+"; fi",
		"{ mv "+n+" "+d+" || { if [ -e "+o+" ]; then mv "+o+" "+d+"; fi; false; }; }",
		"rm -rf "+o,
	)
	cmd := strings.Join(cmds, " && ")
	if len(staged) > 0 {
		cmd += "; rc=$?; rm -f " + shellquote.JoinWords(staged...) + "; exit $rc"
	}
	return cmd, nil
}

// checkSwapDir refuses to swap a directory that is not the build's own:
// the swap removes the previous directory, so /etc there would remove the
// image's /etc. The settings refuse such a local_repo_path already; this
// guard holds for any Plan, however it was made.
func checkSwapDir(dir string) error {
	if err := inputcheck.ImageDataDir(dir); err != nil {
		return fmt.Errorf("repository directory %q: refusing to replace it: %w", dir, err)
	}
	return nil
}

// publish writes what goes with a repository in place: its keyring and,
// when asked for, the sources file in the image, and the host artifacts
// with the SBOM and, when sign is not nil, the record's signatures.
func (e *executor) publish(ctx context.Context, b gpustack.BakeRepo, keyring, armored []byte, manifest bake.Manifest, bom []byte, sign func([]byte) ([]byte, error)) error {
	for _, f := range e.spec.InImage(keyring) {
		if err := e.writeFile(ctx, f.Path, f.Data, 0o644, "root:root"); err != nil {
			return err
		}
	}
	var cert []byte
	taken := ""
	if e.spec.ChoosesDriver() {
		var err error
		if taken, err = e.takenSource(ctx); err != nil {
			return err
		}
	}
	if c, _ := e.spec.ModuleFiles(taken); c != "" {
		var err error
		if cert, err = e.readModuleCert(ctx); err != nil {
			return err
		}
	}
	paths, err := e.spec.Artifacts(b.OutputDir, armored, manifest, cert, bom, sign)
	if err != nil {
		return err
	}
	e.ui.Say("host artifacts:")
	for _, p := range paths {
		e.ui.Say("  " + p)
	}
	return nil
}

// readModuleCert reads the module signing certificate (public) the
// signing step left in the image.
func (e *executor) readModuleCert(ctx context.Context) ([]byte, error) {
	if e.moduleCert != nil {
		return e.moduleCert, nil
	}
	var buf bytes.Buffer
	err := e.r.download(ctx, e.plan.ModuleSigning.CertDER, func() (io.WriteCloser, error) {
		buf.Reset()
		return nopCloser{&buf}, nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the module signing certificate %s: %w", e.plan.ModuleSigning.CertDER, err)
	}
	e.moduleCert = bytes.Clone(buf.Bytes())
	return e.moduleCert, nil
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// manifest is the manifest and the SBOM of the image as it is now: the
// bake reads the image's dpkg status and the module signing certificate,
// as the mkosi path reads them from its tree.
func (e *executor) manifest(ctx context.Context, repo *bake.Repo, date time.Time) (bake.Manifest, []byte, error) {
	m, status, err := e.manifestOnly(ctx, repo, date)
	if err != nil {
		return m, nil, err
	}
	bom, err := e.spec.SBOM(status, date)
	return m, bom, err
}

func (e *executor) manifestOnly(ctx context.Context, repo *bake.Repo, date time.Time) (bake.Manifest, []byte, error) {
	st := bake.ImageState{Kernels: e.plan.Kernels}
	status, err := e.r.query(ctx, "cat "+dpkgstatus.Path)
	if err != nil {
		return bake.Manifest{}, nil, fmt.Errorf("reading the image's dpkg status: %w", err)
	}
	st.DpkgStatus = []byte(status)
	if e.spec.ChoosesDriver() {
		if st.DriverSource, err = e.takenSource(ctx); err != nil {
			return bake.Manifest{}, nil, err
		}
	}
	cert, sigs := e.spec.ModuleFiles(st.DriverSource)
	if cert != "" {
		if st.ModuleCert, err = e.readModuleCert(ctx); err != nil {
			return bake.Manifest{}, nil, err
		}
	}
	if sigs {
		out, err := e.r.query(ctx, "cat "+shellquote.Word(gpustack.ModuleSignatures))
		if err != nil {
			return bake.Manifest{}, nil, fmt.Errorf("reading the module signatures: %w", err)
		}
		st.ModuleSignatures = []byte(out)
	}
	m, err := e.spec.Manifest(repo, st, date)
	return m, st.DpkgStatus, err
}

// keepUnchanged reports whether the repository in the image can stay as it
// is: it holds exactly the .debs in debDir (same file names and SHA256) and
// was signed the way this build would sign it. With a key file that is the
// same key (fingerprint); with the ephemeral default any key does, since a
// new ephemeral key would only change the key nodes trust for no reason.
// If so it drops newDir and (re)writes the keyring, the sources file, a
// fresh manifest (the GPU stack as it is now, the repository section from
// the old manifest) in the repository and the host artifacts.
func (e *executor) keepUnchanged(ctx context.Context, b gpustack.BakeRepo, debDir, newDir string) (bool, error) {
	dir := shellquote.Word(b.Dir)
	probe := "if [ -f " + dir + "/manifest.json ] && [ -f " + dir + "/keyring.asc ] && [ -f " + dir + "/InRelease ]; then cat " + dir + "/manifest.json; fi"
	mjson, err := e.r.query(ctx, probe)
	if err != nil {
		return false, err
	}
	if strings.TrimSpace(mjson) == "" {
		return false, nil // no complete repository yet: bake one
	}
	var old bake.Manifest
	if json.Unmarshal([]byte(mjson), &old) != nil || old.Repo == nil || old.Repo.Fingerprint == "" {
		return false, nil
	}
	if same, err := sameDebs(old.Repo.Packages, debDir); err != nil || !same {
		return false, err
	}
	date := e.plan.Timestamp
	if b.SigningKey != "" {
		fp, err := e.signerFingerprint(b.SigningKey, b.Passphrase, date)
		if err != nil {
			return false, fmt.Errorf("local_repo_signing_key: %w", err)
		}
		if fp != old.Repo.Fingerprint {
			e.ui.Say(fmt.Sprintf("repository %s has the same packages but is signed by %s, not by %s: signing it again", b.Dir, old.Repo.Fingerprint, fp))
			return false, nil
		}
	}
	armored, err := e.r.query(ctx, "cat "+dir+"/keyring.asc")
	if err != nil {
		return false, err
	}
	// The keyring at b.Keyring is written from the repository's own public
	// key, and only if that is the key the old manifest names.
	ents, err := repokey.Parse([]byte(armored))
	if err != nil {
		return false, nil
	}
	ents, err = repokey.KeepPinned(ents, []string{old.Repo.Fingerprint})
	if err != nil {
		return false, nil
	}
	keyring, err := repokey.Binary(ents)
	if err != nil {
		return false, err
	}
	// The record is new; only a key file can sign it again. It is loaded
	// before anything in the image changes.
	var sign func([]byte) ([]byte, error)
	if b.SigningKey != "" {
		signer, err := bake.Signer(b.SigningKey, b.Passphrase, date)
		if err != nil {
			return false, fmt.Errorf("local_repo_signing_key: %w", err)
		}
		defer signer.Discard()
		sign = func(msg []byte) ([]byte, error) { return signer.DetachSign(msg, date) }
	}
	if _, err := e.r.run(ctx, "rm -rf "+shellquote.Word(newDir)); err != nil {
		return false, err
	}
	repo := *old.Repo
	repo.Path, repo.Keyring = b.Dir, b.Keyring
	manifest, bom, err := e.manifest(ctx, &repo, date)
	if err != nil {
		return false, err
	}
	data, err := manifest.JSON()
	if err != nil {
		return false, err
	}
	if err := e.writeFile(ctx, b.Dir+"/"+bake.ManifestFile, data, 0o644, "root:root"); err != nil {
		return false, err
	}
	e.ui.Say(fmt.Sprintf("repository %s unchanged (same %d packages): kept as signed, key %s", b.Dir, len(old.Repo.Packages), old.Repo.Fingerprint))
	if sign == nil {
		e.ui.Say("the ephemeral key that signed it is gone: " + bake.ManifestFile + " and " + sbom.File + " are written unsigned this time")
	}
	if err := e.publish(ctx, b, keyring, []byte(armored), manifest, bom, sign); err != nil {
		return false, err
	}
	return true, nil
}

// sameDebs reports whether debDir holds exactly the packages of an old
// manifest, by file name and SHA-256.
func sameDebs(pkgs []bake.Package, debDir string) (bool, error) {
	have := map[string]string{}
	for _, p := range pkgs {
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
