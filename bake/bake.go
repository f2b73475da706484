// Package bake is the host-side half of the node-local repository, the
// same for every back end: it chooses the signer, indexes and signs the
// downloaded .debs, writes the manifest and every artefact that goes
// beside the image (the deb822 source, the GPU Operator ConfigMap, Helm
// values and NVIDIADriver, the armored key, the module signing
// certificate). The back ends only move files: the Packer provisioner over
// its communicator, the mkosi scripts within the image tree.
package bake

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/podvm-gpu/packer-plugin-podvm/aptrepo"
	"github.com/podvm-gpu/packer-plugin-podvm/dpkgstatus"
	"github.com/podvm-gpu/packer-plugin-podvm/gpustack"
	"github.com/podvm-gpu/packer-plugin-podvm/sbom"
	"github.com/podvm-gpu/packer-plugin-podvm/settings"
)

// Repository identity in Release and in an ephemeral key's user ID.
const (
	origin = "podvm"
	label  = "podvm local packages"
)

// Spec is what a bake takes from the plan. It is plain data, so a
// generated tree carries it to build time as JSON.
type Spec struct {
	Repo gpustack.BakeRepo `json:"repo"`
	// Base is the plan's part of the manifest: target, kernels, the GPU
	// stack it chose. The build adds what only it knows.
	Base Manifest `json:"manifest"`
	// Installed are dpkg name patterns: the installed packages they match
	// are the GPU stack the manifest lists.
	Installed []string `json:"installed,omitempty"`
	// DriverPackage is the package whose installed version the manifest
	// records as the driver's.
	DriverPackage string `json:"driver_package,omitempty"`
}

// SpecFor is the bake spec of plan p, whose manifest names generator.
func SpecFor(p *gpustack.Plan, generator string) (Spec, error) {
	if p.Repo == nil {
		return Spec{}, errors.New("bake: the plan bakes no repository")
	}
	m := Manifest{
		SchemaVersion: 1,
		Generator:     generator,
		Target:        Target{Distro: p.Target.Distro, Version: p.Target.Version, Codename: p.Target.Codename, Arch: p.Target.Arch},
		Kernels:       p.Kernels,
	}
	if p.GPU {
		m.GPU = &GPU{
			DriverBranch:  p.Driver.Branch,
			DriverVersion: p.Driver.Version,
			Flavour:       string(p.Driver.Flavour),
			Source:        string(p.Driver.Source),
			Modules:       p.Driver.Modules,
		}
		if tk := p.Toolkit; tk != nil {
			m.GPU.Toolkit = true
			m.GPU.ToolkitVersion = tk.Version
			m.GPU.HookMode = string(tk.HookMode)
		}
		if ms := p.ModuleSigning; ms.Mode != "" {
			m.GPU.ModuleSigning = &ModuleSigning{Mode: ms.Mode, Signer: ms.Signer}
		}
	}
	return Spec{Repo: *p.Repo, Base: m, Installed: p.Installed, DriverPackage: p.Driver.Package}, nil
}

// Index is a signed repository index on the build host.
type Index struct {
	Files    []string // base names written into the output directory
	Packages []aptrepo.Package
	// KnownSound counts the .debs IndexInput.Checked knew.
	KnownSound  int
	Fingerprint string
	Keyring     []byte // binary public keyring
	ArmoredKey  []byte
	// Sign signs the build's record with the repository's key, which
	// stays in this process until Discard; nil where the index was not
	// made by IndexRepo.
	Sign    func([]byte) ([]byte, error)
	Discard func()
}

// Close drops the signing key; safe on an Index of any origin. Sign is
// nil after it.
func (idx *Index) Close() {
	if idx.Discard != nil {
		idx.Discard()
	}
	idx.Sign, idx.Discard = nil, nil
}

// IndexInput is where the .debs are and where the index goes.
type IndexInput struct {
	DebDir, OutDir string
	// KeyFile is the signing key on this host ("" for a fresh ephemeral
	// key); a back end that sees the host through a mount resolves
	// Spec.Repo.SigningKey to it.
	KeyFile string
	Date    time.Time
	// Checked remembers the .debs already found sound (nil: check all).
	Checked aptrepo.Checked
}

// Signer is the repository's signer: the key file, or a fresh Ed25519
// key whose private half the caller discards after signing, so that the
// repository can never be extended.
func Signer(keyFile, passphraseEnv string, date time.Time) (*aptrepo.Signer, error) {
	if keyFile != "" {
		return aptrepo.LoadSigner(keyFile, passphraseEnv, date)
	}
	return aptrepo.NewEphemeralSigner(label, date)
}

// IndexRepo indexes and signs the .debs in in.DebDir into in.OutDir. The
// private key lives in this process only: it signs the record through the
// Index until the caller's Close, which must follow.
func IndexRepo(ctx context.Context, s Spec, in IndexInput) (*Index, error) {
	signer, err := Signer(in.KeyFile, s.Repo.Passphrase, in.Date)
	if err != nil {
		return nil, err
	}
	res, err := aptrepo.Build(ctx, aptrepo.Options{
		DebDir: in.DebDir, Out: in.OutDir, Placement: aptrepo.IndexOnly,
		Origin: origin, Label: label, Date: in.Date, Signer: signer,
		AllDigests: s.Repo.AllDigests, Checked: in.Checked,
	})
	if err != nil {
		signer.Discard()
		return nil, err
	}
	return &Index{
		Files:       res.Files,
		Packages:    res.Packages,
		KnownSound:  res.KnownSound,
		Fingerprint: res.Fingerprint,
		Keyring:     signer.PublicKeyring(),
		ArmoredKey:  signer.ArmoredPublicKey(),
		Sign:        func(msg []byte) ([]byte, error) { return signer.DetachSign(msg, in.Date) },
		Discard:     signer.Discard,
	}, nil
}

// SBOM is the image's bill of materials, from its dpkg status (sbom.File).
func (s Spec) SBOM(status []byte, date time.Time) ([]byte, error) {
	t := s.Base.Target
	return sbom.FromStatus(status, sbom.Image{Distro: t.Distro, Version: t.Version, Name: "podvm-gpu " + t.Distro + " " + t.Version, Tool: s.Base.Generator}, date)
}

// ImageState is what the manifest reads from the image as built.
type ImageState struct {
	// Kernels are the kernels the repository serves: the plan's, or those
	// a generator resolved at build time.
	Kernels []string
	// DpkgStatus is the image's /var/lib/dpkg/status.
	DpkgStatus []byte
	// ModuleCert is the module signing certificate (DER) in the image; nil
	// when the build signed no module.
	ModuleCert []byte
	// ModuleSignatures is the image's gpustack.ModuleSignatures.
	ModuleSignatures []byte
	// DriverSource is the driver source a build-time choice took, from
	// the image's gpustack.DriverSourceFile; "" when the plan made none.
	DriverSource string
}

// ChoosesDriver reports whether the driver source is chosen in the image
// at build time, so that the image's gpustack.DriverSourceFile says which
// one the build took.
func (s Spec) ChoosesDriver() bool {
	return s.Base.GPU != nil && s.Base.GPU.Source == string(settings.SourceAuto)
}

// ModuleFiles says what the manifest reads from the image about module
// signatures, given the driver source taken ("" for none chosen): the
// certificate of the build's module signing key ("" for none: precompiled
// modules carry their kernel's key) and whether a signatures file exists.
func (s Spec) ModuleFiles(taken string) (cert string, signatures bool) {
	if taken == gpustack.TakenPrecompiled {
		return "", true
	}
	if s.Repo.ModuleCert != "" {
		return s.Repo.ModuleCert, true
	}
	ms := s.Base.GPU
	return "", ms != nil && ms.ModuleSigning != nil && ms.ModuleSigning.Mode == settings.SigningDistribution
}

// Manifest is the manifest of the image as it is: the plan's part, then
// the installed GPU stack (the Installed rule applied to the dpkg status),
// the driver's installed version, the held packages, the certificate's
// fingerprint and repo.
func (s Spec) Manifest(repo *Repo, st ImageState, date time.Time) (Manifest, error) {
	m := s.Base
	m.SchemaVersion = 1
	m.Stamp(date)
	m.Kernels = st.Kernels
	m.Repo = repo
	pkgs, err := dpkgstatus.Parse(st.DpkgStatus)
	if err != nil {
		return m, fmt.Errorf("reading the image's dpkg status: %w", err)
	}
	for _, p := range pkgs {
		if p.Held {
			m.Held = append(m.Held, p.Name)
		}
	}
	slices.Sort(m.Held)
	if m.GPU != nil {
		gpu := *m.GPU
		gpu.Packages = nil
		for _, p := range pkgs {
			if p.Installed && matchAny(s.Installed, p.Name) {
				gpu.Packages = append(gpu.Packages, Package{Name: p.Name, Version: p.Version, Arch: p.Arch})
			}
			if p.Installed && p.Name == s.DriverPackage {
				gpu.DriverVersion = p.Version
			}
		}
		slices.SortFunc(gpu.Packages, func(a, b Package) int {
			return strings.Compare(a.Name+"\x00"+a.Arch, b.Name+"\x00"+b.Arch)
		})
		if s.ChoosesDriver() {
			switch st.DriverSource {
			case gpustack.TakenPrecompiled:
				// The plan's signing policy was for DKMS, which the
				// build did not take.
				gpu.ModuleSigning = &ModuleSigning{Mode: settings.SigningDistribution}
			case gpustack.TakenDistro:
			default:
				return m, fmt.Errorf("%s: driver source %q; want %s or %s", gpustack.DriverSourceFile, st.DriverSource, gpustack.TakenPrecompiled, gpustack.TakenDistro)
			}
			gpu.SourceTaken = st.DriverSource
		}
		if ms := gpu.ModuleSigning; ms != nil {
			sig := *ms
			if st.ModuleCert != nil {
				sig.CertSHA256 = CertSHA256(st.ModuleCert)
				// A user's key: the certificate names the signer.
				if cert, err := x509.ParseCertificate(st.ModuleCert); err == nil && sig.Signer == "" {
					sig.Signer = ModuleSigner(cert)
				}
			}
			if sig.Modules, err = parseSignatures(st.ModuleSignatures); err != nil {
				return m, err
			}
			if sig.Mode == settings.SigningDistribution && len(sig.Modules) > 0 {
				// The check made every module carry its kernel's signer.
				sig.Signer = sig.Modules[0].Signer
			}
			gpu.ModuleSigning = &sig
		}
		m.GPU = &gpu
	}
	return m, nil
}

// File is a file the bake puts in the image, at an absolute path there.
type File struct {
	Path string
	Data []byte
}

// InImage are the files that go with the repository into the image beside
// it: the public keyring and, when asked for, the sources file. The
// manifest goes into the repository directory itself.
func (s Spec) InImage(keyring []byte) []File {
	files := []File{{Path: s.Repo.Keyring, Data: keyring}}
	if s.Repo.SourcesFile {
		files = append(files, File{Path: s.Repo.SourcesPath(), Data: []byte(Sources(s.Repo.Dir, s.Repo.Keyring))})
	}
	return files
}

// Artifacts writes the host artefacts into dir and returns their paths.
func (s Spec) Artifacts(dir string, armoredKey []byte, m Manifest, moduleCert, bom []byte, sign func([]byte) ([]byte, error)) ([]string, error) {
	paths, err := Write(dir, Set{
		SBOM:        bom,
		Sign:        sign,
		RepoPath:    s.Repo.Dir,
		ExposePath:  s.Repo.ExposePath,
		KeyringPath: s.Repo.Keyring,
		ArmoredKey:  armoredKey,
		Manifest:    m,
		ModuleCert:  moduleCert,
		Operator:    s.Repo.Operator,
	})
	if err != nil {
		return nil, fmt.Errorf("writing host artifacts: %w", err)
	}
	return paths, nil
}

// matchAny reports whether name matches one of the dpkg-style patterns
// (shell globs, as dpkg-query takes them).
func matchAny(patterns []string, name string) bool {
	for _, p := range patterns {
		if ok, err := path.Match(p, name); err == nil && ok {
			return true
		}
	}
	return false
}

// Tree is a bake into an image tree on this host (a generator's build):
// the .debs are already in the repository directory below Root.
type Tree struct {
	Root string // the image
	// Kernels are the kernels the repository serves.
	Kernels []string
	// KeyFile is the signing key as this host sees it; "" for ephemeral.
	KeyFile string
	Date    time.Time
	// ArtifactsDir receives the host artefacts; "" for none.
	ArtifactsDir string
}

// InTree indexes and signs the repository in place, then writes the
// keyring, the sources file and the manifest into the tree and the
// artefacts beside it.
func (s Spec) InTree(ctx context.Context, t Tree) (*Index, error) {
	if !path.IsAbs(s.Repo.Dir) || !path.IsAbs(s.Repo.Keyring) {
		return nil, fmt.Errorf("bake: repository %q and keyring %q must be absolute paths in the image", s.Repo.Dir, s.Repo.Keyring)
	}
	in := func(p string) string { return filepath.Join(t.Root, filepath.FromSlash(p)) }
	dir := in(s.Repo.Dir)
	idx, err := IndexRepo(ctx, s, IndexInput{DebDir: dir, OutDir: dir, KeyFile: t.KeyFile, Date: t.Date})
	if err != nil {
		return nil, err
	}
	defer idx.Close()
	for _, f := range s.InImage(idx.Keyring) {
		if err := WriteFile(in(f.Path), f.Data); err != nil {
			return nil, err
		}
	}
	st := ImageState{Kernels: t.Kernels}
	if st.DpkgStatus, err = os.ReadFile(in(dpkgstatus.Path)); err != nil {
		return nil, fmt.Errorf("reading the image's dpkg status: %w", err)
	}
	if s.ChoosesDriver() {
		taken, err := os.ReadFile(in(gpustack.DriverSourceFile))
		if err != nil {
			return nil, fmt.Errorf("the driver source taken: %w", err)
		}
		st.DriverSource = strings.TrimSpace(string(taken))
	}
	cert, sigs := s.ModuleFiles(st.DriverSource)
	if cert != "" {
		if st.ModuleCert, err = os.ReadFile(in(cert)); err != nil {
			return nil, fmt.Errorf("the module signing certificate: %w", err)
		}
	}
	if sigs {
		if st.ModuleSignatures, err = os.ReadFile(in(gpustack.ModuleSignatures)); err != nil {
			return nil, fmt.Errorf("the module signatures: %w", err)
		}
	}
	m, err := s.Manifest(NewRepo(s.Repo.Dir, s.Repo.Keyring, idx.Fingerprint, idx.Packages), st, t.Date)
	if err != nil {
		return nil, err
	}
	data, err := m.JSON()
	if err != nil {
		return nil, err
	}
	if err := WriteFile(filepath.Join(dir, ManifestFile), data); err != nil {
		return nil, err
	}
	if t.ArtifactsDir != "" {
		bom, err := s.SBOM(st.DpkgStatus, t.Date)
		if err != nil {
			return nil, err
		}
		if _, err := s.Artifacts(t.ArtifactsDir, idx.ArmoredKey, m, st.ModuleCert, bom, idx.Sign); err != nil {
			return nil, err
		}
	}
	return idx, nil
}

// parseSignatures reads gpustack.ModuleSignatures: per line kernel, file,
// signer, key id and hash, tab-separated.
func parseSignatures(data []byte) ([]ModuleSignature, error) {
	var out []ModuleSignature
	for i, l := range strings.Split(strings.TrimRight(string(data), "\n"), "\n") {
		if l == "" {
			continue
		}
		f := strings.Split(l, "\t")
		if len(f) != 5 || f[0] == "" || f[1] == "" || f[2] == "" {
			return nil, fmt.Errorf("%s:%d: not kernel, file, signer, key id and hash: %q", gpustack.ModuleSignatures, i+1, l)
		}
		out = append(out, ModuleSignature{Kernel: f[0], File: f[1], Signer: f[2], SigKey: f[3], HashAlgo: f[4]})
	}
	return out, nil
}
