package aptrepo

import (
	"bytes"
	"crypto"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
)

func TestLoadSignerRefuses(t *testing.T) {
	keys := gpgFixtures(t)
	dir := t.TempDir()
	notKey := filepath.Join(dir, "not-a-key.asc")
	os.WriteFile(notKey, []byte("hello\n"), 0o600)
	v6 := filepath.Join(dir, "v6.asc")
	writeV6Key(t, v6)
	t.Setenv("APTREPO_TEST_WRONG", "wrong horse")

	tests := []struct {
		name, file, env, want string
	}{
		{"missing file", filepath.Join(dir, "nope.asc"), "", "no such file"},
		{"not a key", notKey, "", "not an armored OpenPGP key"},
		{"public key", keys["public"], "", "is a public key"},
		{"two keys", keys["two"], "", "holds 2 armored blocks"},
		{"RSA 1024", keys["rsa1024"], "", "RSA key of 1024 bits"},
		{"DSA", keys["dsa2048"], "", "DSA key"},
		{"expired", keys["expired"], "", "expired on 2020-12-31"},
		{"revoked", keys["revoked"], "", "is revoked"},
		{"cannot sign", keys["cert-only"], "", "cannot sign"},
		{"stub", keys["stub"], "", "not in the file"},
		{"v6", v6, "", "v6 key"},
		{"passphrase not named", keys["rsa3072-passphrase"], "", "protected by a passphrase; name the environment variable"},
		{"passphrase variable unset", keys["rsa3072-passphrase"], "APTREPO_TEST_UNSET", "APTREPO_TEST_UNSET is not set"},
		{"wrong passphrase", keys["rsa3072-passphrase"], "APTREPO_TEST_WRONG", "cannot unlock"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := LoadSigner(tt.file, tt.env, time.Now())
			if err == nil {
				t.Fatalf("LoadSigner(%s) accepted key %s", tt.file, s.Fingerprint())
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), tt.file) {
				t.Errorf("LoadSigner: %q; want it to name %s and say %q", err, tt.file, tt.want)
			}
		})
	}
}

// writeV6Key writes an RFC 9580 (v6) Ed25519 key, which gpgv 2.2 cannot
// verify.
func writeV6Key(t *testing.T, path string) {
	cfg := &packet.Config{V6Keys: true, Algorithm: packet.PubKeyAlgoEd25519}
	e, err := openpgp.NewEntity("v6", "", "", cfg)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w, _ := armor.Encode(&buf, openpgp.PrivateKeyType, nil)
	if err := e.SerializePrivate(w, cfg); err != nil {
		t.Fatal(err)
	}
	w.Close()
	os.WriteFile(path, buf.Bytes(), 0o600)
}

// signers returns every kind of Signer that must produce signatures apt
// accepts.
func signers(t *testing.T) map[string]*Signer {
	t.Helper()
	out := map[string]*Signer{"ephemeral": testSigner(t, testDate)}
	if !have(t, "gpg") {
		return out
	}
	keys := gpgFixtures(t)
	t.Setenv("APTREPO_TEST_PASS", "correct horse")
	now := time.Now()
	for name, env := range map[string]string{"ed25519": "", "rsa3072-passphrase": "APTREPO_TEST_PASS", "signing-subkey": ""} {
		s, err := LoadSigner(keys[name], env, now)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = s
	}
	return out
}

// TestSignaturesVerify signs with each kind of key and checks the result
// with gpgv (what apt 2.6 runs), sqv (what apt >= 2.9.19 runs) and
// go-crypto itself, and checks the digest and creation time in the
// signature packets.
func TestSignaturesVerify(t *testing.T) {
	msg := []byte("Origin: test\nDate: Wed, 01 May 2024 12:00:00 UTC\n-dash line\nSHA256:\n abc 1 Packages\n")
	for name, s := range signers(t) {
		t.Run(name, func(t *testing.T) {
			date := time.Now().Truncate(time.Second)
			if name == "ephemeral" {
				date = testDate
			}
			checkSigner(t, s, msg, date, date)
			// A build date before the key (SOURCE_DATE_EPOCH=0 in
			// cloud-api-adaptor's trees): the signatures are dated at the
			// key's creation, and verify.
			checkSigner(t, s, msg, time.Unix(0, 0), s.validFrom)
		})
	}
}

// checkSigner signs msg as of date with s, both ways, checks that the
// signatures are dated want, and verifies them with go-crypto, gpgv and
// sqv.
func checkSigner(t *testing.T, s *Signer, msg []byte, date, want time.Time) {
	t.Helper()
	dir := t.TempDir()
	in, det := signBoth(t, s, msg, date)
	// write, returning the path.
	put := func(n string, b []byte) string {
		write(t, dir, n, b)
		return filepath.Join(dir, n)
	}
	release := put("Release", msg)
	inRelease := put("InRelease", in)
	releaseGPG := put("Release.gpg", det)
	keyring := put("keyring.gpg", s.PublicKeyring())
	put("keyring.asc", s.ArmoredPublicKey())

	for _, sig := range []*packet.Signature{parseSig(t, det), parseSig(t, clearsignedSig(t, in))} {
		if sig.Hash != crypto.SHA512 && sig.Hash != crypto.SHA256 {
			t.Errorf("signature digest %v, want SHA256 or SHA512", sig.Hash)
		}
		if !sig.CreationTime.Equal(want) {
			t.Errorf("signature made at %v, want %v", sig.CreationTime, want)
		}
		if len(sig.Notations) != 0 {
			t.Errorf("signature carries notations %v", sig.Notations)
		}
	}

	// go-crypto, from the armored export.
	kr, err := openpgp.ReadArmoredKeyRing(bytes.NewReader(s.ArmoredPublicKey()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := openpgp.CheckArmoredDetachedSignature(kr, bytes.NewReader(msg), bytes.NewReader(det), nil); err != nil {
		t.Errorf("go-crypto: Release.gpg: %v", err)
	}
	if len(kr) != 1 || kr[0].PrivateKey != nil {
		t.Errorf("public export holds %d entities, private key %v", len(kr), kr[0].PrivateKey != nil)
	}

	if have(t, "gpgv") {
		run(t, "gpgv", "--keyring", keyring, inRelease)
		run(t, "gpgv", "--keyring", keyring, releaseGPG, release)
		// A few more messages through gpgv: RSA signatures whose
		// armor needs no base64 padding once failed there.
		for i := range 6 {
			m := append(bytes.Repeat([]byte("x"), i), '\n')
			in, err := s.clearsign(m, date)
			if err != nil {
				t.Fatal(err)
			}
			run(t, "gpgv", "--keyring", keyring, put("InRelease.n", in))
		}
		// An InRelease edited after signing fails.
		bad := put("InRelease.bad", bytes.Replace(in, []byte("Origin: test"), []byte("Origin: evil"), 1))
		runFails(t, "gpgv", "--keyring", keyring, bad)
	}
	sqvVerify(t, dir, keyring, msg, in, det)
}

// sqvVerify checks both signatures with sqv, as apt >= 2.9.19 does: it
// splits InRelease into message and signature itself and hands sqv a
// detached signature.
func sqvVerify(t *testing.T, dir, keyring string, msg, inRelease, releaseGPG []byte) {
	t.Helper()
	if !have(t, "sqv") {
		return
	}
	text, sig := splitClearsigned(t, inRelease)
	if !bytes.Equal(append(bytes.Clone(text), '\n'), msg) {
		t.Errorf("InRelease message %q, want %q", text, msg)
	}
	for i, pair := range [][2][]byte{{releaseGPG, msg}, {sig, text}} {
		s := filepath.Join(dir, "sqv.sig")
		m := filepath.Join(dir, "sqv.msg")
		os.WriteFile(s, pair[0], 0o644)
		os.WriteFile(m, pair[1], 0o644)
		// sqv's default policy is "now": signatures from the future fail.
		run(t, "sqv", "--keyring", keyring, s, m)
		os.WriteFile(m, append(bytes.Clone(pair[1]), '!'), 0o644)
		if out, err := exec.Command("sqv", "--keyring", keyring, s, m).CombinedOutput(); err == nil {
			t.Errorf("sqv accepted a changed message (case %d): %s", i, out)
		}
	}
}

// splitClearsigned does what apt's SplitClearSignedFile does: the message
// between the armor header's blank line and the signature, dash-escapes
// undone and the final line break dropped, and the signature block.
func splitClearsigned(t *testing.T, b []byte) (msg, sig []byte) {
	t.Helper()
	s := string(b)
	const begin = "-----BEGIN PGP SIGNED MESSAGE-----\n"
	const sigBegin = "\n-----BEGIN PGP SIGNATURE-----\n"
	if !strings.HasPrefix(s, begin) {
		t.Fatalf("InRelease does not start with %q", begin)
	}
	s = s[len(begin):]
	_, s, ok := strings.Cut(s, "\n\n") // armor headers ("Hash: ...")
	if !ok {
		t.Fatal("InRelease: no end of armor headers")
	}
	text, sigPart, ok := strings.Cut(s, sigBegin)
	if !ok {
		t.Fatal("InRelease: no signature")
	}
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimPrefix(l, "- ")
	}
	return []byte(strings.Join(lines, "\n")), []byte(sigBegin[1:] + sigPart)
}

func clearsignedSig(t *testing.T, b []byte) []byte {
	_, sig := splitClearsigned(t, b)
	return sig
}

func parseSig(t *testing.T, armored []byte) *packet.Signature {
	t.Helper()
	block, err := armor.Decode(bytes.NewReader(armored))
	if err != nil {
		t.Fatal(err)
	}
	p, err := packet.Read(block.Body)
	if err != nil {
		t.Fatal(err)
	}
	sig, ok := p.(*packet.Signature)
	if !ok {
		t.Fatalf("packet %T, want a signature", p)
	}
	return sig
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func runFails(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err == nil {
		t.Fatalf("%s %s succeeded, want failure\n%s", name, strings.Join(args, " "), out)
	}
	return string(out)
}

func TestSignerTimes(t *testing.T) {
	s := testSigner(t, testDate)
	// Asked for before the key existed, a signature is dated when it did.
	if det, err := s.detachSign([]byte("x\n"), testDate.Add(-time.Hour)); err != nil {
		t.Errorf("signing before the key's creation: %v", err)
	} else if got := parseSig(t, det).CreationTime; !got.Equal(testDate) {
		t.Errorf("signing before the key's creation: dated %v, want the key's creation %v", got, testDate)
	}
	if _, err := s.detachSign([]byte("x\n"), testDate.Add(time.Hour)); err != nil {
		t.Errorf("signing after creation: %v", err)
	}
	if len(s.Fingerprint()) != 40 {
		t.Errorf("fingerprint %q", s.Fingerprint())
	}
	s.Discard()
	if _, err := s.clearsign([]byte("x\n"), testDate); err == nil || !strings.Contains(err.Error(), "discarded") {
		t.Errorf("signing after Discard: %v", err)
	}

	if _, err := NewEphemeralSigner("bad <name>", testDate); err == nil {
		t.Error("NewEphemeralSigner accepted a name with <>")
	}

	keys := gpgFixtures(t)
	// A build date before the key was made (SOURCE_DATE_EPOCH=0): loaded,
	// and it signs as of its creation (TestSignaturesVerify).
	if _, err := LoadSigner(keys["ed25519"], "", time.Unix(0, 0)); err != nil {
		t.Errorf("LoadSigner at SOURCE_DATE_EPOCH=0: %v", err)
	}

	// A key that expires: valid at load time, refused for a Date after it.
	// Load it as if today were the build date; LoadSigner refuses keys
	// that have expired by the real today (TestLoadSignerExpiredToday).
	wallClock = func() time.Time { return time.Date(2020, 6, 1, 0, 0, 0, 0, time.UTC) }
	defer func() { wallClock = time.Now }()
	exp, err := LoadSigner(keys["expired"], "", time.Date(2020, 6, 1, 0, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exp.clearsign([]byte("x\n"), time.Date(2022, 1, 1, 0, 0, 0, 0, time.UTC)); err == nil || !strings.Contains(err.Error(), "not valid at the repository Date") {
		t.Errorf("signing after expiry: %v", err)
	}
}

// TestEphemeralKeyOnlyInMemory checks that making an ephemeral key and
// building with it writes no secret anywhere: the output holds public key
// material only.
func TestEphemeralKeyOnlyInMemory(t *testing.T) {
	s := testSigner(t, testDate)
	for _, b := range [][]byte{s.PublicKeyring(), s.ArmoredPublicKey()} {
		r := bytes.NewReader(b)
		var el openpgp.EntityList
		var err error
		if bytes.HasPrefix(b, []byte("-----")) {
			el, err = openpgp.ReadArmoredKeyRing(r)
		} else {
			el, err = openpgp.ReadKeyRing(r)
		}
		if err != nil || len(el) != 1 || el[0].PrivateKey != nil || len(el[0].Subkeys) != 0 {
			t.Fatalf("public export: %v, %d entities", err, len(el))
		}
		if el[0].PrimaryKey.PubKeyAlgo != packet.PubKeyAlgoEdDSA {
			t.Errorf("algorithm %v, want EdDSA (Ed25519)", el[0].PrimaryKey.PubKeyAlgo)
		}
		if !el[0].PrimaryKey.CreationTime.Equal(testDate) {
			t.Errorf("key created %v, want %v", el[0].PrimaryKey.CreationTime, testDate)
		}
	}
}
