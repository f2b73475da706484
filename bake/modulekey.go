package bake

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/podvm-gpu/packer-plugin-podvm/gpustack"
	"github.com/podvm-gpu/packer-plugin-podvm/keyfile"
)

// ModuleKeyInput is what the module signing command reads on its input
// for nvidia_module_signing=key: the passphrase on the first line (empty
// for none), then the private key and the certificate in PEM. It goes
// through a pipe into the image's tmpfs, never into a file of the image.
func ModuleKeyInput(k gpustack.ModuleKey) ([]byte, error) {
	key, err := keyfile.Read(k.File, "nvidia_module_signing_key", keyfile.MaxSize)
	if err != nil {
		return nil, err
	}
	cert, err := readCert(k.Cert)
	if err != nil {
		return nil, err
	}
	var pass string
	if k.PassphraseEnv != "" {
		pass = os.Getenv(k.PassphraseEnv)
		if pass == "" || strings.ContainsAny(pass, "\n\r") {
			return nil, fmt.Errorf("nvidia_module_signing_passphrase_env: $%s is unset, empty or more than one line", k.PassphraseEnv)
		}
	}
	var b bytes.Buffer
	b.WriteString(pass + "\n")
	b.Write(bytes.TrimRight(key, "\n"))
	b.WriteString("\n")
	b.Write(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}))
	return b.Bytes(), nil
}

// ModuleSigner is modinfo's signer for a module signed with cert: the CN
// of its issuer.
func ModuleSigner(cert *x509.Certificate) string { return cert.Issuer.CommonName }

// readCert reads an X.509 certificate in PEM or DER.
func readCert(path string) (*x509.Certificate, error) {
	data, err := keyfile.Read(path, "nvidia_module_signing_cert", keyfile.MaxSize)
	if err != nil {
		return nil, err
	}
	if b, _ := pem.Decode(data); b != nil {
		if b.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("nvidia_module_signing_cert: %s holds a %s, not a CERTIFICATE", path, b.Type)
		}
		data = b.Bytes
	}
	cert, err := x509.ParseCertificate(data)
	if err != nil {
		return nil, fmt.Errorf("nvidia_module_signing_cert: %s: %w", path, err)
	}
	if ModuleSigner(cert) == "" {
		return nil, fmt.Errorf("nvidia_module_signing_cert: %s: the issuer has no common name (CN), which modinfo reports as the modules' signer", path)
	}
	return cert, nil
}

// checkModuleKey checks the key and certificate files of key mode: the
// certificate parses and names a signer; an unencrypted key is RSA or
// ECDSA and is the certificate's; an encrypted one has its passphrase
// variable set (openssl decrypts it in the image's tmpfs).
func checkModuleKey(k gpustack.ModuleKey) error {
	cert, err := readCert(k.Cert)
	if err != nil {
		return err
	}
	data, err := keyfile.Read(k.File, "nvidia_module_signing_key", keyfile.MaxSize)
	if err != nil {
		return err
	}
	var block *pem.Block
	for rest := data; ; {
		block, rest = pem.Decode(rest)
		if block == nil || strings.HasSuffix(block.Type, "PRIVATE KEY") {
			break
		}
	}
	if block == nil {
		return fmt.Errorf("nvidia_module_signing_key: %s holds no PEM private key", k.File)
	}
	if block.Type == "ENCRYPTED PRIVATE KEY" || block.Headers["Proc-Type"] != "" {
		if k.PassphraseEnv == "" || os.Getenv(k.PassphraseEnv) == "" {
			return fmt.Errorf("nvidia_module_signing_key: %s is encrypted; set nvidia_module_signing_passphrase_env to a variable that holds its passphrase", k.File)
		}
		return nil
	}
	var pub crypto.PublicKey
	switch block.Type {
	case "RSA PRIVATE KEY":
		key, err := x509.ParsePKCS1PrivateKey(block.Bytes)
		if err != nil {
			return fmt.Errorf("nvidia_module_signing_key: %s: %w", k.File, err)
		}
		pub = &key.PublicKey
	case "EC PRIVATE KEY":
		key, err := x509.ParseECPrivateKey(block.Bytes)
		if err != nil {
			return fmt.Errorf("nvidia_module_signing_key: %s: %w", k.File, err)
		}
		pub = &key.PublicKey
	default:
		key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return fmt.Errorf("nvidia_module_signing_key: %s: %w", k.File, err)
		}
		switch key := key.(type) {
		case *rsa.PrivateKey:
			pub = &key.PublicKey
		case *ecdsa.PrivateKey:
			pub = &key.PublicKey
		default:
			return fmt.Errorf("nvidia_module_signing_key: %s: a %T; the kernel's sign-file takes RSA or ECDSA keys", k.File, key)
		}
	}
	type equaler interface{ Equal(crypto.PublicKey) bool }
	if e, ok := pub.(equaler); !ok || !e.Equal(cert.PublicKey) {
		return errors.New("nvidia_module_signing_key: " + k.File + " is not the key of certificate " + k.Cert)
	}
	return nil
}
