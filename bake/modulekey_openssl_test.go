package bake

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podvm-gpu/packer-plugin-podvm/gpustack"
)

// opensslKeys makes module keys with the openssl binary, as users make
// them: an encrypted PKCS#8 key and its certificate, a legacy (PEM
// header) encrypted key, and a second plain key pair.
func opensslKeys(t *testing.T) map[string]string {
	t.Helper()
	if _, err := exec.LookPath("openssl"); err != nil {
		if os.Getenv("PODVM_REQUIRE_ROOT") == "1" {
			t.Fatal("openssl is missing, and PODVM_REQUIRE_ROOT=1 runs every test")
		}
		t.Skip("needs openssl")
	}
	dir := t.TempDir()
	p := func(name string) string { return filepath.Join(dir, name) }
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("openssl", args...).CombinedOutput(); err != nil {
			t.Fatalf("openssl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	// -passout pass: is fine for a throwaway test key.
	run("req", "-x509", "-newkey", "rsa:2048", "-subj", "/CN=enc module key/", "-days", "2",
		"-passout", "pass:right pass", "-keyout", p("enc.key"), "-out", p("enc.crt"))
	run("rsa", "-in", p("enc.key"), "-passin", "pass:right pass", "-traditional", "-aes256",
		"-passout", "pass:right pass", "-out", p("legacy.key"))
	run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=other module key/", "-days", "2",
		"-keyout", p("other.key"), "-out", p("other.crt"))
	for _, f := range []string{"enc.key", "legacy.key"} {
		if data, _ := os.ReadFile(p(f)); !bytes.Contains(data, []byte("ENCRYPTED")) {
			t.Fatalf("%s is not encrypted:\n%s", f, data)
		}
	}
	// A key file that carries a certificate, another key's, before the key.
	enc, _ := os.ReadFile(p("enc.key"))
	other, _ := os.ReadFile(p("other.crt"))
	if err := os.WriteFile(p("bundle.key"), append(other, enc...), 0o600); err != nil {
		t.Fatal(err)
	}
	return map[string]string{"enc": p("enc.key"), "legacy": p("legacy.key"), "encCert": p("enc.crt"),
		"other": p("other.key"), "otherCert": p("other.crt"), "bundle": p("bundle.key")}
}

// TestModuleKeyAsTheImageUsesIt: the check does what the signing script
// in the image will do, before the build spends its time on DKMS: it
// decrypts the key with the passphrase, takes one line of passphrase, and
// matches the key to the certificate that the script signs with.
func TestModuleKeyAsTheImageUsesIt(t *testing.T) {
	files := opensslKeys(t)
	for _, tc := range []struct {
		name, key, cert, pass string
		err                   string // substring; "" for none
	}{
		{"encrypted PKCS#8, right passphrase", "enc", "encCert", "right pass", ""},
		{"legacy encrypted PEM, right passphrase", "legacy", "encCert", "right pass", ""},
		{"encrypted PKCS#8, wrong passphrase", "enc", "encCert", "wrong pass", "cannot decrypt"},
		{"legacy encrypted PEM, wrong passphrase", "legacy", "encCert", "wrong pass", "cannot decrypt"},
		{"encrypted key of another certificate", "enc", "otherCert", "right pass", "is not the key of certificate"},
		{"passphrase of two lines", "enc", "encCert", "right pass\nright pass", "more than one line"},
		{"passphrase with a carriage return", "enc", "encCert", "right pass\r", "more than one line"},
		{"another certificate before the key", "bundle", "encCert", "right pass", ""},
		{"plain key with a passphrase set", "other", "otherCert", "unused", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("MODPASS", tc.pass)
			k := gpustack.ModuleKey{File: files[tc.key], Cert: files[tc.cert], PassphraseEnv: "MODPASS"}
			err := checkModuleKey(k)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("checkModuleKey: %v; want an error with %q", err, tc.err)
				}
				if _, err := ModuleKeyInput(k); err == nil {
					t.Fatal("ModuleKeyInput accepted what checkModuleKey refuses")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			in, err := ModuleKeyInput(k)
			if err != nil {
				t.Fatal(err)
			}
			checkKeyInput(t, in, tc.pass, files[tc.cert])
		})
	}
}

// checkKeyInput checks the input of the signing script as the script reads
// it: the header, one passphrase line, then a file whose first
// certificate (openssl x509 takes the first) is the configured one and
// whose only private key is the user's.
func checkKeyInput(t *testing.T, in []byte, pass, certFile string) {
	t.Helper()
	header, rest, _ := bytes.Cut(in, []byte("\n"))
	if want := moduleKeyHeader(len(rest)); string(header) != want {
		t.Fatalf("header %q, want %q", header, want)
	}
	line, body, _ := bytes.Cut(rest, []byte("\n"))
	if string(line) != pass {
		t.Errorf("passphrase line %q, want %q", line, pass)
	}
	certData, _ := os.ReadFile(certFile)
	want, _ := pem.Decode(certData)
	var certs, keys int
	for b, r := pem.Decode(body); b != nil; b, r = pem.Decode(r) {
		switch {
		case b.Type == "CERTIFICATE":
			if certs == 0 && !bytes.Equal(b.Bytes, want.Bytes) {
				c, _ := x509.ParseCertificate(b.Bytes)
				t.Errorf("the script would sign with certificate %v, not %s", c.Subject, certFile)
			}
			certs++
		case strings.HasSuffix(b.Type, "PRIVATE KEY"):
			keys++
		}
	}
	if certs != 1 || keys != 1 {
		t.Errorf("input holds %d certificates and %d keys, want one of each:\n%s", certs, keys, body)
	}
}

// TestSignKeyInputArrives runs the image's signing script in key mode on
// this host, in a mount namespace with a tmpfs on /run as the image has:
// an input that an execute_command took all or part of (sudo -S reads its
// password from the same input: 0 of 2,823 bytes arrived) stops with a
// message that says so, before openssl; the whole input passes that check
// and the script goes on to look for the kernel's sign-file.
func TestSignKeyInputArrives(t *testing.T) {
	files := opensslKeys(t)
	if os.Geteuid() != 0 {
		if os.Getenv("PODVM_REQUIRE_ROOT") == "1" {
			t.Fatal("needs root (a tmpfs on /run in a mount namespace), and PODVM_REQUIRE_ROOT=1 says it must run")
		}
		t.Skip("needs root (a tmpfs on /run in a mount namespace)")
	}
	t.Setenv("MODPASS", "right pass")
	in, err := ModuleKeyInput(gpustack.ModuleKey{File: files["enc"], Cert: files["encCert"], PassphraseEnv: "MODPASS"})
	if err != nil {
		t.Fatal(err)
	}
	_, afterHeader, _ := bytes.Cut(in, []byte("\n"))
	dir := t.TempDir()
	sign := gpustack.SignModules{Kernels: []string{"0.0-podvm-test"}, CertDER: filepath.Join(dir, "c.der"), CertPEM: filepath.Join(dir, "c.pem"),
		Key: &gpustack.ModuleKey{File: files["enc"], Cert: files["encCert"], PassphraseEnv: "MODPASS"}}
	for _, tc := range []struct {
		name  string
		input []byte
		want  string
	}{
		{"whole input", in, "no sign-file for kernel 0.0-podvm-test"},
		{"nothing arrived (echo pw | sudo -S)", nil, "did not reach this command's input"},
		{"header read by another", afterHeader, "did not reach this command's input"},
		{"cut short", in[:len(in)-100], fmt.Sprintf("is %d bytes, want %d", len(afterHeader)-100, len(afterHeader))},
		{"a length no shell number holds", append([]byte("podvm-module-key 99999999999999999999999\n"), afterHeader...), "bytes, want 99999999999999999999999"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			script := "mount -t tmpfs podvm-test /run && " + sign.Command() + " 0.0-podvm-test"
			cmd := exec.Command("unshare", "-m", "sh", "-c", script)
			cmd.Stdin = bytes.NewReader(tc.input)
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(out), tc.want) {
				t.Errorf("signing script: %v\n%s\nwant a failure with %q", err, out, tc.want)
			}
		})
	}
}
