package bake

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/podvm-gpu/packer-plugin-podvm/aptrepo"
	"github.com/podvm-gpu/packer-plugin-podvm/aptsource"
	"github.com/podvm-gpu/packer-plugin-podvm/gpustack"
	"github.com/podvm-gpu/packer-plugin-podvm/sbom"
	"github.com/podvm-gpu/packer-plugin-podvm/settings"
)

// File names in the output directory.
const (
	SourcesFile   = "local-packages.sources"
	ConfigMapFile = "gpu-operator-repo-configmap.yaml"
	ValuesFile    = "gpu-operator-values.yaml"
	// NVIDIADriverFile selects the ConfigMap through the NVIDIADriver
	// resource (repoConfig.name), which the operator reads only with the
	// chart's driver.nvidiaDriverCRD.enabled=true (default false). It is
	// written only with a driver version.
	NVIDIADriverFile = "gpu-operator-nvidiadriver.yaml"
	KeyFile          = "keyring.asc"
	ManifestFile     = "manifest.json"
	// The module signing certificate: DER for mokutil --import, and PEM.
	ModuleCertDERFile = "module-signing.der"
	ModuleCertPEMFile = "module-signing.pem"
)

// DefaultConfigMap names the GPU Operator's repository ConfigMap and the
// NVIDIADriver that selects it.
const DefaultConfigMap = "podvm-local-packages"

// Manifest records everything the build put in the image. It is written
// into the repository directory in the image and into the output directory.
type Manifest struct {
	SchemaVersion int      `json:"schema_version"`
	Generator     string   `json:"generator"`
	Created       string   `json:"created"` // RFC 3339, from SOURCE_DATE_EPOCH when set
	Target        Target   `json:"target"`
	Kernels       []string `json:"kernels"`
	// Held are the installed packages apt-mark holds (hold_packages): the
	// kernels and, with the GPU stack, the driver and the toolkit.
	Held []string `json:"held,omitempty"`
	GPU  *GPU     `json:"gpu,omitempty"`
	Repo *Repo    `json:"repo,omitempty"`
}

// ModuleSigning records the signer every NVIDIA module carries and the
// certificate to enroll; never a private key, which no build keeps.
type ModuleSigning struct {
	Mode       settings.SigningMode `json:"mode"`                  // ephemeral, key, none or distribution
	Signer     string               `json:"signer,omitempty"`      // modinfo's signer
	CertSHA256 string               `json:"cert_sha256,omitempty"` // of the DER certificate
	// Modules are the signed modules, each as modinfo read it after
	// signing.
	Modules []ModuleSignature `json:"modules,omitempty"`
}

// ModuleSignature is one signed module of one kernel.
type ModuleSignature struct {
	Kernel   string `json:"kernel"`
	File     string `json:"file"`
	Signer   string `json:"signer"`
	SigKey   string `json:"sig_key"` // the signing key's id (the certificate's serial)
	HashAlgo string `json:"sig_hashalgo"`
}

// CertSHA256 is the fingerprint the manifest records for a DER
// certificate.
func CertSHA256(der []byte) string {
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:])
}

// Target identifies the image.
type Target struct {
	Distro   string `json:"distro"`
	Version  string `json:"version"`
	Codename string `json:"codename"`
	Arch     string `json:"arch"`
}

// GPU is the installed GPU stack.
type GPU struct {
	DriverBranch  string `json:"driver_branch"`
	DriverVersion string `json:"driver_version,omitempty"` // installed version, when known
	Flavour       string `json:"kernel_modules"`
	Source        string `json:"driver_source"`
	// SourceTaken is what driver_source=auto took in the image:
	// precompiled or distro.
	SourceTaken string   `json:"driver_source_taken,omitempty"`
	Modules     []string `json:"modules"`
	// ModuleSigning is how the NVIDIA modules are signed.
	ModuleSigning  *ModuleSigning `json:"module_signing,omitempty"`
	Toolkit        bool           `json:"container_toolkit"`
	ToolkitVersion string         `json:"container_toolkit_version,omitempty"`
	HookMode       string         `json:"hook_mode,omitempty"`
	Packages       []Package      `json:"packages,omitempty"` // installed NVIDIA packages
}

// Repo is the baked node-local repository.
type Repo struct {
	Path        string    `json:"path"`
	Keyring     string    `json:"keyring"`
	Fingerprint string    `json:"fingerprint"`
	Packages    []Package `json:"packages"`
}

// Package is one package, installed or baked.
type Package struct {
	Name     string `json:"name"`
	Version  string `json:"version"`
	Arch     string `json:"arch,omitempty"`
	Filename string `json:"filename,omitempty"`
	Size     int64  `json:"size,omitempty"`
	SHA256   string `json:"sha256,omitempty"`
}

// JSON renders the manifest as indented JSON with a final newline.
func (m Manifest) JSON() ([]byte, error) {
	if m.SchemaVersion == 0 {
		m.SchemaVersion = 1
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode manifest: %w", err)
	}
	return append(b, '\n'), nil
}

// Stamp sets Created from t, in UTC.
func (m *Manifest) Stamp(t time.Time) { m.Created = t.UTC().Format(time.RFC3339) }

// NewRepo is the manifest's section for a repository at path, signed by
// fingerprint, that aptrepo indexed with pkgs.
func NewRepo(path, keyring, fingerprint string, pkgs []aptrepo.Package) *Repo {
	r := &Repo{Path: path, Keyring: keyring, Fingerprint: fingerprint}
	for _, p := range pkgs {
		r.Packages = append(r.Packages, Package{
			Name: p.Name, Version: p.Version, Arch: p.Architecture,
			Filename: p.Filename, Size: p.Size, SHA256: p.SHA256,
		})
	}
	return r
}

// Sources is the deb822 entry for a flat repository at repoPath. signedBy is
// a keyring path or an armored key block, which is inlined (apt has read
// embedded keys in Signed-By since 2.3.10).
// Flat repositories take "Suites: ./" and no Components line: apt rejects
// a flat entry that has one.
func Sources(repoPath, signedBy string) string {
	return aptsource.Source{URIs: []string{"file://" + repoPath}, Suites: []string{"./"}, SignedBy: signedBy}.Deb822()
}

// ConfigMap is the GPU Operator driver.repoConfig ConfigMap. The operator
// mounts each key read-only into the driver container's
// /etc/apt/sources.list.d/, so the key inlined in Signed-By travels with it.
func ConfigMap(name, namespace, repoPath string, armoredKey []byte) ([]byte, error) {
	cm := map[string]any{
		"apiVersion": "v1",
		"kind":       "ConfigMap",
		"metadata": map[string]any{
			"name":      name,
			"namespace": namespace,
			"labels":    map[string]string{"app.kubernetes.io/managed-by": "packer-plugin-podvm"},
		},
		"data": map[string]string{SourcesFile: Sources(repoPath, string(armoredKey))},
	}
	return marshalYAML(cm)
}

// HelmValues is the gpu-operator chart values snippet (ClusterPolicy) that
// selects the ConfigMap. It keeps nvidiaDriverCRD.enabled false, the
// chart's default, so the ClusterPolicy manages the driver; it names the
// driver container of op, and pins its version where op has one.
func HelmValues(configMap string, op gpustack.GPUOperator) ([]byte, error) {
	driver := map[string]any{
		"nvidiaDriverCRD": map[string]any{"enabled": false},
		"repoConfig":      map[string]any{"configMapName": configMap},
		"image":           op.Image,
	}
	if op.Repository != "" {
		driver["repository"] = op.Repository
	}
	if op.Version != "" {
		driver["version"] = op.Version
	}
	b, err := marshalYAML(map[string]any{"driver": driver})
	if err != nil {
		return nil, err
	}
	var head strings.Builder
	head.WriteString("# gpu-operator Helm values (ClusterPolicy): the driver container installs\n" +
		"# kernel headers from the node-local repository, which the image binds\n" +
		"# read-only below /run/nvidia, the host directory the driver DaemonSet\n" +
		"# mounts already. Install the chart into namespace " + op.Namespace + " (helm -n),\n" +
		"# where " + ConfigMapFile + " puts the ConfigMap. See docs/gpu-operator.md.\n")
	if op.Repository == "" {
		head.WriteString("# driver.repository is the chart's: gpu_operator_driver_repository was not set.\n")
	}
	if op.Version == "" {
		head.WriteString("# driver.version is the chart's: gpu_operator_driver_version was not set.\n")
	}
	if op.Repository == "" || op.Version == "" {
		head.WriteString("# So no " + NVIDIADriverFile + " was written: it needs both.\n")
	}
	return append([]byte(head.String()), b...), nil
}

// NVIDIADriver is an NVIDIADriver resource (nvidia.com/v1alpha1, cluster
// scoped) whose repoConfig names the ConfigMap and whose driver container
// is op's. Without a version the operator would pull an image path with no
// tag, so op without one is refused: such a resource is never written.
// Its fields follow the CRD in NVIDIA/gpu-operator's
// config/crd/bases/nvidia.com_nvidiadrivers.yaml at a22dbf67 (required:
// default, driverType, image; driverType one of gpu|vgpu|vgpu-host-manager;
// repository, image and version all set or the operator refuses them),
// which bake's tests check.
func NVIDIADriver(configMap string, op gpustack.GPUOperator) ([]byte, error) {
	if op.Version == "" || op.Repository == "" || op.Image == "" {
		return nil, fmt.Errorf("NVIDIADriver: repository %q, image %q and version %q must all be set (gpu_operator_driver_*)", op.Repository, op.Image, op.Version)
	}
	d := map[string]any{
		"apiVersion": "nvidia.com/v1alpha1",
		"kind":       "NVIDIADriver",
		"metadata": map[string]any{
			"name":   DefaultConfigMap,
			"labels": map[string]string{"app.kubernetes.io/managed-by": "packer-plugin-podvm"},
		},
		"spec": map[string]any{
			// Not the fallback: the chart's own default NVIDIADriver
			// keeps serving the nodes this one does not select.
			"default":    false,
			"driverType": "gpu",
			"repository": op.Repository,
			"image":      op.Image,
			"version":    op.Version,
			"repoConfig": map[string]any{"name": configMap},
		},
	}
	b, err := marshalYAML(d)
	if err != nil {
		return nil, err
	}
	head := "# An NVIDIADriver whose driver container installs kernel headers from the\n" +
		"# node-local repository (ConfigMap " + configMap + " in namespace " + op.Namespace + ").\n" +
		"# The operator reads it only when installed with\n" +
		"# driver.nvidiaDriverCRD.enabled=true (the chart's default is false, and\n" +
		"# " + ValuesFile + " keeps it so). Its driver pods pull\n" +
		"# " + op.Repository + "/" + op.Image + ":" + op.Version + "-<ID><VERSION_ID> of the node, such as\n" +
		"# " + op.Repository + "/" + op.Image + ":" + op.Version + "-ubuntu24.04. Without a nodeSelector it\n" +
		"# takes every GPU node; add one when nodes of other images need their own.\n" +
		"# See docs/gpu-operator.md.\n"
	return append([]byte(head), b...), nil
}

func marshalYAML(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("encode yaml: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("encode yaml: %w", err)
	}
	return buf.Bytes(), nil
}

// Set is everything Write needs.
type Set struct {
	RepoPath string // the repository directory in the image
	// ExposePath is where the image binds the repository for the GPU
	// Operator's driver container; the ConfigMap points there ("": at
	// RepoPath).
	ExposePath  string
	KeyringPath string // the public keyring in the image
	ArmoredKey  []byte // the repository's public key, armored
	Manifest    Manifest
	ConfigMap   string // defaults to DefaultConfigMap
	// Operator is the GPU Operator the objects are for; empty fields take
	// the settings' defaults. Without a Version no NVIDIADriver is written.
	Operator gpustack.GPUOperator
	// ModuleCert is the module signing certificate (DER), nil for none.
	ModuleCert []byte
	// SBOM is the image's bill of materials (sbom.File); nil for none.
	SBOM []byte
	// Sign makes a detached signature with the repository's key; the
	// manifest and the SBOM get one each (SignatureSuffix), made over the
	// very bytes written. nil: no signatures, and stale ones are removed.
	Sign func([]byte) ([]byte, error)
}

// SignatureSuffix names a record file's detached, armored signature.
const SignatureSuffix = ".asc"

// Write writes every artifact into dir (created 0755 if missing), each file
// 0644 and replaced atomically, and returns their paths in a stable order.
func Write(dir string, s Set) ([]string, error) {
	if s.ConfigMap == "" {
		s.ConfigMap = DefaultConfigMap
	}
	op := &s.Operator
	for _, d := range []struct {
		v   *string
		def string
	}{
		{&op.Namespace, settings.DefaultOperatorNamespace},
		{&op.Image, settings.DefaultOperatorDriverImage},
	} {
		if *d.v == "" {
			*d.v = d.def
		}
	}
	consumer := s.RepoPath
	if s.ExposePath != "" {
		consumer = s.ExposePath
	}
	cm, err := ConfigMap(s.ConfigMap, op.Namespace, consumer, s.ArmoredKey)
	if err != nil {
		return nil, err
	}
	values, err := HelmValues(s.ConfigMap, *op)
	if err != nil {
		return nil, err
	}
	manifest, err := s.Manifest.JSON()
	if err != nil {
		return nil, err
	}
	type namedFile struct {
		name string
		data []byte
	}
	files := []namedFile{
		{SourcesFile, []byte(Sources(consumer, s.KeyringPath))},
		{ConfigMapFile, cm},
		{ValuesFile, values},
		{KeyFile, s.ArmoredKey},
		{ManifestFile, manifest},
	}
	// A resource that names no image tag, or only part of its image, would
	// fail on every node, so none is written without a version and a
	// repository; the build's warning and the values' header say so.
	if op.Version != "" && op.Repository != "" {
		driver, err := NVIDIADriver(s.ConfigMap, *op)
		if err != nil {
			return nil, err
		}
		files = append(files, namedFile{NVIDIADriverFile, driver})
	}
	if s.ModuleCert != nil {
		if _, err := x509.ParseCertificate(s.ModuleCert); err != nil {
			return nil, fmt.Errorf("module signing certificate: %w", err)
		}
		pemCert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.ModuleCert})
		files = append(files, namedFile{ModuleCertDERFile, s.ModuleCert}, namedFile{ModuleCertPEMFile, pemCert})
	}
	if s.SBOM != nil {
		files = append(files, namedFile{sbom.File, s.SBOM})
	}
	record := []string{ManifestFile, sbom.File}
	for _, f := range files {
		if !slices.Contains(record, f.name) {
			continue
		}
		sig, err := detachedSignature(dir, f.name, f.data, s.Sign)
		if err != nil {
			return nil, err
		}
		if sig != nil {
			files = append(files, namedFile{f.name + SignatureSuffix, sig})
		}
	}
	var paths []string
	for _, f := range files {
		p := filepath.Join(dir, f.name)
		if err := WriteFile(p, f.data); err != nil {
			return nil, fmt.Errorf("write artifacts: %w", err)
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// detachedSignature signs data, the content of dir's file name, with
// sign. A nil sign returns no signature and removes one an earlier build
// left, as it would no longer match.
func detachedSignature(dir, name string, data []byte, sign func([]byte) ([]byte, error)) ([]byte, error) {
	if sign == nil {
		if err := os.Remove(filepath.Join(dir, name+SignatureSuffix)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("write artifacts: %w", err)
		}
		return nil, nil
	}
	sig, err := sign(data)
	if err != nil {
		return nil, fmt.Errorf("signing %s: %w", name, err)
	}
	return sig, nil
}

// WriteFile writes data to path as a root-readable 0644 file, creating the
// directory (0755) if needed. It writes a temporary file beside path and
// renames it, so readers see the old file or the new one, and a failure
// leaves no temporary file behind.
func WriteFile(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // no-op after a successful rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
