package aptrepo

import (
	"bytes"
	"crypto"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/packet"

	"github.com/podvm-gpu/packer-plugin-podvm/keyfile"
)

// wallClock is the nodes' idea of now; tests move it.
var wallClock = time.Now

// Signer holds an OpenPGP key that signs repository indexes, and the public
// half that apt verifies them with.
type Signer struct {
	entity *openpgp.Entity
	key    openpgp.Key // the (sub)key that signs
	// validFrom is when the key, its signing (sub)key and their
	// self-signatures all exist: no signature is dated earlier.
	validFrom   time.Time
	fingerprint string
	keyring     []byte // binary public key export
	armored     []byte // the same, ASCII-armored
	source      string // for messages: the key file, or "ephemeral key"
}

// minRSABits is the smallest RSA modulus accepted; apt's sqv policy (and
// GnuPG's de-vs mode) refuse anything smaller.
const minRSABits = 2048

// NewEphemeralSigner returns a fresh Ed25519 signing key whose user ID is
// name and whose creation time is created (which must not be later than
// the Date of any repository it signs). The private half exists only in
// this process's memory; drop the Signer (or call Discard) after signing so
// that the repository can never be extended by anyone.
func NewEphemeralSigner(name string, created time.Time) (*Signer, error) {
	if strings.ContainsAny(name, "()<>\x00") {
		return nil, fmt.Errorf("ephemeral key name %q: must not contain any of ()<>", name)
	}
	created = created.UTC().Truncate(time.Second)
	cfg := &packet.Config{
		// EdDSA on Curve25519 in a v4 key ("EdDSALegacy") is what gpgv 2.2
		// (Debian 12, Ubuntu 22.04) understands; v6 Ed25519 keys are not.
		Algorithm:   packet.PubKeyAlgoEdDSA,
		Curve:       packet.Curve25519,
		DefaultHash: crypto.SHA512,
		Time:        func() time.Time { return created },
	}
	e, err := openpgp.NewEntity(name, "", "", cfg)
	if err != nil {
		return nil, fmt.Errorf("generate ephemeral key: %w", err)
	}
	// NewEntity adds an encryption subkey; a repository key never decrypts.
	e.Subkeys = nil
	key, ok := e.SigningKey(created)
	if !ok {
		return nil, errors.New("generate ephemeral key: new key cannot sign")
	}
	return newSigner(e, key, "ephemeral key")
}

// LoadSigner reads an ASCII-armored OpenPGP private key from path. If the
// key is protected by a passphrase, passphraseEnv names the environment
// variable holding it (the passphrase itself never appears on a command
// line). Keys apt would reject, or that are unusable at now (or, for a key
// made later, at its creation), are refused:
// RSA below 2048 bits, DSA, anything but v4 keys, expired or revoked keys,
// and keys without a signing-capable (sub)key.
func LoadSigner(path, passphraseEnv string, now time.Time) (*Signer, error) {
	data, err := keyfile.Read(path, "signing key", keyfile.MaxSize)
	if err != nil {
		return nil, err
	}
	// ReadArmoredKeyRing reads the first armored block only; a second one
	// would be silently ignored, so count them first.
	if n := bytes.Count(data, []byte("-----BEGIN PGP ")); n > 1 {
		return nil, fmt.Errorf("key %s: holds %d armored blocks, want exactly one key", path, n)
	}
	el, err := openpgp.ReadArmoredKeyRing(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("key %s: not an armored OpenPGP key: %w", path, err)
	}
	if len(el) != 1 {
		return nil, fmt.Errorf("key %s: holds %d keys, want exactly one", path, len(el))
	}
	e := el[0]
	fp := fmt.Sprintf("%X", e.PrimaryKey.Fingerprint)
	bad := func(format string, args ...any) error {
		return fmt.Errorf("key %s (%s): %s", path, fp, fmt.Sprintf(format, args...))
	}

	if e.PrivateKey == nil {
		return nil, bad("is a public key; a private key is needed to sign")
	}
	if err := checkAlgorithm(e.PrimaryKey); err != nil {
		return nil, bad("%v", err)
	}
	if e.Revoked(now) {
		return nil, bad("is revoked")
	}
	selfSig, ident := e.PrimarySelfSignature()
	if selfSig == nil {
		return nil, bad("has no valid self-signature")
	}
	if c := latest(e.PrimaryKey.CreationTime, selfSig.CreationTime); c.After(wallClock()) {
		return nil, bad("is created in the future (%s)", c.UTC().Format(time.RFC3339))
	}
	// A key made after the build date (cloud-api-adaptor's trees set
	// SOURCE_DATE_EPOCH=0) is checked, and signs, as of its creation.
	now = latest(now, e.PrimaryKey.CreationTime, selfSig.CreationTime)
	if e.PrimaryKey.KeyExpired(selfSig, now) {
		return nil, bad("expired on %s", keyExpiry(e.PrimaryKey, selfSig))
	}
	// Nodes verify with their own clock, not with SOURCE_DATE_EPOCH: a key
	// that was valid at an old build date but is not today signs nothing
	// apt will accept.
	if wall := wallClock(); wall.After(now) && (e.Revoked(wall) || e.PrimaryKey.KeyExpired(selfSig, wall)) {
		return nil, bad("is valid at the build date %s but expired or revoked now; nodes would refuse its signatures", now.UTC().Format(time.RFC3339))
	}
	if selfSig.SigExpired(now) || (ident != nil && ident.Revoked(now)) {
		return nil, bad("its self-signature has expired or its user ID is revoked")
	}
	key, ok := e.SigningKey(now)
	if !ok {
		return nil, bad("cannot sign: neither the primary key nor any valid subkey has the sign capability")
	}
	if key.PublicKey != e.PrimaryKey {
		if err := checkAlgorithm(key.PublicKey); err != nil {
			return nil, bad("signing subkey %X: %v", key.PublicKey.Fingerprint, err)
		}
	}
	if key.PrivateKey == nil || key.PrivateKey.Dummy() {
		return nil, bad("the secret part of signing key %X is not in the file (a stub for a smartcard or offline key?)", key.PublicKey.Fingerprint)
	}
	if key.PrivateKey.Encrypted {
		if passphraseEnv == "" {
			return nil, bad("is protected by a passphrase; name the environment variable holding it")
		}
		pass, ok := os.LookupEnv(passphraseEnv)
		if !ok {
			return nil, bad("is protected by a passphrase, and environment variable %s is not set", passphraseEnv)
		}
		if err := key.PrivateKey.Decrypt([]byte(pass)); err != nil {
			return nil, bad("cannot unlock with the passphrase from %s: %v", passphraseEnv, err)
		}
	}
	return newSigner(e, key, "key "+path)
}

// checkAlgorithm refuses keys that apt's verifiers reject, or that gpgv 2.2
// cannot read.
func checkAlgorithm(pk *packet.PublicKey) error {
	if pk.Version != 4 {
		return fmt.Errorf("is a v%d key; only v4 keys are verified by gpgv 2.2 (Debian 12, Ubuntu 22.04)", pk.Version)
	}
	switch pk.PubKeyAlgo {
	case packet.PubKeyAlgoRSA, packet.PubKeyAlgoRSASignOnly:
		bits, err := pk.BitLength()
		if err != nil {
			return err
		}
		if bits < minRSABits {
			return fmt.Errorf("is an RSA key of %d bits; apt needs at least %d", bits, minRSABits)
		}
	case packet.PubKeyAlgoEdDSA, packet.PubKeyAlgoECDSA:
	case packet.PubKeyAlgoDSA:
		return errors.New("is a DSA key, which apt no longer accepts; use Ed25519 or RSA >= 2048")
	default:
		return fmt.Errorf("uses public-key algorithm %d, which cannot sign apt repositories; use Ed25519 or RSA >= 2048", pk.PubKeyAlgo)
	}
	return nil
}

func keyExpiry(pk *packet.PublicKey, sig *packet.Signature) string {
	if sig.KeyLifetimeSecs == nil {
		return "?"
	}
	return pk.CreationTime.Add(time.Duration(*sig.KeyLifetimeSecs) * time.Second).UTC().Format(time.RFC3339)
}

func newSigner(e *openpgp.Entity, key openpgp.Key, source string) (*Signer, error) {
	var pub bytes.Buffer
	if err := serializePublic(&pub, e); err != nil {
		return nil, fmt.Errorf("%s: export public key: %w", source, err)
	}
	var arm bytes.Buffer
	if err := writeArmored(&arm, openpgp.PublicKeyType, pub.Bytes()); err != nil {
		return nil, err
	}
	primarySig, _ := e.PrimarySelfSignature()
	from := latest(e.PrimaryKey.CreationTime, sigTime(primarySig), key.PublicKey.CreationTime, sigTime(key.SelfSignature))
	return &Signer{
		entity:      e,
		key:         key,
		validFrom:   from.UTC().Truncate(time.Second),
		fingerprint: fmt.Sprintf("%X", e.PrimaryKey.Fingerprint),
		keyring:     pub.Bytes(),
		armored:     arm.Bytes(),
		source:      source,
	}, nil
}

// latest is the latest of ts.
func latest(ts ...time.Time) time.Time {
	var l time.Time
	for _, t := range ts {
		if t.After(l) {
			l = t
		}
	}
	return l
}

// sigTime is sig's creation time; the zero time for no signature.
func sigTime(sig *packet.Signature) time.Time {
	if sig == nil {
		return time.Time{}
	}
	return sig.CreationTime
}

// serializePublic writes the public half of e as a transferable public key.
// openpgp.Entity.Serialize ranges over a map of identities, so a key with
// several user IDs would come out in a different order each time; here
// they are sorted, which keeps keyring.gpg reproducible.
func serializePublic(w *bytes.Buffer, e *openpgp.Entity) error {
	if err := e.PrimaryKey.Serialize(w); err != nil {
		return err
	}
	for _, sig := range e.Revocations {
		if err := sig.Serialize(w); err != nil {
			return err
		}
	}
	for _, sig := range e.Signatures {
		if err := sig.Serialize(w); err != nil {
			return err
		}
	}
	names := make([]string, 0, len(e.Identities))
	for n := range e.Identities {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		id := e.Identities[n]
		if err := id.UserId.Serialize(w); err != nil {
			return err
		}
		for _, sig := range id.Signatures {
			if err := sig.Serialize(w); err != nil {
				return err
			}
		}
	}
	for _, sk := range e.Subkeys {
		if err := sk.PublicKey.Serialize(w); err != nil {
			return err
		}
		for _, sig := range sk.Revocations {
			if err := sig.Serialize(w); err != nil {
				return err
			}
		}
		if err := sk.Sig.Serialize(w); err != nil {
			return err
		}
	}
	return nil
}

// Fingerprint returns the primary key's fingerprint in upper-case hex.
func (s *Signer) Fingerprint() string { return s.fingerprint }

// PublicKeyring returns the public key as a binary OpenPGP export, the
// format apt expects in a .gpg keyring file.
func (s *Signer) PublicKeyring() []byte { return bytes.Clone(s.keyring) }

// ArmoredPublicKey returns the public key ASCII-armored, for .asc keyring
// files and for inline Signed-By blocks.
func (s *Signer) ArmoredPublicKey() []byte { return bytes.Clone(s.armored) }

// Discard drops the private key material, after which the Signer can no
// longer sign. Go cannot promise the memory is wiped, but nothing refers to
// it any more.
func (s *Signer) Discard() {
	s.key.PrivateKey = nil
	s.entity.PrivateKey = nil
	for i := range s.entity.Subkeys {
		s.entity.Subkeys[i].PrivateKey = nil
	}
}

// config returns the signing configuration for a signature made at t.
// Randomizing notations are off: Ed25519 and RSA PKCS#1 v1.5 signatures are
// deterministic, and without a random salt the same input signs to the same
// bytes, which is what makes the repository reproducible.
func (s *Signer) config(at time.Time) (*packet.Config, error) {
	if s.key.PrivateKey == nil {
		return nil, fmt.Errorf("%s: private key discarded", s.source)
	}
	at = at.UTC().Truncate(time.Second)
	// Verifiers reject a signature older than its key, so one asked for
	// before the key existed is dated when it did: still the same bytes
	// for the same key and inputs, and the Release Date keeps the time
	// asked for.
	if at.Before(s.validFrom) {
		at = s.validFrom
	}
	if _, ok := s.entity.SigningKeyById(at, s.key.PublicKey.KeyId); !ok {
		return nil, fmt.Errorf("%s: signing key %X is not valid at the repository Date %s (expired or revoked by then)",
			s.source, s.key.PublicKey.Fingerprint, at.Format(time.RFC3339))
	}
	return &packet.Config{
		DefaultHash:                           crypto.SHA512,
		Time:                                  func() time.Time { return at },
		SigningKeyId:                          s.key.PublicKey.KeyId,
		NonDeterministicSignaturesViaNotation: packet.BoolPointer(false),
	}, nil
}

// clearsign returns msg, which must end in a newline, as an OpenPGP
// cleartext-signed message (InRelease).
//
// It is assembled here rather than with go-crypto's clearsign package for
// two reasons. That package leaves out the armor checksum, and gpgv 2.2
// (what apt runs on Debian 12 and Ubuntu 22.04) then misreads a signature
// whose base64 needs no padding as running into the END line, so about one
// RSA signature in three fails to verify. And it signs the final newline
// too, adding a blank line before the signature; here the output is the
// form gpg --clearsign writes, as Debian's own InRelease files are.
func (s *Signer) clearsign(msg []byte, at time.Time) ([]byte, error) {
	text, ok := bytes.CutSuffix(msg, []byte("\n"))
	if !ok {
		return nil, errors.New("clearsign: message does not end in a newline")
	}
	// Verifiers drop trailing blanks from each line before hashing; the
	// signature must be made over the same text.
	for _, line := range bytes.Split(text, []byte("\n")) {
		if len(line) > 0 && (line[len(line)-1] == ' ' || line[len(line)-1] == '\t') {
			return nil, fmt.Errorf("clearsign: line %q ends in a blank", line)
		}
	}
	cfg, err := s.config(at)
	if err != nil {
		return nil, err
	}
	var sig bytes.Buffer
	if err := openpgp.DetachSignText(&sig, s.entity, bytes.NewReader(text), cfg); err != nil {
		return nil, fmt.Errorf("%s: sign: %w", s.source, err)
	}
	p, err := packet.Read(bytes.NewReader(sig.Bytes()))
	if err != nil {
		return nil, fmt.Errorf("%s: read back signature: %w", s.source, err)
	}
	sp, ok := p.(*packet.Signature)
	if !ok {
		return nil, fmt.Errorf("%s: read back signature: got %T", s.source, p)
	}
	hashName, ok := armorHashNames[sp.Hash]
	if !ok {
		return nil, fmt.Errorf("%s: signature digest %v has no armor name", s.source, sp.Hash)
	}

	var out bytes.Buffer
	out.WriteString("-----BEGIN PGP SIGNED MESSAGE-----\nHash: " + hashName + "\n\n")
	for _, line := range bytes.SplitAfter(text, []byte("\n")) {
		if bytes.HasPrefix(line, []byte("-")) {
			out.WriteString("- ") // dash escape (RFC 4880, 7.1)
		}
		out.Write(line)
	}
	out.WriteByte('\n')
	if err := writeArmored(&out, "PGP SIGNATURE", sig.Bytes()); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

var armorHashNames = map[crypto.Hash]string{
	crypto.SHA256: "SHA256",
	crypto.SHA384: "SHA384",
	crypto.SHA512: "SHA512",
}

// writeArmored armors data with the CRC-24 checksum line, which gpgv 2.2
// needs (see clearsign), and a final newline.
func writeArmored(out *bytes.Buffer, blockType string, data []byte) error {
	w, err := armor.Encode(out, blockType, nil)
	if err != nil {
		return err
	}
	if _, err := w.Write(data); err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	out.WriteByte('\n')
	return nil
}

// DetachSign returns an armored detached signature of msg made at the
// given time: the build's record (manifest, SBOM) is signed as Release is.
func (s *Signer) DetachSign(msg []byte, at time.Time) ([]byte, error) {
	return s.detachSign(msg, at)
}

// detachSign returns an armored detached signature of msg (Release.gpg).
func (s *Signer) detachSign(msg []byte, at time.Time) ([]byte, error) {
	cfg, err := s.config(at)
	if err != nil {
		return nil, err
	}
	var sig bytes.Buffer
	if err := openpgp.DetachSign(&sig, s.entity, bytes.NewReader(msg), cfg); err != nil {
		return nil, fmt.Errorf("%s: sign: %w", s.source, err)
	}
	var out bytes.Buffer
	if err := writeArmored(&out, "PGP SIGNATURE", sig.Bytes()); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}
