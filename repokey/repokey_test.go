package repokey

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
)

func newKey(t *testing.T, name string) *openpgp.Entity {
	t.Helper()
	created := time.Unix(1700000000, 0)
	e, err := openpgp.NewEntity(name, "", "", &packet.Config{
		Algorithm: packet.PubKeyAlgoEdDSA, Curve: packet.Curve25519,
		Time: func() time.Time { return created },
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func armored(t *testing.T, ents ...*openpgp.Entity) []byte {
	t.Helper()
	var b bytes.Buffer
	w, err := armor.Encode(&b, openpgp.PublicKeyType, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if err := e.Serialize(w); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	return b.Bytes()
}

func fingerprints(t *testing.T, keyring []byte) []string {
	t.Helper()
	ents, err := openpgp.ReadKeyRing(bytes.NewReader(keyring))
	if err != nil {
		t.Fatalf("result is not a binary keyring: %v", err)
	}
	var fps []string
	for _, e := range ents {
		fps = append(fps, Fingerprint(e))
	}
	return fps
}

func TestFetch(t *testing.T) {
	pinned, other := newKey(t, "pinned"), newKey(t, "other")
	fp, otherFP := Fingerprint(pinned), Fingerprint(other)
	big := bytes.Repeat([]byte("x"), 4096)

	mux := http.NewServeMux()
	mux.HandleFunc("/key", func(w http.ResponseWriter, r *http.Request) { w.Write(armored(t, pinned)) })
	mux.HandleFunc("/binary", func(w http.ResponseWriter, r *http.Request) {
		bin, _ := Binary(openpgp.EntityList{pinned})
		w.Write(bin)
	})
	mux.HandleFunc("/two", func(w http.ResponseWriter, r *http.Request) { w.Write(armored(t, other, pinned)) })
	mux.HandleFunc("/other", func(w http.ResponseWriter, r *http.Request) { w.Write(armored(t, other)) })
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) { w.Write(big) })
	mux.HandleFunc("/bigchunked", func(w http.ResponseWriter, r *http.Request) {
		w.(http.Flusher).Flush() // no Content-Length: the cap must hold on the body itself
		w.Write(big)
	})
	plain := httptest.NewServer(mux)
	defer plain.Close()
	mux.HandleFunc("/tohttp", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, plain.URL+"/key", http.StatusFound)
	})
	mux.HandleFunc("/tohttps", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/key", http.StatusFound)
	})
	srv := httptest.NewTLSServer(mux)
	defer srv.Close()

	for _, tc := range []struct {
		name    string
		url     string
		fps     []string
		max     int64
		want    []string // fingerprints in the result
		wantErr []string // substrings of the error
	}{
		{name: "pinned armored, fingerprint spaced and lower case", url: srv.URL + "/key",
			fps: []string{strings.ToLower(fp[:20]) + " " + fp[20:]}, want: []string{fp}},
		{name: "pinned binary", url: srv.URL + "/binary", fps: []string{fp}, want: []string{fp}},
		{name: "extra unpinned key dropped", url: srv.URL + "/two", fps: []string{fp}, want: []string{fp}},
		{name: "mismatch", url: srv.URL + "/other", fps: []string{fp},
			wantErr: []string{srv.URL + "/other", fp, otherFP}},
		{name: "not found", url: srv.URL + "/missing", fps: []string{fp}, wantErr: []string{"404"}},
		{name: "http refused", url: plain.URL + "/key", fps: []string{fp}, wantErr: []string{"only https"}},
		{name: "redirect to http refused", url: srv.URL + "/tohttp", fps: []string{fp},
			wantErr: []string{"redirect to " + plain.URL, "only https"}},
		{name: "redirect to https followed", url: srv.URL + "/tohttps", fps: []string{fp}, want: []string{fp}},
		{name: "oversize refused", url: srv.URL + "/big", fps: []string{fp}, max: 1024, wantErr: []string{"1024-byte limit"}},
		{name: "oversize without length refused", url: srv.URL + "/bigchunked", fps: []string{fp}, max: 1024, wantErr: []string{"1024-byte limit"}},
		{name: "no fingerprint", url: srv.URL + "/key", wantErr: []string{"no pinned fingerprint"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := Fetcher{Client: srv.Client(), MaxSize: tc.max, Timeout: 10 * time.Second}
			got, err := f.Fetch(context.Background(), tc.url, tc.fps)
			if tc.wantErr != nil {
				if err == nil {
					t.Fatalf("no error, want one containing %q", tc.wantErr)
				}
				for _, s := range tc.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not contain %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if fps := fingerprints(t, got); strings.Join(fps, ",") != strings.Join(tc.want, ",") {
				t.Errorf("got keys %v, want %v", fps, tc.want)
			}
		})
	}
}

func TestFetchTimeoutAndContext(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	fp := Fingerprint(newKey(t, "k"))
	if _, err := (Fetcher{Client: srv.Client(), Timeout: 100 * time.Millisecond}).Fetch(context.Background(), srv.URL, []string{fp}); err == nil {
		t.Error("timeout: no error")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Fetch(ctx, srv.Client(), srv.URL, []string{fp}); err == nil {
		t.Error("cancelled context: no error")
	}
}

func TestReadFile(t *testing.T) {
	k := newKey(t, "file")
	dir := t.TempDir()
	asc := filepath.Join(dir, "key.asc")
	os.WriteFile(asc, armored(t, k), 0o644)
	bin, _ := Binary(openpgp.EntityList{k})
	gpg := filepath.Join(dir, "key.gpg")
	os.WriteFile(gpg, bin, 0o644)
	junk := filepath.Join(dir, "junk")
	os.WriteFile(junk, []byte("not a key"), 0o644)

	for _, tc := range []struct {
		name, path string
		wantErr    []string
	}{
		{name: "armored", path: asc},
		{name: "binary", path: gpg},
		{name: "missing", path: filepath.Join(dir, "nope"), wantErr: []string{"some_setting", "nope"}},
		{name: "garbage", path: junk, wantErr: []string{"some_setting", junk}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReadFile(tc.path, "some_setting")
			if tc.wantErr != nil {
				if err == nil {
					t.Fatal("no error")
				}
				for _, s := range tc.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not contain %q", err, s)
					}
				}
				return
			}
			if err != nil || !bytes.Equal(got, bin) {
				t.Errorf("err %v, same keyring %v", err, bytes.Equal(got, bin))
			}
		})
	}
}

// TestReadFileNotRegular: a keyring setting that names a device or a FIFO
// is refused at once, naming the setting (read whole, /dev/zero ran out of
// memory and a FIFO blocked for ever).
func TestReadFileNotRegular(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{fifo, "/dev/zero"} {
		t.Run(filepath.Base(path), func(t *testing.T) {
			done := make(chan error, 1)
			go func() {
				_, err := ReadFile(path, "nvidia_cuda_repo_keyring")
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), "nvidia_cuda_repo_keyring") || !strings.Contains(err.Error(), "not a regular file") {
					t.Errorf("ReadFile(%s): %v; want a refusal naming the setting", path, err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("ReadFile(%s) blocks", path)
			}
		})
	}
}
