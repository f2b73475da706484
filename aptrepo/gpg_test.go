package aptrepo

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestMain removes the GnuPG fixtures shared by the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if gpgDir != "" {
		os.RemoveAll(gpgDir)
	}
	os.Exit(code)
}

var (
	gpgOnce sync.Once
	gpgDir  string
	gpgKeys map[string]string // fixture name -> armored key file
	gpgErr  error
)

// gpgFixtures returns key files made by real GnuPG, the way users make
// their keys: good ones and every kind LoadSigner must refuse. They are
// made once per test binary.
func gpgFixtures(t *testing.T) map[string]string {
	t.Helper()
	need(t, "gpg")
	gpgOnce.Do(func() { gpgKeys, gpgErr = makeGPGFixtures() })
	if gpgErr != nil {
		t.Fatalf("make GnuPG keys: %v", gpgErr)
	}
	return gpgKeys
}

func makeGPGFixtures() (map[string]string, error) {
	dir, err := os.MkdirTemp("", "aptrepo-gpg-")
	if err != nil {
		return nil, err
	}
	gpgDir = dir
	home := filepath.Join(dir, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		return nil, err
	}
	gpg := func(args ...string) ([]byte, error) {
		cmd := exec.Command("gpg", append([]string{"--batch", "--pinentry-mode", "loopback", "--no-tty"}, args...)...)
		cmd.Env = append(os.Environ(), "GNUPGHOME="+home)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("gpg %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
		}
		return out, nil
	}
	fingerprint := func(uid string) (string, error) {
		out, err := gpg("--with-colons", "--list-keys", "="+uid)
		if err != nil {
			return "", err
		}
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Split(line, ":"); f[0] == "fpr" {
				return f[9], nil
			}
		}
		return "", fmt.Errorf("no fingerprint for %s", uid)
	}
	keys := make(map[string]string)
	export := func(name string, args ...string) error {
		out, err := gpg(append([]string{"--armor"}, args...)...)
		if err != nil {
			return err
		}
		p := filepath.Join(dir, name+".asc")
		keys[name] = p
		return os.WriteFile(p, out, 0o600)
	}
	gen := func(name, algo, usage, expire string, extra ...string) (string, error) {
		uid := name + " <" + name + "@example.org>"
		args := append(extra, "--quick-gen-key", uid, algo, usage, expire)
		if _, err := gpg(args...); err != nil {
			return "", err
		}
		return fingerprint(uid)
	}
	nopass := []string{"--passphrase", ""}

	type spec struct {
		name, algo, usage, expire string
		extra                     []string
	}
	for _, s := range []spec{
		{"ed25519", "ed25519", "sign", "never", nopass},
		{"rsa3072-passphrase", "rsa3072", "sign", "never", []string{"--passphrase", "correct horse"}},
		{"rsa1024", "rsa1024", "sign", "never", nopass},
		{"dsa2048", "dsa2048", "sign", "never", nopass},
		{"expired", "ed25519", "sign", "1y", append([]string{"--faked-system-time", "20200101T000000!"}, nopass...)},
		{"cert-only", "ed25519", "cert", "never", nopass},
		{"revoked", "ed25519", "sign", "never", nopass},
		{"signing-subkey", "ed25519", "cert", "never", nopass},
		{"other", "ed25519", "sign", "never", nopass},
	} {
		fp, err := gen(s.name, s.algo, s.usage, s.expire, s.extra...)
		if err != nil {
			return nil, err
		}
		pass := "--passphrase="
		if s.name == "rsa3072-passphrase" {
			pass = "--passphrase=correct horse"
		}
		switch s.name {
		case "revoked":
			// GnuPG leaves a revocation certificate beside every key it
			// makes, its armor line defused with a ':'.
			rev, err := os.ReadFile(filepath.Join(home, "openpgp-revocs.d", fp+".rev"))
			if err != nil {
				return nil, err
			}
			rev = bytes.Replace(rev, []byte(":-----BEGIN"), []byte("-----BEGIN"), 1)
			revFile := filepath.Join(dir, "revoke.asc")
			if err := os.WriteFile(revFile, rev, 0o600); err != nil {
				return nil, err
			}
			if _, err := gpg("--import", revFile); err != nil {
				return nil, err
			}
		case "signing-subkey":
			if _, err := gpg("--passphrase", "", "--quick-add-key", fp, "ed25519", "sign", "never"); err != nil {
				return nil, err
			}
		}
		if err := export(s.name, pass, "--export-secret-keys", fp); err != nil {
			return nil, err
		}
		if s.name == "ed25519" {
			if err := export("public", "--export", fp); err != nil {
				return nil, err
			}
			// A stub: the primary's secret is replaced by a GNU dummy, as
			// for a key kept offline or on a smartcard.
			if err := export("stub", pass, "--export-secret-subkeys", fp); err != nil {
				return nil, err
			}
		}
	}
	// Two keys in one file.
	a, _ := os.ReadFile(keys["ed25519"])
	b, _ := os.ReadFile(keys["other"])
	two := filepath.Join(dir, "two.asc")
	if err := os.WriteFile(two, append(a, b...), 0o600); err != nil {
		return nil, err
	}
	keys["two"] = two
	return keys, nil
}
