package keyscan

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/md5"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"golang.org/x/crypto/ssh"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func armored(t *testing.T, blockType string, data []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	w, err := armor.Encode(&b, blockType, nil)
	must(t, err)
	w.Write(data)
	w.Close()
	return b.Bytes()
}

// planted is one key of every kind the scan must find, and material it
// must pass over.
func planted(t *testing.T) (keys, harmless map[string][]byte) {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	must(t, err)
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	_, edKey, err := ed25519.GenerateKey(rand.Reader)
	must(t, err)
	pkcs8, err := x509.MarshalPKCS8PrivateKey(rsaKey)
	must(t, err)
	ecDER, err := x509.MarshalECPrivateKey(ecKey)
	must(t, err)
	sshPEM, err := ssh.MarshalPrivateKey(edKey, "test")
	must(t, err)
	//lint:ignore SA1019 an encrypted legacy PEM key is exactly what must be found
	encrypted, err := x509.EncryptPEMBlock(rand.Reader, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(rsaKey), []byte("pw"), x509.PEMCipherAES256)
	must(t, err)
	e, err := openpgp.NewEntity("leak", "", "leak@podvm.invalid", nil)
	must(t, err)
	var pub, sec bytes.Buffer
	must(t, e.Serialize(&pub))
	must(t, e.SerializePrivate(&sec, nil))
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "podvm test"}, NotAfter: time.Now().Add(time.Hour)}
	cert, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &rsaKey.PublicKey, rsaKey)
	must(t, err)
	pubDER, err := x509.MarshalPKIXPublicKey(&rsaKey.PublicKey)
	must(t, err)

	keys = map[string][]byte{
		"mok.key":               pemBlock("PRIVATE KEY", pkcs8),
		"rsa.pem":               pemBlock("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(rsaKey)),
		"ec.pem":                pemBlock("EC PRIVATE KEY", ecDER),
		"encrypted.pem":         pem.EncodeToMemory(encrypted),
		"pkcs8-encrypted.pem":   pemBlock("ENCRYPTED PRIVATE KEY", []byte("opaque")),
		"id_ed25519":            pem.EncodeToMemory(sshPEM),
		"id_binary":             append([]byte("openssh-key-v1\x00"), 0, 0, 0, 4),
		"key.der":               pkcs8,
		"rsa.der":               x509.MarshalPKCS1PrivateKey(rsaKey),
		"ec.der":                ecDER,
		"secret.asc":            armored(t, "PGP PRIVATE KEY BLOCK", sec.Bytes()),
		"mislabelled.asc":       armored(t, "PGP PUBLIC KEY BLOCK", sec.Bytes()),
		"secret.gpg":            sec.Bytes(),
		"renamed-secret":        sec.Bytes(), // a well-formed packet sequence under any name
		"config-with-key.yaml":  append([]byte("tls:\n  key: |\n"), pemBlock("PRIVATE KEY", pkcs8)...),
		"old-format-secret.gpg": {0x98, 3, 1, 2, 3, 0x94, 1, 4}, // public (tag 6), then secret (tag 5, version 4)
	}
	harmless = map[string][]byte{
		"cert.pem":     pemBlock("CERTIFICATE", cert),
		"cert.der":     cert,
		"pub.pem":      pemBlock("PUBLIC KEY", pubDER),
		"pub.gpg":      pub.Bytes(),
		"pub.asc":      armored(t, "PGP PUBLIC KEY BLOCK", pub.Bytes()),
		"text":         []byte("just text\n"),
		"empty":        nil,
		"binary":       {0x94, 0xff, 0xff, 0xff, 0x10, 1, 2, 3}, // starts like a tag-5 packet, parses as none
		"sequence.bin": {0x30, 0x03, 0x02, 0x01, 0x05},          // DER, not a key
		// Old-format tag 5 with an indeterminate length: any bytes parse so.
		"random-97.bin": {0x97, 0x04, 0xaa, 0xbb},
		"random-9f.bin": {0x9f, 0x00},
		"after-packet":  {0x80, 0x01, 0xaa, 0x97, 0x04, 0x01},
		"bad-version":   {0x94, 0x02, 0x09, 0x01}, // tag 5, version 9
	}
	return keys, harmless
}

func TestFind(t *testing.T) {
	keys, harmless := planted(t)
	for name, data := range keys {
		if got := Find(name, data); got == "" {
			t.Errorf("%s: not found", name)
		}
	}
	for name, data := range harmless {
		if got := Find(name, data); got != "" {
			t.Errorf("%s: found %q in harmless data", name, got)
		}
	}
}

// TestTree plants every kind of key in a tree that looks like an image,
// and checks that a file a package shipped unchanged is passed over while
// the same file changed is not.
func TestTree(t *testing.T) {
	keys, harmless := planted(t)
	root := t.TempDir()
	write := func(rel string, data []byte) {
		p := filepath.Join(root, rel)
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		must(t, os.WriteFile(p, data, 0o600))
	}
	var want []string
	for name, data := range keys {
		write("var/lib/planted/"+name, data)
		want = append(want, "/var/lib/planted/"+name)
	}
	for name, data := range harmless {
		write("usr/share/harmless/"+name, data)
	}
	// A package's own test key, unchanged, and one it shipped but that was
	// changed since.
	shipped := keys["rsa.pem"]
	write("usr/share/doc/pkg/test-key.pem", shipped)
	write("usr/share/doc/pkg/changed-key.pem", keys["ec.pem"])
	sum := md5.Sum(shipped)
	write("var/lib/dpkg/info/pkg.md5sums", []byte(hex.EncodeToString(sum[:])+"  usr/share/doc/pkg/test-key.pem\n"+
		hex.EncodeToString(sum[:])+"  usr/share/doc/pkg/changed-key.pem\n"))
	want = append(want, "/usr/share/doc/pkg/changed-key.pem")
	// API file systems are skipped.
	write("proc/1/environ", keys["mok.key"])

	pristine, err := DpkgPristine(root)
	must(t, err)
	found, files, err := Tree(root, []string{"proc"}, pristine)
	must(t, err)
	var got []string
	for _, f := range found {
		got = append(got, f.Path)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("found:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	if files < len(keys)+len(harmless)+2 {
		t.Errorf("read %d files", files)
	}
}

// A file too large to read whole is still searched for PEM blocks,
// across chunk boundaries.
func TestTreeLargeFile(t *testing.T) {
	root := t.TempDir()
	f, err := os.Create(filepath.Join(root, "big.log"))
	must(t, err)
	// The BEGIN line straddles a 1 MiB chunk boundary past the limit.
	must(t, f.Truncate(wholeFileLimit+(1<<20)-10))
	_, err = f.Seek(0, 2)
	must(t, err)
	_, err = f.WriteString("-----BEGIN RSA PRIVATE KEY-----\nMIIE\n")
	must(t, err)
	must(t, f.Close())
	found, _, err := Tree(root, nil, nil)
	must(t, err)
	if len(found) != 1 || found[0].Path != "/big.log" {
		t.Errorf("found %v", found)
	}
}
