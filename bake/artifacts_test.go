package bake

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/podvm-gpu/packer-plugin-podvm/aptrepo"
	"github.com/podvm-gpu/packer-plugin-podvm/gpustack"
	"github.com/podvm-gpu/packer-plugin-podvm/sbom"

	"gopkg.in/yaml.v3"
)

const testKey = "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nmDMEZfakeKEYdata\n=abcd\n-----END PGP PUBLIC KEY BLOCK-----\n"

func TestSources(t *testing.T) {
	tests := []struct {
		name, signedBy string
		want           string
	}{
		{"keyring path", "/usr/share/keyrings/podvm-local-packages.gpg",
			"Types: deb\nURIs: file:///opt/local-packages\nSuites: ./\nSigned-By: /usr/share/keyrings/podvm-local-packages.gpg\n"},
		{"inline key", testKey,
			"Types: deb\nURIs: file:///opt/local-packages\nSuites: ./\nSigned-By:\n -----BEGIN PGP PUBLIC KEY BLOCK-----\n .\n mDMEZfakeKEYdata\n =abcd\n -----END PGP PUBLIC KEY BLOCK-----\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Sources("/opt/local-packages", tt.signedBy)
			if got != tt.want {
				t.Errorf("got\n%s\nwant\n%s", got, tt.want)
			}
			if strings.Contains(got, "Components:") {
				t.Error("a flat repository entry must not have Components")
			}
		})
	}
}

func TestWrite(t *testing.T) {
	tests := []struct {
		name string
		op   gpustack.GPUOperator
		// wantNS is the ConfigMap's namespace.
		wantNS string
		// wantImage is the image the operator pulls on an Ubuntu 24.04
		// node; "" where no NVIDIADriver may be written.
		wantImage string
	}{
		{"no version: no NVIDIADriver", gpustack.GPUOperator{}, "gpu-operator", ""},
		{"a version, no repository: no NVIDIADriver", gpustack.GPUOperator{Version: "595.91.07"}, "gpu-operator", ""},
		{"the default image, a repository and a version", gpustack.GPUOperator{Repository: "registry.example/nvidia", Version: "595.91.07"}, "gpu-operator",
			"registry.example/nvidia/driver:595.91.07-ubuntu24.04"},
		{"OpenShift namespace, a mirror", gpustack.GPUOperator{Namespace: "nvidia-gpu-operator",
			Repository: "mirror.example:5000/nvidia", Image: "driver", Version: "570.172.08"},
			"nvidia-gpu-operator", "mirror.example:5000/nvidia/driver:570.172.08-ubuntu24.04"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "out")
			m := Manifest{Generator: "test", Created: "2023-11-14T22:13:20Z", Kernels: []string{"6.12.57+deb13-amd64"},
				Repo: &Repo{Path: "/opt/local-packages", Fingerprint: "ABCD", Packages: []Package{{Name: "linux-headers-6.12.57+deb13-amd64", Version: "6.12.57-1"}}}}
			paths, err := Write(dir, Set{RepoPath: "/opt/local-packages", ExposePath: "/run/nvidia/local-packages",
				KeyringPath: "/usr/share/keyrings/k.gpg", ArmoredKey: []byte(testKey), Manifest: m, Operator: tt.op})
			if err != nil {
				t.Fatal(err)
			}
			want := 5 // sources, ConfigMap, values, key, manifest
			if tt.wantImage != "" {
				want++
			}
			if len(paths) != want {
				t.Fatalf("wrote %d files, want %d: %v", len(paths), want, paths)
			}
			for _, p := range paths {
				fi, err := os.Stat(p)
				if err != nil {
					t.Fatal(err)
				}
				if fi.Mode().Perm() != 0o644 {
					t.Errorf("%s: mode %o, want 644", p, fi.Mode().Perm())
				}
			}
			entries, _ := os.ReadDir(dir)
			if len(entries) != want {
				t.Errorf("output dir has %d entries, want %d (no temp files left)", len(entries), want)
			}
			_, err = os.Stat(filepath.Join(dir, NVIDIADriverFile))
			if tt.wantImage == "" && !os.IsNotExist(err) {
				t.Errorf("%s written without a driver version (stat: %v)", NVIDIADriverFile, err)
			}

			checkConfigMap(t, filepath.Join(dir, ConfigMapFile), tt.wantNS)
			checkValues(t, filepath.Join(dir, ValuesFile), tt.op.Repository, tt.op.Version)
			if tt.wantImage != "" {
				if got := checkNVIDIADriver(t, filepath.Join(dir, NVIDIADriverFile), "ubuntu24.04"); got != tt.wantImage {
					t.Errorf("NVIDIADriver names image %q, want %q", got, tt.wantImage)
				}
			}

			var got Manifest
			b, _ := os.ReadFile(filepath.Join(dir, ManifestFile))
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			if got.SchemaVersion != 1 || got.Repo.Packages[0].Name != "linux-headers-6.12.57+deb13-amd64" {
				t.Errorf("manifest: %+v", got)
			}
		})
	}
}

// TestNVIDIADriverNeedsVersion checks that no resource is made that names
// no image tag.
func TestNVIDIADriverNeedsVersion(t *testing.T) {
	for _, op := range []gpustack.GPUOperator{
		{Namespace: "gpu-operator", Repository: "registry.example/nvidia", Image: "driver"},
		{Namespace: "gpu-operator", Image: "driver", Version: "595.91.07"},
		{Namespace: "gpu-operator", Repository: "registry.example/nvidia", Version: "595.91.07"},
	} {
		if b, err := NVIDIADriver(DefaultConfigMap, op); err == nil {
			t.Errorf("%+v: want an error, got\n%s", op, b)
		}
	}
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func TestNewRepo(t *testing.T) {
	r := NewRepo("/opt/r", "/k.gpg", "FP", []aptrepo.Package{{Name: "a", Version: "1", Architecture: "all", Filename: "a_1_all.deb", Size: 3, SHA256: "ab"}})
	want := Package{Name: "a", Version: "1", Arch: "all", Filename: "a_1_all.deb", Size: 3, SHA256: "ab"}
	if r.Path != "/opt/r" || r.Keyring != "/k.gpg" || r.Fingerprint != "FP" || len(r.Packages) != 1 || r.Packages[0] != want {
		t.Errorf("%+v", r)
	}
}

// TestWriteFileLeavesNoTemp checks that a failed write removes its
// temporary file: here the rename fails, as the target is a non-empty
// directory.
func TestWriteFileLeavesNoTemp(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "keyring.gpg")
	if err := os.MkdirAll(filepath.Join(target, "busy"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(target, []byte("x")); err == nil {
		t.Fatal("writing over a non-empty directory: want an error")
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".keyring.gpg.*")); len(left) > 0 {
		t.Errorf("temporary file left behind: %v", left)
	}
	ok := filepath.Join(dir, "sub", "ok")
	if err := WriteFile(ok, []byte("y")); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(ok); err != nil || string(data) != "y" {
		t.Errorf("ok: %q %v", data, err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "sub", ".ok.*")); len(left) > 0 {
		t.Errorf("temporary file left behind after success: %v", left)
	}
}

// The Kubernetes and operator rules the objects are checked against. The
// NVIDIADriver's come from its CRD (NVIDIA/gpu-operator
// config/crd/bases/nvidia.com_nvidiadrivers.yaml at a22dbf67: scope
// Cluster; spec.required default, driverType, image; driverType enum
// gpu|vgpu|vgpu-host-manager; kernelModuleType enum auto|open|proprietary;
// a default NVIDIADriver has no nodeSelector) and from how the operator
// joins the image (api/nvidia/v1alpha1 GetImagePath and internal/image
// ImagePath at the same commit: repository, image and version all set,
// then <repository>/<image>:<version>-<os>). The chart's values are
// deployments/gpu-operator/values.yaml at a22dbf67.
var (
	// A ConfigMap's name is a DNS subdomain, its namespace a DNS label,
	// its keys file names of [-._a-zA-Z0-9].
	dnsSubdomainRe = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	dnsLabelRe     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	configKeyRe    = regexp.MustCompile(`^[-._a-zA-Z0-9]+$`)
	// An image reference with a tag, as a registry accepts it: lowercase
	// path components, the first a host with an optional port; a tag of
	// at most 128 word characters, dots and dashes.
	imageRefRe = regexp.MustCompile(`^[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)+:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)
)

func checkConfigMap(t *testing.T, path, wantNS string) {
	t.Helper()
	var cm struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string
		Metadata   struct{ Name, Namespace string }
		Data       map[string]string
	}
	readYAML(t, path, &cm)
	if cm.APIVersion != "v1" || cm.Kind != "ConfigMap" {
		t.Errorf("ConfigMap header: %s %s", cm.APIVersion, cm.Kind)
	}
	if cm.Metadata.Name != DefaultConfigMap || !dnsSubdomainRe.MatchString(cm.Metadata.Name) || len(cm.Metadata.Name) > 253 {
		t.Errorf("ConfigMap name %q", cm.Metadata.Name)
	}
	// The driver pods mount the ConfigMap, so it must be in their
	// namespace, the operator's.
	if cm.Metadata.Namespace != wantNS || !dnsLabelRe.MatchString(cm.Metadata.Namespace) {
		t.Errorf("ConfigMap namespace %q, want %q", cm.Metadata.Namespace, wantNS)
	}
	for k := range cm.Data {
		if !configKeyRe.MatchString(k) {
			t.Errorf("ConfigMap key %q", k)
		}
	}
	src := cm.Data[SourcesFile]
	// The driver container sees the repository where the image binds it.
	for _, want := range []string{"URIs: file:///run/nvidia/local-packages\n", "Suites: ./\n", "Signed-By:\n -----BEGIN PGP PUBLIC KEY BLOCK-----\n"} {
		if !strings.Contains(src, want) {
			t.Errorf("ConfigMap sources lack %q:\n%s", want, src)
		}
	}
	if strings.Contains(src, "Components") {
		t.Error("ConfigMap sources have Components")
	}
}

// checkValues checks the Helm values against the chart's keys and types:
// the ClusterPolicy keeps the driver (nvidiaDriverCRD.enabled false), the
// repository is selected by configMapName, and the version is pinned only
// when given.
func checkValues(t *testing.T, path, repository, version string) {
	t.Helper()
	var v map[string]map[string]any
	readYAML(t, path, &v)
	d := v["driver"]
	known := map[string]bool{"nvidiaDriverCRD": true, "repoConfig": true, "repository": true, "image": true, "version": true}
	for k := range d {
		if !known[k] {
			t.Errorf("values: driver.%s is not written by this tool", k)
		}
	}
	if crd, _ := d["nvidiaDriverCRD"].(map[string]any); len(crd) != 1 || crd["enabled"] != false {
		t.Errorf("values: driver.nvidiaDriverCRD %v, want {enabled: false}", d["nvidiaDriverCRD"])
	}
	if rc, _ := d["repoConfig"].(map[string]any); len(rc) != 1 || rc["configMapName"] != DefaultConfigMap {
		t.Errorf("values: driver.repoConfig %v, want {configMapName: %s}", d["repoConfig"], DefaultConfigMap)
	}
	if got, _ := d["version"].(string); got != version {
		t.Errorf("values: driver.version %v, want %q", d["version"], version)
	}
	if got, _ := d["repository"].(string); got != repository {
		t.Errorf("values: driver.repository %v, want %q (none: the chart's)", d["repository"], repository)
	}
	if s, ok := d["image"].(string); !ok || s == "" {
		t.Errorf("values: driver.image %v, want a string", d["image"])
	}
}

// checkNVIDIADriver checks the NVIDIADriver against the CRD's rules and
// returns the image the operator would pull on a node whose os-release
// makes osTag (ubuntu24.04).
func checkNVIDIADriver(t *testing.T, path, osTag string) string {
	t.Helper()
	var d map[string]any
	readYAML(t, path, &d)
	known := map[string]bool{"apiVersion": true, "kind": true, "metadata": true, "spec": true}
	for k := range d {
		if !known[k] {
			t.Errorf("NVIDIADriver: unknown top-level field %q", k)
		}
	}
	if d["apiVersion"] != "nvidia.com/v1alpha1" || d["kind"] != "NVIDIADriver" {
		t.Errorf("NVIDIADriver header: %v %v", d["apiVersion"], d["kind"])
	}
	meta, _ := d["metadata"].(map[string]any)
	if name, _ := meta["name"].(string); !dnsSubdomainRe.MatchString(name) || meta["namespace"] != nil {
		t.Errorf("NVIDIADriver metadata %v: a name, and no namespace (cluster scoped)", meta)
	}
	spec, _ := d["spec"].(map[string]any)
	specFields := map[string]bool{"default": true, "driverType": true, "repository": true, "image": true, "version": true, "repoConfig": true}
	for k := range spec {
		if !specFields[k] {
			t.Errorf("NVIDIADriver: spec.%s is not written by this tool", k)
		}
	}
	for _, k := range []string{"default", "driverType", "image"} {
		if _, ok := spec[k]; !ok {
			t.Errorf("NVIDIADriver: spec.%s is required", k)
		}
	}
	if def, ok := spec["default"].(bool); !ok || def && spec["nodeSelector"] != nil {
		t.Errorf("spec.default %v: a bool, and no nodeSelector on a default", spec["default"])
	}
	switch spec["driverType"] {
	case "gpu", "vgpu", "vgpu-host-manager":
	default:
		t.Errorf("spec.driverType %v", spec["driverType"])
	}
	rc, _ := spec["repoConfig"].(map[string]any)
	if len(rc) != 1 || rc["name"] != DefaultConfigMap {
		t.Errorf("spec.repoConfig %v, want {name: %s}", rc, DefaultConfigMap)
	}
	repo, _ := spec["repository"].(string)
	img, _ := spec["image"].(string)
	ver, _ := spec["version"].(string)
	if repo == "" || img == "" || ver == "" {
		t.Fatalf("spec repository %q, image %q, version %q: the operator needs all three", repo, img, ver)
	}
	ref := repo + "/" + img + ":" + ver + "-" + osTag
	if !imageRefRe.MatchString(ref) {
		t.Errorf("the operator would pull %q, not an image reference", ref)
	}
	return ref
}

// TestWriteSignatures: each record file gets a signature over exactly the
// bytes written; a build that cannot sign removes the signatures an
// earlier build left, which would no longer match.
func TestWriteSignatures(t *testing.T) {
	dir := t.TempDir()
	signed := map[string][]byte{}
	sign := func(b []byte) ([]byte, error) {
		sig := []byte(fmt.Sprintf("sig of %d bytes\n", len(b)))
		signed[string(sig)] = b
		return sig, nil
	}
	set := Set{RepoPath: "/opt/local-packages", ArmoredKey: []byte("key\n"), Manifest: Manifest{SchemaVersion: 1}, SBOM: []byte("{}\n"), Sign: sign}
	if _, err := Write(dir, set); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{ManifestFile, sbom.File} {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		sig, err := os.ReadFile(filepath.Join(dir, f+SignatureSuffix))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(signed[string(sig)], data) {
			t.Errorf("%s%s is not over the bytes of %s", f, SignatureSuffix, f)
		}
	}
	set.Sign = nil
	if _, err := Write(dir, set); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{ManifestFile, sbom.File} {
		if _, err := os.Stat(filepath.Join(dir, f+SignatureSuffix)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s%s left by the earlier build: %v", f, SignatureSuffix, err)
		}
	}
	set.Sign = func([]byte) ([]byte, error) { return nil, errors.New("key gone") }
	if _, err := Write(dir, set); err == nil || !strings.Contains(err.Error(), "signing manifest.json: key gone") {
		t.Errorf("Write with a failing signer: %v", err)
	}
}
