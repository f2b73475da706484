// Package example_test checks the Kubernetes manifests shipped in
// example/k8s and the GPU Operator files bake.Write emits: each is
// parsed as YAML and the fields a user's cluster depends on are checked.
package example_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/podvm-gpu/packer-plugin-podvm/aptrepo"
	"github.com/podvm-gpu/packer-plugin-podvm/bake"
	"github.com/podvm-gpu/packer-plugin-podvm/example"
	"github.com/podvm-gpu/packer-plugin-podvm/settings"
)

const (
	machineTypeAnnotation = "io.katacontainers.config.hypervisor.machine_type"
	repoPath              = "/opt/local-packages"
)

// doc is one YAML document and the file it came from.
type doc struct {
	file string
	obj  map[string]any
}

// readDocs parses every document of a YAML file; a syntax error fails the
// test.
func readDocs(t *testing.T, path string) []doc {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []doc
	for {
		var obj map[string]any
		err := dec.Decode(&obj)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if obj != nil {
			docs = append(docs, doc{path, obj})
		}
	}
	if len(docs) == 0 {
		t.Fatalf("%s: no YAML document", path)
	}
	return docs
}

// get walks keys (string keys and int indexes) through maps and lists.
func get(v any, keys ...any) any {
	for _, k := range keys {
		switch k := k.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func list(v any) []any { l, _ := v.([]any); return l }

// k8sFiles is every YAML file under example/k8s.
func k8sFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir("k8s", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && (strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml")) {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no manifests under example/k8s")
	}
	return files
}

// TestManifestsParse parses every YAML file under example/k8s.
func TestManifestsParse(t *testing.T) {
	for _, f := range k8sFiles(t) {
		readDocs(t, f)
	}
}

// TestVerifyJobs checks the GPU verification jobs: kata-remote runtime
// class, one nvidia.com/gpu, an image placeholder that names no registry
// host, and none of the NVIDIA env a prestart hook reads: in peer pods no
// hook runs and the GPU comes through CDI, so a job relying on that env
// would test nothing. One job must check /dev/nvidia-uvm, which CUDA needs
// and nvidia-smi does not.
func TestVerifyJobs(t *testing.T) {
	base := filepath.Join("k8s", "verify", "base")
	kust := readDocs(t, filepath.Join(base, "kustomization.yaml"))[0].obj
	resources := list(kust["resources"])
	if len(resources) < 2 {
		t.Fatalf("%s: want the nvidia-smi and vectorAdd jobs, got resources %v", base, resources)
	}
	uvmChecked := false
	for _, r := range resources {
		name, _ := r.(string)
		for _, d := range readDocs(t, filepath.Join(base, name)) {
			if d.obj["kind"] != "Job" {
				t.Errorf("%s: kind %v, want Job", d.file, d.obj["kind"])
				continue
			}
			pod := get(d.obj, "spec", "template", "spec")
			if got := get(pod, "runtimeClassName"); got != "kata-remote" {
				t.Errorf("%s: runtimeClassName %v, want kata-remote", d.file, got)
			}
			if got := get(pod, "restartPolicy"); got != "Never" {
				t.Errorf("%s: restartPolicy %v, want Never", d.file, got)
			}
			containers := list(get(pod, "containers"))
			if len(containers) != 1 {
				t.Fatalf("%s: %d containers, want 1", d.file, len(containers))
			}
			c := containers[0]
			// A quantity: 1 or "1".
			if got := get(c, "resources", "limits", "nvidia.com/gpu"); got != 1 && got != "1" {
				t.Errorf("%s: limits nvidia.com/gpu = %v, want 1", d.file, got)
			}
			img, _ := get(c, "image").(string)
			if img == "" || strings.ContainsAny(img, "/:.") {
				t.Errorf("%s: image %q: want a bare placeholder name the user sets, no registry host", d.file, img)
			}
			for _, e := range list(get(c, "env")) {
				if name, _ := get(e, "name").(string); strings.HasPrefix(name, "NVIDIA_") {
					t.Errorf("%s: env %s: the jobs must not rely on the prestart hook's variables; the GPU comes through CDI", d.file, name)
				}
			}
			for _, a := range list(get(c, "args")) {
				if s, _ := a.(string); strings.Contains(s, "/dev/nvidia-uvm") {
					uvmChecked = true
				}
			}
		}
	}
	if !uvmChecked {
		t.Errorf("%s: no job checks /dev/nvidia-uvm in the container", base)
	}
}

// TestVerifyOverlays checks that each cloud overlay sets the peer-pods
// instance type annotation to a GPU instance type of that cloud.
func TestVerifyOverlays(t *testing.T) {
	want := map[string]func(string) bool{
		// g4dn, g5, g6, p3, p4d, p5 ... families carry NVIDIA GPUs.
		"aws": func(s string) bool { return strings.HasPrefix(s, "g") || strings.HasPrefix(s, "p") },
		// NC, ND and NV sizes carry NVIDIA GPUs.
		"azure": func(s string) bool {
			return strings.HasPrefix(s, "Standard_NC") || strings.HasPrefix(s, "Standard_ND") || strings.HasPrefix(s, "Standard_NV")
		},
	}
	for cloud, isGPU := range want {
		p := filepath.Join("k8s", "verify", cloud, "kustomization.yaml")
		k := readDocs(t, p)[0].obj
		if !slices.Contains(list(k["resources"]), any("../base")) {
			t.Errorf("%s: resources %v, want ../base", p, k["resources"])
		}
		mt, _ := get(k, "commonAnnotations", machineTypeAnnotation).(string)
		if !isGPU(mt) {
			t.Errorf("%s: %s = %q, want a GPU instance type", p, machineTypeAnnotation, mt)
		}
	}
}

// TestDriverRepoMountPatch checks the DaemonSet patch: the repository is
// mounted read-only into the driver container from a hostPath of type
// Directory (never DirectoryOrCreate) at the same path.
func TestDriverRepoMountPatch(t *testing.T) {
	p := filepath.Join("k8s", "gpu-operator", "driver-repo-mount-patch.yaml")
	d := readDocs(t, p)[0].obj
	pod := get(d, "spec", "template", "spec")
	var mount any
	for _, c := range list(get(pod, "containers")) {
		if get(c, "name") == "nvidia-driver-ctr" {
			mount = get(c, "volumeMounts", 0)
		}
	}
	if mount == nil {
		t.Fatalf("%s: no volumeMount for container nvidia-driver-ctr", p)
	}
	if get(mount, "readOnly") != true {
		t.Errorf("%s: mount readOnly = %v, want true", p, get(mount, "readOnly"))
	}
	if get(mount, "mountPath") != repoPath {
		t.Errorf("%s: mountPath = %v, want %s", p, get(mount, "mountPath"), repoPath)
	}
	vol := get(pod, "volumes", 0)
	if get(vol, "name") != get(mount, "name") {
		t.Errorf("%s: volume %v does not match mount %v", p, get(vol, "name"), get(mount, "name"))
	}
	if get(vol, "hostPath", "type") != "Directory" {
		t.Errorf("%s: hostPath type = %v, want Directory", p, get(vol, "hostPath", "type"))
	}
	if get(vol, "hostPath", "path") != repoPath {
		t.Errorf("%s: hostPath path = %v, want %s", p, get(vol, "hostPath", "path"), repoPath)
	}
}

// TestGPUOperatorConfigNames checks that the NVIDIADriver CR and the
// proposed Helm values name the ConfigMap bake.Write emits.
func TestGPUOperatorConfigNames(t *testing.T) {
	dir := filepath.Join("k8s", "gpu-operator")
	cr := readDocs(t, filepath.Join(dir, "nvidiadriver.yaml"))[0].obj
	if cr["kind"] != "NVIDIADriver" || get(cr, "spec", "repoConfig", "name") != bake.DefaultConfigMap {
		t.Errorf("nvidiadriver.yaml: kind %v repoConfig.name %v, want NVIDIADriver and %s",
			cr["kind"], get(cr, "spec", "repoConfig", "name"), bake.DefaultConfigMap)
	}
	// The operator joins repository, image and version into the image it
	// pulls; without all three it pulls an image that does not exist.
	for _, k := range []string{"repository", "image", "version"} {
		if s, _ := get(cr, "spec", k).(string); s == "" {
			t.Errorf("nvidiadriver.yaml: spec.%s is empty", k)
		}
	}
	if get(cr, "metadata", "name") != bake.DefaultConfigMap {
		t.Errorf("nvidiadriver.yaml: name %v, want %s, the name the build gives it", get(cr, "metadata", "name"), bake.DefaultConfigMap)
	}
	if get(cr, "spec", "usePrecompiled") != false {
		t.Errorf("nvidiadriver.yaml: usePrecompiled must be false: precompiled drivers ignore repoConfig")
	}
	v := readDocs(t, filepath.Join(dir, "values-node-local-paths.yaml"))[0].obj
	if get(v, "driver", "repoConfig", "configMapName") != bake.DefaultConfigMap {
		t.Errorf("values-node-local-paths.yaml: configMapName %v, want %s", get(v, "driver", "repoConfig", "configMapName"), bake.DefaultConfigMap)
	}
	if !slices.Contains(list(get(v, "driver", "repoConfig", "nodeLocalPaths")), any(repoPath)) {
		t.Errorf("values-node-local-paths.yaml: nodeLocalPaths %v, want %s", get(v, "driver", "repoConfig", "nodeLocalPaths"), repoPath)
	}
}

// deb822 parses one deb822 paragraph with aptrepo.ParseControl and
// unfolds each value: continuation lines joined with newlines, " ."
// standing for an empty line, an empty first line dropped.
func deb822(t *testing.T, s string) map[string]string {
	t.Helper()
	p, err := aptrepo.ParseControl([]byte(s))
	if err != nil {
		t.Fatalf("sources entry: %v\n%s", err, s)
	}
	fields := map[string]string{}
	for _, f := range p {
		lines := strings.Split(f.Value, "\n")
		for i, l := range lines {
			if l = strings.TrimSpace(l); i > 0 && l == "." {
				l = ""
			}
			lines[i] = l
		}
		if len(lines) > 1 && lines[0] == "" {
			lines = lines[1:]
		}
		fields[f.Name] = strings.Join(lines, "\n")
	}
	return fields
}

// checkFlatSource checks what apt needs of a flat file: repository entry.
func checkFlatSource(t *testing.T, where string, f map[string]string) {
	t.Helper()
	if f["Types"] != "deb" {
		t.Errorf("%s: Types %q, want deb", where, f["Types"])
	}
	if f["URIs"] != "file://"+repoPath {
		t.Errorf("%s: URIs %q, want file://%s", where, f["URIs"], repoPath)
	}
	if f["Suites"] != "./" {
		t.Errorf("%s: Suites %q, want ./", where, f["Suites"])
	}
	if _, ok := f["Components"]; ok {
		t.Errorf("%s: has Components: apt rejects it on a flat repository", where)
	}
}

// TestArtifacts writes the artifacts with a real key and checks the
// ConfigMap, the Helm values and the sources file.
func TestArtifacts(t *testing.T) {
	signer, err := aptrepo.NewEphemeralSigner("examples test", time.Unix(1700000000, 0))
	if err != nil {
		t.Fatal(err)
	}
	key := signer.ArmoredPublicKey()
	signer.Discard()
	dir := t.TempDir()
	const keyring = "/usr/share/keyrings/podvm-local-packages.gpg"
	if _, err := bake.Write(dir, bake.Set{
		RepoPath:    repoPath,
		KeyringPath: keyring,
		ArmoredKey:  key,
		Manifest:    bake.Manifest{Generator: "examples test", Kernels: []string{"6.8.0-1-generic"}},
	}); err != nil {
		t.Fatal(err)
	}

	// The ConfigMap: one sources entry whose Signed-By is the key itself,
	// since the driver container has no keyring file of ours.
	cm := readDocs(t, filepath.Join(dir, bake.ConfigMapFile))[0].obj
	if cm["apiVersion"] != "v1" || cm["kind"] != "ConfigMap" {
		t.Errorf("ConfigMap: apiVersion %v kind %v", cm["apiVersion"], cm["kind"])
	}
	if get(cm, "metadata", "name") != bake.DefaultConfigMap || get(cm, "metadata", "namespace") != settings.DefaultOperatorNamespace {
		t.Errorf("ConfigMap: name %v namespace %v", get(cm, "metadata", "name"), get(cm, "metadata", "namespace"))
	}
	data, _ := cm["data"].(map[string]any)
	if len(data) != 1 {
		t.Fatalf("ConfigMap: data has %d keys, want 1 (%s)", len(data), bake.SourcesFile)
	}
	src, _ := data[bake.SourcesFile].(string)
	if !strings.HasSuffix(bake.SourcesFile, ".sources") {
		t.Errorf("ConfigMap key %s: apt reads only *.sources as deb822", bake.SourcesFile)
	}
	f := deb822(t, src)
	checkFlatSource(t, "ConfigMap", f)
	wantKey := strings.TrimSpace(strings.ReplaceAll(string(key), "\r", ""))
	if f["Signed-By"] != wantKey {
		t.Errorf("ConfigMap: Signed-By is not the armored key inline:\n%s", f["Signed-By"])
	}
	if !strings.HasPrefix(f["Signed-By"], "-----BEGIN PGP PUBLIC KEY BLOCK-----") {
		t.Errorf("ConfigMap: Signed-By does not start with an armored key block")
	}

	// The Helm values select that ConfigMap.
	v := readDocs(t, filepath.Join(dir, bake.ValuesFile))[0].obj
	if got := get(v, "driver", "repoConfig", "configMapName"); got != bake.DefaultConfigMap {
		t.Errorf("Helm values: driver.repoConfig.configMapName = %v, want %s", got, bake.DefaultConfigMap)
	}

	// The sources file for the image itself points at the keyring file.
	b, err := os.ReadFile(filepath.Join(dir, bake.SourcesFile))
	if err != nil {
		t.Fatal(err)
	}
	f = deb822(t, string(b))
	checkFlatSource(t, bake.SourcesFile, f)
	if f["Signed-By"] != keyring {
		t.Errorf("%s: Signed-By %q, want %s", bake.SourcesFile, f["Signed-By"], keyring)
	}
}

// TestCloudProvisionerBlocksIdentical holds the AWS and Azure templates
// to one podvm-gpu block, byte for byte: the e2e rehearsal of the cloud
// path (test/e2e) runs the AWS one verbatim, so what it proves holds for
// both.
func TestCloudProvisionerBlocksIdentical(t *testing.T) {
	blocks := map[string]string{}
	for _, cloud := range []string{"aws", "azure"} {
		b, err := example.ProvisionerBlock(filepath.Join(cloud, "podvm.pkr.hcl"), "podvm-gpu")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b, `execute_command = "sudo -n sh -c {{.Command}}"`) {
			t.Errorf("%s: the podvm-gpu block does not run its commands with sudo -n:\n%s", cloud, b)
		}
		blocks[cloud] = b
	}
	if blocks["aws"] != blocks["azure"] {
		t.Errorf("the podvm-gpu blocks of aws and azure differ:\naws:\n%s\nazure:\n%s", blocks["aws"], blocks["azure"])
	}
}

func TestProvisionerBlock(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name, src, want, err string
	}{
		{"one block, comments kept",
			"build {\n  provisioner \"shell\" {}\n  provisioner \"podvm-gpu\" {\n    # why\n    a = 1\n  }\n}\n",
			"provisioner \"podvm-gpu\" {\n    # why\n    a = 1\n  }", ""},
		{"none", "build {\n}\n", "", "0 provisioner"},
		{"two", "build {\n  provisioner \"podvm-gpu\" {}\n}\nbuild {\n  provisioner \"podvm-gpu\" {}\n}\n", "", "2 provisioner"},
		{"outside a build block", "provisioner \"podvm-gpu\" {}\n", "", "0 provisioner"},
		{"syntax error", "build {\n", "", "parsing"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := example.ProvisionerBlock(write(fmt.Sprintf("t%d.pkr.hcl", i), tt.src), "podvm-gpu")
			switch {
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Errorf("error %v, want one with %q", err, tt.err)
			case tt.err == "" && err != nil:
				t.Error(err)
			case got != tt.want:
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}
