package bake

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podvm-gpu/packer-plugin-podvm/settings"
)

// TestCheckInputsKeyFiles: every key, certificate and keyring file that a
// setting names is refused at once when it is a device or a FIFO (read
// whole, /dev/zero ran the build out of memory and a FIFO hung it), and
// the error names the setting.
func TestCheckInputsKeyFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(rsaKey)
	if err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(dir, "m.key")
	cert := filepath.Join(dir, "m.crt")
	if err := os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cert, selfSigned(t, "acme module key", &rsaKey.PublicKey, rsaKey), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct{ name, path string }{{"FIFO", fifo}, {"device", "/dev/zero"}} {
		for _, tc := range []struct {
			setting string
			set     func(o *settings.Options, p string)
		}{
			{"nvidia_module_signing_key", func(o *settings.Options, p string) { o.ModuleKey = p }},
			{"nvidia_module_signing_cert", func(o *settings.Options, p string) { o.ModuleCert = p }},
			{"local_repo_signing_key", func(o *settings.Options, p string) { o.SigningKey = p }},
			{"nvidia_container_toolkit_repo_keyring", func(o *settings.Options, p string) { o.ToolkitRepoKeyring = p }},
			{"nvidia_cuda_repo_keyring", func(o *settings.Options, p string) { o.CUDARepoKeyring = p }},
		} {
			t.Run(bad.name+"/"+tc.setting, func(t *testing.T) {
				o := settings.Options{
					EnableGPU: true, LocalRepo: "yes", SourceDateEpoch: time.Now().Add(-time.Hour).Unix(),
					ModuleSigning: "key", ModuleKey: key, ModuleCert: cert,
				}
				tc.set(&o, bad.path)
				done := make(chan []error, 1)
				go func() { done <- CheckInputs(o, time.Now()) }()
				var errs []error
				select {
				case errs = <-done:
				case <-time.After(10 * time.Second):
					t.Fatalf("CheckInputs blocks on %s as %s", bad.path, tc.setting)
				}
				if len(errs) != 1 {
					t.Fatalf("CheckInputs with %s as %s: %v; want one error", bad.path, tc.setting, errs)
				}
				if msg := errs[0].Error(); !strings.Contains(msg, tc.setting) || !strings.Contains(msg, "not a regular file") {
					t.Errorf("error %q; want it to name %s and say it is not a regular file", msg, tc.setting)
				}
			})
		}
	}
}
