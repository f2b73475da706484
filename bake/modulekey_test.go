package bake

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
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

	"github.com/podvm-gpu/packer-plugin-podvm/gpustack"
)

func selfSigned(t *testing.T, cn string, pub, priv any) []byte {
	t.Helper()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn, Organization: []string{"Acme"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, priv)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func TestModuleKey(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pemFile := func(name, typ string, der []byte) string {
		return write(name, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}))
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	_, edKey, _ := ed25519.GenerateKey(rand.Reader)
	pkcs8, _ := x509.MarshalPKCS8PrivateKey(rsaKey)
	ec8, _ := x509.MarshalECPrivateKey(ecKey)
	ed8, _ := x509.MarshalPKCS8PrivateKey(edKey)
	rsaCert := selfSigned(t, "acme module key", &rsaKey.PublicKey, rsaKey)
	files := map[string]string{
		"pkcs8":     pemFile("k8.pem", "PRIVATE KEY", pkcs8),
		"pkcs1":     pemFile("k1.pem", "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(rsaKey)),
		"ec":        pemFile("ec.pem", "EC PRIVATE KEY", ec8),
		"ed25519":   pemFile("ed.pem", "PRIVATE KEY", ed8),
		"encrypted": pemFile("enc.pem", "ENCRYPTED PRIVATE KEY", []byte("opaque")),
		"notakey":   write("nokey.pem", []byte("hello\n")),
		"certPEM":   pemFile("c.pem", "CERTIFICATE", rsaCert),
		"certDER":   write("c.der", rsaCert),
		"ecCert":    pemFile("ec.crt", "CERTIFICATE", selfSigned(t, "acme ec", &ecKey.PublicKey, ecKey)),
		"noCN":      pemFile("nocn.pem", "CERTIFICATE", selfSigned(t, "", &rsaKey.PublicKey, rsaKey)),
	}
	t.Setenv("MODPASS", "s3cret")
	// What the kernel's sign-file cannot take: 1024 bytes or more.
	t.Setenv("LONGPASS", strings.Repeat("p", 1024))
	// A passphrase far above a pipe's buffer: the check must not hang.
	t.Setenv("HUGEPASS", strings.Repeat("p", 100000))
	for _, tc := range []struct {
		name, key, cert, pass string
		err                   string // substring; "" for none
	}{
		{"pkcs8 and PEM certificate", "pkcs8", "certPEM", "", ""},
		{"pkcs1 and DER certificate", "pkcs1", "certDER", "", ""},
		{"ecdsa", "ec", "ecCert", "", ""},
		{"key of another certificate", "ec", "certPEM", "", "is not the key of certificate"},
		{"ed25519", "ed25519", "certPEM", "", "RSA or ECDSA"},
		{"not a key", "notakey", "certPEM", "", "holds no PEM private key"},
		{"certificate without CN", "pkcs8", "noCN", "", "no common name"},
		{"certificate is a key", "pkcs8", "pkcs8", "", "not a CERTIFICATE"},
		{"encrypted without passphrase", "encrypted", "certPEM", "", "is encrypted; set nvidia_module_signing_passphrase_env"},
		// An encrypted key is decrypted with its passphrase up front, as
		// sign-file will in the image (see modulekey_openssl_test.go).
		{"encrypted junk with passphrase", "encrypted", "certPEM", "MODPASS", "cannot decrypt"},
		{"missing key file", "missing", "certPEM", "", "nvidia_module_signing_key"},
		{"passphrase sign-file cannot take", "encrypted", "certPEM", "LONGPASS", "at most 1023"},
		{"passphrase above a pipe's buffer", "encrypted", "certPEM", "HUGEPASS", "at most 1023"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := gpustack.ModuleKey{File: files[tc.key], Cert: files[tc.cert], PassphraseEnv: tc.pass}
			if k.File == "" {
				k.File = filepath.Join(dir, "missing.pem")
			}
			err := checkModuleKey(k)
			if tc.err == "" && err != nil {
				t.Fatal(err)
			}
			if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("error %v, want one with %q", err, tc.err)
			}
		})
	}

	in, err := ModuleKeyInput(gpustack.ModuleKey{File: files["pkcs8"], Cert: files["certDER"], PassphraseEnv: "MODPASS"})
	if err != nil {
		t.Fatal(err)
	}
	_, in, _ = bytes.Cut(in, []byte("\n")) // the header
	first, rest, _ := bytes.Cut(in, []byte("\n"))
	if string(first) != "s3cret" || !bytes.Contains(rest, []byte("-----BEGIN PRIVATE KEY-----")) || !bytes.Contains(rest, []byte("-----BEGIN CERTIFICATE-----")) {
		t.Errorf("input:\n%s", in)
	}
	t.Setenv("MODPASS", "")
	if _, err := ModuleKeyInput(gpustack.ModuleKey{File: files["pkcs8"], Cert: files["certDER"], PassphraseEnv: "MODPASS"}); err == nil {
		t.Error("empty passphrase variable accepted")
	}
}
