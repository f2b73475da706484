package gpu

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/clearsign"

	"github.com/podvm-gpu/packer-plugin-podvm/bake"
	"github.com/podvm-gpu/packer-plugin-podvm/repokey"
)

func TestFetchKey(t *testing.T) {
	keyPath, fp := testKey(t)
	armored, err := os.ReadFile(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/gpgkey" {
			http.NotFound(w, r)
			return
		}
		w.Write(armored)
	}))
	defer srv.Close()
	ctx := context.Background()

	bin, err := repokey.Fetch(ctx, srv.Client(), srv.URL+"/gpgkey", []string{strings.ToLower(fp[:20]) + " " + fp[20:]})
	if err != nil {
		t.Fatal(err)
	}
	// The result is a binary keyring apt reads as .gpg.
	ents, err := openpgp.ReadKeyRing(bytes.NewReader(bin))
	if err != nil || len(ents) != 1 || fmt.Sprintf("%X", ents[0].PrimaryKey.Fingerprint) != fp {
		t.Fatalf("keyring: %v, %d entities", err, len(ents))
	}
	if _, err := repokey.Fetch(ctx, srv.Client(), srv.URL+"/gpgkey", []string{"C95B321B61E88C1809C4F759DDCAE044F796ECB0"}); err == nil || !strings.Contains(err.Error(), fp) {
		t.Errorf("wrong fingerprint: error %v, want one naming the key's fingerprint", err)
	}
	if _, err := repokey.Fetch(ctx, srv.Client(), srv.URL+"/missing", []string{fp}); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("missing key: error %v", err)
	}
	if _, err := repokey.Fetch(ctx, srv.Client(), strings.Replace(srv.URL, "https", "http", 1)+"/gpgkey", []string{fp}); err == nil {
		t.Error("plain http accepted")
	}
	// A key file is dearmored as is.
	bin2, err := repokey.ReadFile(keyPath, "test_key")
	if err != nil || !bytes.Equal(bin, bin2) {
		t.Errorf("keyFile: %v, same bytes %v", err, bytes.Equal(bin, bin2))
	}
}

// TestFetchedKeyMismatchFailsStep runs the default toolkit key path (a URL
// with a pinned fingerprint) against a server that serves another key.
func TestFetchedKeyMismatchFailsStep(t *testing.T) {
	keyPath, _ := testKey(t)
	armored, _ := os.ReadFile(keyPath)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(armored) }))
	defer srv.Close()
	p := newTestProvisioner(t, nil)
	// Every https request goes to the test server, whatever the host.
	client := srv.Client()
	tr := client.Transport.(*http.Transport).Clone()
	tr.DialTLSContext = nil
	tr.DialContext = func(ctx context.Context, network, _ string) (netConn, error) {
		return (&netDialer{}).DialContext(ctx, network, srv.Listener.Addr().String())
	}
	tr.TLSClientConfig.InsecureSkipVerify = true
	p.httpClient = &http.Client{Transport: tr}
	comm := newFakeComm(debian13())
	err := provision(t, p, comm)
	var serr *StepError
	if !errorsAs(err, &serr) || serr.ID != "toolkit-repo" || !strings.Contains(err.Error(), "C95B321B61E88C1809C4F759DDCAE044F796ECB0") {
		t.Fatalf("error %v, want step toolkit-repo to fail on the fingerprint", err)
	}
	for _, l := range comm.log {
		if strings.Contains(l, "podvm-nvidia-container-toolkit.gpg") {
			t.Errorf("a key that failed its check reached the image: %s", l)
		}
	}
}

// makeDeb builds a tiny .deb with dpkg-deb.
func makeDeb(t *testing.T, dir, name, version, depends string) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(filepath.Join(root, "DEBIAN"), 0o755); err != nil {
		t.Fatal(err)
	}
	control := fmt.Sprintf("Package: %s\nVersion: %s\nArchitecture: amd64\nMaintainer: test <t@example.org>\nDescription: test package\n", name, version)
	if depends != "" {
		control += "Depends: " + depends + "\n"
	}
	if err := os.WriteFile(filepath.Join(root, "DEBIAN", "control"), []byte(control), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, fmt.Sprintf("%s_%s_amd64.deb", name, version))
	if b, err := exec.Command("dpkg-deb", "--root-owner-group", "-Zgzip", "--build", root, out).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb: %v\n%s", err, b)
	}
	return out
}

// TestBakeWithAptrepo runs the bake with the real indexer and real .debs:
// the index and keyring that reach the image verify each other, and the
// manifests list every package with its SHA256.
func TestBakeWithAptrepo(t *testing.T) {
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		t.Skip("dpkg-deb not installed")
	}
	img := debian13()
	img.debs = map[string][]byte{}
	dir := t.TempDir()
	for _, d := range [][3]string{
		{"linux-headers-6.12.57+deb13-amd64", "6.12.57-1", "linux-headers-6.12.57+deb13-common"},
		{"linux-headers-6.12.57+deb13-common", "6.12.57-1", ""},
		{"linux-image-6.12.57+deb13-amd64", "6.12.57-1", ""},
	} {
		path := makeDeb(t, dir, d[0], d[1], d[2])
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		img.debs[filepath.Base(path)] = data
	}
	p := newTestProvisioner(t, map[string]interface{}{"enable_nvidia_gpu": "no", "local_repo": "yes"})
	p.indexer = bake.IndexRepo
	comm := newFakeComm(img)
	if err := provision(t, p, comm); err != nil {
		t.Fatal(err)
	}
	uploaded := func(suffix string) []byte {
		for path, data := range comm.uploads {
			if strings.HasSuffix(path, "."+suffix) {
				return data
			}
		}
		t.Fatalf("%s was not uploaded; uploads: %v", suffix, sortedKeys(comm.uploads))
		return nil
	}
	keyring, err := openpgp.ReadKeyRing(bytes.NewReader(uploaded("podvm-local-packages.gpg")))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := clearsign.Decode(uploaded("InRelease"))
	if block == nil {
		t.Fatal("InRelease is not clearsigned")
	}
	if _, err := block.VerifySignature(keyring, nil); err != nil {
		t.Fatalf("InRelease does not verify with the uploaded keyring: %v", err)
	}
	if !bytes.Equal(uploaded("keyring.gpg"), uploaded("podvm-local-packages.gpg")) {
		t.Error("the repo's keyring.gpg and the image keyring differ")
	}
	packages := string(uploaded("Packages"))
	var m bake.Manifest
	if err := json.Unmarshal(uploaded("manifest.json"), &m); err != nil {
		t.Fatal(err)
	}
	if m.Repo == nil || len(m.Repo.Packages) != len(img.debs) || m.GPU != nil {
		t.Fatalf("manifest %+v", m)
	}
	for _, pk := range m.Repo.Packages {
		sum := sha256.Sum256(img.debs[pk.Filename])
		if pk.SHA256 != hex.EncodeToString(sum[:]) {
			t.Errorf("%s: manifest sha256 %s, want %x", pk.Filename, pk.SHA256, sum)
		}
		if !strings.Contains(packages, "Filename: "+pk.Filename+"\n") {
			t.Errorf("Packages lacks %s", pk.Filename)
		}
	}
	host, err := os.ReadFile(filepath.Join(p.options.OutputDir, bake.ManifestFile))
	if err != nil || !bytes.Equal(host, uploaded("manifest.json")) {
		t.Errorf("host manifest differs from the image's (%v)", err)
	}
	// The private key never reaches the image.
	for path, data := range comm.uploads {
		if bytes.Contains(data, []byte("PRIVATE KEY")) {
			t.Errorf("%s holds a private key", path)
		}
	}
}

type (
	netConn   = net.Conn
	netDialer = net.Dialer
)

func errorsAs(err error, target any) bool { return errors.As(err, target) }
