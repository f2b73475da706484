package gpu

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestModuleKeyPiped: with nvidia_module_signing=key, the key and its
// certificate reach the signing command on its input only: never in a
// command line, an upload (a file in the image) or the build log.
func TestModuleKeyPiped(t *testing.T) {
	dir := t.TempDir()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "fleet module key"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	pkcs8, _ := x509.MarshalPKCS8PrivateKey(key)
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8})
	keyFile, certFile := filepath.Join(dir, "m.key"), filepath.Join(dir, "m.der")
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, der, 0o644); err != nil {
		t.Fatal(err)
	}
	tk, _ := testKey(t)
	p := newTestProvisioner(t, map[string]interface{}{
		"nvidia_container_toolkit_repo_keyring": tk,
		"nvidia_module_signing":                 "key",
		"nvidia_module_signing_key":             keyFile,
		"nvidia_module_signing_cert":            certFile,
	})
	comm := newFakeComm(debian13())
	if err := provision(t, p, comm); err != nil {
		t.Fatal(err)
	}
	var signN int
	for i, c := range comm.cmds {
		if strings.Contains(c, "podvm-sign-modules 'sign-key'") {
			signN = i + 1
		}
		if strings.Contains(c, "PRIVATE KEY-----\n") || strings.Contains(c, "MII") {
			t.Errorf("command %d carries key material: %.120s", i+1, c)
		}
	}
	if signN == 0 {
		t.Fatalf("no sign-key command ran; commands:\n%s", strings.Join(comm.cmds, "\n"))
	}
	in := comm.stdin[signN]
	if !bytes.HasPrefix(in, []byte("\n")) || !bytes.Contains(in, bytes.TrimSpace(keyPEM)) || !bytes.Contains(in, []byte("-----BEGIN CERTIFICATE-----")) {
		t.Errorf("the signing command's input lacks the empty passphrase line, the key or the certificate:\n%s", in)
	}
	for n := range comm.stdin {
		if n != signN {
			t.Errorf("command %d got input too", n)
		}
	}
	for path, data := range comm.uploads {
		if bytes.Contains(data, []byte("PRIVATE KEY")) {
			t.Errorf("upload %s holds the private key", path)
		}
	}
	for _, l := range comm.log {
		if strings.Contains(l, "BEGIN PRIVATE KEY") {
			t.Errorf("the log shows the key: %.120s", l)
		}
	}
	// The verify step checks the modules against the certificate's issuer.
	var verify bool
	for _, c := range comm.cmds {
		verify = verify || strings.Contains(c, "podvm-sign-modules 'verify' ''")
	}
	if !verify {
		t.Error("no verify step against the certificate's issuer")
	}
}
