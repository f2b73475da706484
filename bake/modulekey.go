package bake

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/podvm-gpu/packer-plugin-podvm/gpustack"
	"github.com/podvm-gpu/packer-plugin-podvm/keyfile"
)

// The settings of key mode, as errors name them.
const (
	settingModuleKey  = "nvidia_module_signing_key"
	settingModuleCert = "nvidia_module_signing_cert"
	settingModulePass = "nvidia_module_signing_passphrase_env"
	// maxModulePass is OpenSSL's PEM_BUFSIZE, the buffer sign-file's
	// passphrase callback fills.
	maxModulePass = 1024
)

// ModuleKeyInput is what the module signing command reads on its input
// for nvidia_module_signing=key: a header line that gives the length of
// the rest, so that the script can tell a complete input from one that an
// execute_command took part of (sudo -S reads its password from the same
// input); the passphrase on the next line (empty for none); then the
// private key and the certificate in PEM. It goes through a pipe into the
// image's tmpfs, never into a file of the image.
//
// The key file is checked again here, as checkModuleKey checks it, and
// only its private key goes in: the script signs with the first
// certificate of its input, which must be the configured one.
func ModuleKeyInput(k gpustack.ModuleKey) ([]byte, error) {
	mk, err := loadModuleKey(k)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString(mk.pass + "\n")
	b.Write(pem.EncodeToMemory(mk.key))
	b.Write(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: mk.cert.Raw}))
	return append([]byte(moduleKeyHeader(b.Len())+"\n"), b.Bytes()...), nil
}

// moduleKeyHeader is the first line of the signing script's input in key
// mode: a tag and the byte count of the rest (gpustack's signing script
// reads it the same way).
func moduleKeyHeader(n int) string { return fmt.Sprintf("podvm-module-key %d", n) }

// ModuleSigner is modinfo's signer for a module signed with cert: the CN
// of its issuer.
func ModuleSigner(cert *x509.Certificate) string { return cert.Issuer.CommonName }

// readCert reads an X.509 certificate in PEM or DER.
func readCert(path string) (*x509.Certificate, error) {
	data, err := keyfile.Read(path, settingModuleCert, keyfile.MaxSize)
	if err != nil {
		return nil, err
	}
	if b, _ := pem.Decode(data); b != nil {
		if b.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("%s: %s holds a %s, not a CERTIFICATE", settingModuleCert, path, b.Type)
		}
		data = b.Bytes
	}
	cert, err := x509.ParseCertificate(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", settingModuleCert, path, err)
	}
	if ModuleSigner(cert) == "" {
		return nil, fmt.Errorf("%s: %s: the issuer has no common name (CN), which modinfo reports as the modules' signer", settingModuleCert, path)
	}
	return cert, nil
}

// checkModuleKey checks the key and certificate files of key mode as the
// image's signing script will use them, so that a key that cannot sign
// stops the build before DKMS has spent its time.
func checkModuleKey(k gpustack.ModuleKey) error {
	_, err := loadModuleKey(k)
	return err
}

// moduleKey is key mode's material as the signing script gets it.
type moduleKey struct {
	pass string
	key  *pem.Block // the key file's first private key, as it is there
	cert *x509.Certificate
}

// loadModuleKey reads and checks key mode's files: the certificate parses
// and names a signer; the passphrase is one line (the script reads one);
// the key file's first private key (the one sign-file takes) decrypts
// with the passphrase, is RSA or ECDSA, and is the certificate's.
func loadModuleKey(k gpustack.ModuleKey) (moduleKey, error) {
	cert, err := readCert(k.Cert)
	if err != nil {
		return moduleKey{}, err
	}
	var pass string
	if k.PassphraseEnv != "" {
		pass = os.Getenv(k.PassphraseEnv)
		if pass == "" {
			return moduleKey{}, fmt.Errorf("%s: $%s is unset or empty", settingModulePass, k.PassphraseEnv)
		}
		// The script reads the passphrase as one line: a second line
		// would be read as the key.
		if strings.ContainsAny(pass, "\n\r") {
			return moduleKey{}, fmt.Errorf("%s: $%s holds more than one line; the signing script reads the passphrase as one line", settingModulePass, k.PassphraseEnv)
		}
		// The kernel's sign-file refuses a passphrase that fills
		// OpenSSL's 1024-byte buffer, and openssl's own -passin reads no
		// more: a longer one would pass here, cut, and fail in the image.
		if len(pass) >= maxModulePass {
			return moduleKey{}, fmt.Errorf("%s: $%s holds %d bytes; the kernel's sign-file takes passphrases of at most %d", settingModulePass, k.PassphraseEnv, len(pass), maxModulePass-1)
		}
	}
	data, err := keyfile.Read(k.File, settingModuleKey, keyfile.MaxSize)
	if err != nil {
		return moduleKey{}, err
	}
	var block *pem.Block
	for rest := data; ; {
		block, rest = pem.Decode(rest)
		if block == nil || strings.HasSuffix(block.Type, "PRIVATE KEY") {
			break
		}
	}
	if block == nil {
		return moduleKey{}, fmt.Errorf("%s: %s holds no PEM private key", settingModuleKey, k.File)
	}
	var pub crypto.PublicKey
	if block.Type == "ENCRYPTED PRIVATE KEY" || strings.Contains(block.Headers["Proc-Type"], "ENCRYPTED") {
		if pass == "" {
			return moduleKey{}, fmt.Errorf("%s: %s is encrypted; set %s to a variable that holds its passphrase", settingModuleKey, k.File, settingModulePass)
		}
		if pub, err = decryptedPublicKey(block, pass); err != nil {
			return moduleKey{}, fmt.Errorf("%s: %s: %w", settingModuleKey, k.File, err)
		}
	} else if pub, err = plainPublicKey(block); err != nil {
		return moduleKey{}, fmt.Errorf("%s: %s: %w", settingModuleKey, k.File, err)
	}
	switch pub.(type) {
	case *rsa.PublicKey, *ecdsa.PublicKey:
	default:
		return moduleKey{}, fmt.Errorf("%s: %s: a %T key; the kernel's sign-file takes RSA or ECDSA keys", settingModuleKey, k.File, pub)
	}
	type equaler interface{ Equal(crypto.PublicKey) bool }
	if e, ok := pub.(equaler); !ok || !e.Equal(cert.PublicKey) {
		return moduleKey{}, errors.New(settingModuleKey + ": " + k.File + " is not the key of certificate " + k.Cert + " (" + settingModuleCert + ")")
	}
	return moduleKey{pass: pass, key: block, cert: cert}, nil
}

// plainPublicKey is the public half of an unencrypted PEM private key.
func plainPublicKey(block *pem.Block) (crypto.PublicKey, error) {
	switch block.Type {
	case "RSA PRIVATE KEY":
		key, err := x509.ParsePKCS1PrivateKey(block.Bytes)
		if err != nil {
			return nil, err
		}
		return key.Public(), nil
	case "EC PRIVATE KEY":
		key, err := x509.ParseECPrivateKey(block.Bytes)
		if err != nil {
			return nil, err
		}
		return key.Public(), nil
	}
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, err
	}
	s, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("a %T key cannot sign", key)
	}
	return s.Public(), nil
}

// decryptedPublicKey decrypts an encrypted PEM private key with pass, as
// sign-file will in the image (OpenSSL with KBUILD_SIGN_PIN), and returns
// its public half. Go reads neither encrypted PKCS#8 nor, safely, the
// legacy PEM encryption, so the build host's openssl does it: the key
// goes in on a pipe and the passphrase on another, never on a command
// line or in a file, and only the public key comes out.
func decryptedPublicKey(block *pem.Block, pass string) (crypto.PublicKey, error) {
	openssl, err := exec.LookPath("openssl")
	if err != nil {
		return nil, fmt.Errorf("the key is encrypted, and checking it with its passphrase needs openssl on the build host: %w", err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer pr.Close()
	// A pipe holds far more than a passphrase line, so the write cannot
	// block before openssl reads.
	_, err = pw.WriteString(pass + "\n")
	if cerr := pw.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("passphrase pipe: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, openssl, "pkey", "-passin", "fd:3", "-pubout", "-outform", "DER")
	cmd.Stdin = bytes.NewReader(pem.EncodeToMemory(block))
	cmd.ExtraFiles = []*os.File{pr}
	// Only the passphrase's pipe and the key's reach openssl: no
	// variable of this process.
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if i := strings.IndexByte(msg, '\n'); i >= 0 {
			msg = msg[:i]
		}
		return nil, fmt.Errorf("openssl cannot decrypt it with the passphrase (%v: %s); sign-file in the image would fail the same way", err, msg)
	}
	pub, err := x509.ParsePKIXPublicKey(out.Bytes())
	if err != nil {
		return nil, fmt.Errorf("openssl's public key: %w", err)
	}
	return pub, nil
}
