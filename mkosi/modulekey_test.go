package mkosi

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/podvm-gpu/packer-plugin-podvm/gpustack"
	"github.com/podvm-gpu/packer-plugin-podvm/modcache"
)

// TestModuleKeyTree renders nvidia_module_signing=key: the key's and the
// certificate's directories are mounted for the scripts only (never into
// an image tree), the passphrase variable is passed through to run-steps
// alone, and the plan file names the key where the sandbox mounts it, for
// run-steps to pipe into the signing command. Real mkosi parses the tree.
func TestModuleKeyTree(t *testing.T) {
	keys, certs := t.TempDir(), t.TempDir()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fleet"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	pkcs8, _ := x509.MarshalPKCS8PrivateKey(key)
	keyFile, certFile := filepath.Join(keys, "m.key"), filepath.Join(certs, "m.pem")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}), 0o600))
	must(os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644))

	bin := filepath.Join(t.TempDir(), "packer-plugin-podvm")
	cache := t.TempDir()
	if err := os.MkdirAll(modcache.Dir(cache), 0o755); err != nil {
		t.Fatal(err)
	}
	p := plan(t, "debian", "13", map[string]string{
		"build_cache_dir":                       cache,
		"nvidia_container_toolkit_repo_keyring": filepath.Join("testdata", "toolkit-key.asc"),
		"nvidia_module_signing":                 "key",
		"nvidia_module_signing_key":             keyFile,
		"nvidia_module_signing_cert":            certFile,
		"nvidia_module_signing_passphrase_env":  "MODPASS",
	})
	files, err := Render(context.Background(), Config{Plan: p, Bin: bin, HTTPClient: noNetwork})
	must(err)
	var conf, postinst string
	for _, f := range files {
		switch {
		case f.Path == "mkosi.profiles/"+Profile+"/mkosi.conf":
			conf = string(f.Data)
		case strings.HasSuffix(f.Path, "mkosi.postinst.d/50-podvm.sh"):
			postinst = string(f.Data)
		}
		if strings.Contains(string(f.Data), "PRIVATE KEY") {
			t.Errorf("%s holds the key", f.Path)
		}
	}
	for _, want := range []string{"BuildSources=../..,", keys + ":" + moduleKeySource, certs + ":" + moduleCertSource, "Environment=MODPASS"} {
		if !strings.Contains(conf, want) {
			t.Errorf("profile mkosi.conf lacks %q:\n%s", want, conf)
		}
	}
	// run-steps pipes the key in from where the sandbox mounts it, and
	// alone gets the passphrase, which it keeps from the image's commands.
	if !strings.Contains(postinst, `MODPASS="$podvm_secret_MODPASS" "$podvm_bin" mkosi run-steps `) || !strings.Contains(postinst, "--secret-env MODPASS") {
		t.Errorf("post-installation script does not give run-steps alone the passphrase:\n%s", postinst)
	}
	var signing *gpustack.SignModules
	for _, s := range readPlanFile(t, files).Steps {
		for _, a := range s.Actions {
			if sm, ok := a.(gpustack.SignModules); ok && !sm.Verify {
				signing = &sm
			}
		}
	}
	if signing == nil || signing.Key == nil || signing.Key.File != "podvm-module-key/m.key" || signing.Key.Cert != "podvm-module-cert/m.pem" || signing.Key.PassphraseEnv != "MODPASS" {
		t.Errorf("plan file's signing step %+v: want the key and certificate where the sandbox mounts them", signing)
	}

	argv := needMkosi(t)
	dir := t.TempDir()
	must(Write(dir, files, false))
	t.Setenv("MODPASS", "x")
	out, _ := runMkosi(t, argv, dir, "--json", "summary")
	var s struct {
		Images []struct {
			BuildSources []struct{ Source, Target string }
			Environment  map[string]string
		}
	}
	must(json.Unmarshal(out, &s))
	if len(s.Images) == 0 {
		t.Fatalf("summary: %s", out)
	}
	img := s.Images[0]
	var targets []string
	for _, b := range img.BuildSources {
		targets = append(targets, b.Target)
	}
	if !slices.Contains(targets, moduleKeySource) || !slices.Contains(targets, moduleCertSource) {
		t.Errorf("mkosi's BuildSources %+v lack the key mounts", img.BuildSources)
	}
	// The tree itself stays mounted at $SRCDIR: the scripts read their
	// files there (a profile's "." would be the profile's directory).
	if len(img.BuildSources) == 0 || img.BuildSources[0].Target != "" || filepath.Clean(img.BuildSources[0].Source) != filepath.Clean(dir) {
		t.Errorf("mkosi's first BuildSources %+v: want the tree %s at $SRCDIR", img.BuildSources, dir)
	}
	if _, ok := img.Environment["MODPASS"]; !ok {
		t.Errorf("mkosi's Environment %v lacks MODPASS", img.Environment)
	}
}
