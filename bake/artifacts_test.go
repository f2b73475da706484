package bake

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podvm-gpu/packer-plugin-podvm/aptrepo"

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
	dir := filepath.Join(t.TempDir(), "out")
	m := Manifest{Generator: "test", Created: "2023-11-14T22:13:20Z", Kernels: []string{"6.12.57+deb13-amd64"},
		Repo: &Repo{Path: "/opt/local-packages", Fingerprint: "ABCD", Packages: []Package{{Name: "linux-headers-6.12.57+deb13-amd64", Version: "6.12.57-1"}}}}
	paths, err := Write(dir, Set{RepoPath: "/opt/local-packages", ExposePath: "/run/nvidia/local-packages",
		KeyringPath: "/usr/share/keyrings/k.gpg", ArmoredKey: []byte(testKey), Manifest: m})
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 6 {
		t.Fatalf("wrote %d files, want 6: %v", len(paths), paths)
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
	if len(entries) != 6 {
		t.Errorf("output dir has %d entries, want 6 (no temp files left)", len(entries))
	}

	var cm struct {
		Kind     string
		Metadata struct{ Name, Namespace string }
		Data     map[string]string
	}
	readYAML(t, filepath.Join(dir, ConfigMapFile), &cm)
	if cm.Kind != "ConfigMap" || cm.Metadata.Name != DefaultConfigMap || cm.Metadata.Namespace != DefaultNamespace {
		t.Errorf("configmap header: %+v", cm)
	}
	src := cm.Data[SourcesFile]
	// The driver container sees the repository where the image binds it.
	for _, want := range []string{"URIs: file:///run/nvidia/local-packages\n", "Suites: ./\n", "Signed-By:\n -----BEGIN PGP PUBLIC KEY BLOCK-----\n"} {
		if !strings.Contains(src, want) {
			t.Errorf("configmap sources lacks %q:\n%s", want, src)
		}
	}
	if strings.Contains(src, "Components") {
		t.Error("configmap sources has Components")
	}

	var values struct {
		Driver struct {
			RepoConfig struct {
				ConfigMapName string `yaml:"configMapName"`
			} `yaml:"repoConfig"`
		}
	}
	readYAML(t, filepath.Join(dir, ValuesFile), &values)
	if values.Driver.RepoConfig.ConfigMapName != DefaultConfigMap {
		t.Errorf("values: %+v", values)
	}
	checkNVIDIADriver(t, filepath.Join(dir, NVIDIADriverFile))

	var got Manifest
	b, _ := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.SchemaVersion != 1 || got.Repo.Packages[0].Name != "linux-headers-6.12.57+deb13-amd64" {
		t.Errorf("manifest: %+v", got)
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

// checkNVIDIADriver is the structural test of the NVIDIADriver resource
// against the v1alpha1 CRD of NVIDIA/gpu-operator (config/crd/bases,
// commit 04744073): cluster scoped, spec.driverType from its enum,
// spec.repoConfig.name naming the ConfigMap, and no field the CRD lacks.
func checkNVIDIADriver(t *testing.T, path string) {
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
	if meta["name"] == nil || meta["namespace"] != nil {
		t.Errorf("NVIDIADriver metadata %v: a name, and no namespace (cluster scoped)", meta)
	}
	spec, _ := d["spec"].(map[string]any)
	specFields := map[string]bool{"driverType": true, "repoConfig": true}
	for k := range spec {
		if !specFields[k] {
			t.Errorf("NVIDIADriver: spec.%s is not written by this tool", k)
		}
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
}
