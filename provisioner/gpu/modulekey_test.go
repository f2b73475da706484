package gpu

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
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
	// A header gives the length of the rest, which the script checks.
	header, in, _ := bytes.Cut(in, []byte("\n"))
	if want := fmt.Sprintf("podvm-module-key %d", len(in)); string(header) != want {
		t.Errorf("the signing command's input starts with %q, want %q", header, want)
	}
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

// TestPrepareKeyModeExecuteCommand: nvidia_module_signing=key sends the key
// on the signing command's input, so an execute_command that feeds that
// input from elsewhere is refused at prepare time, naming execute_command
// (the documented `echo 'pw' | sudo -S` form delivered 0 of 2,823 bytes).
// Forms that pass the input through are accepted, and any form is with
// the other signing modes.
func TestPrepareKeyModeExecuteCommand(t *testing.T) {
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
	keyFile, certFile := filepath.Join(dir, "m.key"), filepath.Join(dir, "m.der")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, der, 0o644); err != nil {
		t.Fatal(err)
	}
	tk, _ := testKey(t)
	for _, tc := range []struct {
		command string
		refused bool
	}{
		{"", false},
		{"sh -c {{.Command}}", false},
		{"sudo -n sh -c {{.Command}}", false},
		{"sudo -E -u root sh -c {{.Command}}", false},
		{"sudo -p 'Sesame: ' -n sh -c {{.Command}}", false},
		{"sudo -uSam sh -c {{.Command}}", false},
		{"sh -c {{.Command}} 2>&1 | tee -a /var/log/build.log", false},
		{"{{.Vars}} sh -c {{.Command}} || true", false},
		{"echo 'pw' | sudo -S sh -c {{.Command}}", true},
		{"echo 'pw'|sudo -S sh -c {{ .Command }}", true},
		{"sudo -S sh -c {{.Command}}", true},
		{"sudo -kS sh -c {{.Command}}", true},
		{"sudo --stdin sh -c {{.Command}}", true},
		{"/usr/bin/sudo -E -S sh -c {{.Command}}", true},
		{"printf 'pw\\n' | sudo sh -c {{.Command}}", true},
		{"sh -c {{.Command}} </dev/null", true},
		{"sh -c {{.Command}} <<EOF\nx\nEOF", true},
	} {
		for _, mode := range []string{"key", "ephemeral"} {
			// The name has no {{: t.TempDir takes it, and output_dir is
			// interpolated.
			t.Run(fmt.Sprintf("%s/%s", mode, strings.NewReplacer("{", "", "}", "").Replace(tc.command)), func(t *testing.T) {
				p := &Provisioner{lookupEnv: func(string) (string, bool) { return "", false }}
				raw := map[string]interface{}{
					"source_date_epoch":                     "1700000000",
					"output_dir":                            t.TempDir(),
					"nvidia_container_toolkit_repo_keyring": tk,
					"nvidia_module_signing":                 mode,
					"execute_command":                       tc.command,
				}
				if mode == "key" {
					raw["nvidia_module_signing_key"] = keyFile
					raw["nvidia_module_signing_cert"] = certFile
				}
				err := p.Prepare(raw)
				if !tc.refused || mode != "key" {
					if err != nil {
						t.Fatalf("Prepare: %v", err)
					}
					return
				}
				if err == nil {
					t.Fatal("Prepare accepted it")
				}
				if msg := err.Error(); !strings.Contains(msg, "execute_command") || !strings.Contains(msg, "nvidia_module_signing=key") {
					t.Errorf("Prepare: %q; want it to name execute_command and nvidia_module_signing=key", msg)
				}
			})
		}
	}
}
