package modcache

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// nobody is a uid that is neither root nor the test's user.
const nobody = 65534

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("PODVM_REQUIRE_ROOT") != "" {
		t.Fatal("PODVM_REQUIRE_ROOT is set and the test does not run as root")
	}
	t.Skip("needs root to chown to another user")
}

// getWithin runs Get with a deadline: a FIFO or a device read through a
// link must not hang the build.
func getWithin(t *testing.T, c *Cache, inputs string) ([]byte, error) {
	t.Helper()
	type result struct {
		data []byte
		err  error
	}
	done := make(chan result, 1)
	go func() {
		f, err := c.Get(inputs)
		if err != nil || f == nil {
			done <- result{nil, err}
			return
		}
		defer f.Close()
		data, err := io.ReadAll(f)
		if data == nil {
			data = []byte{}
		}
		done <- result{data, err}
	}()
	select {
	case r := <-done:
		return r.data, r.err
	case <-time.After(10 * time.Second):
		t.Fatal("Get hangs")
		return nil, nil
	}
}

// setRecord rewrites an entry's record to claim sum and size for its
// archive, as a tamperer who also controls the record would.
func setRecord(t *testing.T, entry string, data []byte) {
	t.Helper()
	p := filepath.Join(entry, entryMeta)
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var m meta
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	m.SHA256, m.Size = hex.EncodeToString(sum[:]), int64(len(data))
	raw, err = json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, raw, 0o644); err != nil {
		t.Fatal(err)
	}
}

func replaceWithLink(t *testing.T, p, target string) {
	t.Helper()
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}

func replaceWithFIFO(t *testing.T, p string) {
	t.Helper()
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestGetRefusesUntrustedEntries: an entry's files are read without
// following links, only when regular, owned by a trusted user and of
// bounded size; a refused entry is evicted (the link, never its target)
// and the refusal never tells the hash or size of a host file.
func TestGetRefusesUntrustedEntries(t *testing.T) {
	const in = "module nvidia-current 550\nkernel 6.12.1\n"
	stored := []byte("tar archive bytes")
	hostData := []byte("the host's /etc/shadow, say")
	hostSum := sha256.Sum256(hostData)
	// The size as a number of its own, not digits of a temporary path.
	hostSize := regexp.MustCompile(`\b` + strconv.Itoa(len(hostData)) + `\b`)
	tests := []struct {
		name   string
		damage func(t *testing.T, c *Cache, entry, host string)
		root   bool
	}{
		{"archive linked to a host file, record matching it", func(t *testing.T, c *Cache, entry, host string) {
			replaceWithLink(t, filepath.Join(entry, entryTar), host)
			setRecord(t, entry, hostData)
		}, false},
		{"archive linked to a host file that differs", func(t *testing.T, c *Cache, entry, host string) {
			replaceWithLink(t, filepath.Join(entry, entryTar), host)
		}, false},
		{"archive a FIFO", func(t *testing.T, c *Cache, entry, host string) {
			replaceWithFIFO(t, filepath.Join(entry, entryTar))
		}, false},
		{"archive writable by others", func(t *testing.T, c *Cache, entry, host string) {
			if err := os.Chmod(filepath.Join(entry, entryTar), 0o666); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"archive larger than the cache may hold", func(t *testing.T, c *Cache, entry, host string) {
			c.MaxSize = int64(len(stored)) - 1
		}, false},
		{"archive owned by another user", func(t *testing.T, c *Cache, entry, host string) {
			if err := os.Chown(filepath.Join(entry, entryTar), nobody, -1); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"record linked to /dev/zero", func(t *testing.T, c *Cache, entry, host string) {
			replaceWithLink(t, filepath.Join(entry, entryMeta), "/dev/zero")
		}, false},
		{"record a FIFO", func(t *testing.T, c *Cache, entry, host string) {
			replaceWithFIFO(t, filepath.Join(entry, entryMeta))
		}, false},
		{"record of 2 MiB", func(t *testing.T, c *Cache, entry, host string) {
			p := filepath.Join(entry, entryMeta)
			raw, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			// Still valid JSON: only the size is wrong with it.
			if err := os.WriteFile(p, append(raw, bytes.Repeat([]byte(" "), 2<<20)...), 0o644); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"entry directory linked to an entry outside the cache", func(t *testing.T, c *Cache, entry, host string) {
			outside := filepath.Join(filepath.Dir(host), "planted")
			if err := os.Rename(entry, outside); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(outside, entry); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"entry directory writable by others", func(t *testing.T, c *Cache, entry, host string) {
			if err := os.Chmod(entry, 0o777); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"entry directory owned by another user", func(t *testing.T, c *Cache, entry, host string) {
			if err := os.Chown(entry, nobody, -1); err != nil {
				t.Fatal(err)
			}
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.root {
				needRoot(t)
			}
			base := t.TempDir()
			host := filepath.Join(base, "host", "victim")
			if err := os.MkdirAll(filepath.Dir(host), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(host, hostData, 0o600); err != nil {
				t.Fatal(err)
			}
			c := New(Dir(filepath.Join(base, "cache")), 0)
			if err := c.Put(in, bytes.NewReader(stored)); err != nil {
				t.Fatal(err)
			}
			entry := filepath.Join(c.Dir, Key(in))
			tt.damage(t, c, entry, host)

			got, err := getWithin(t, c, in)
			if got != nil || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("got %q, %v; want a refusal wrapping ErrCorrupt", got, err)
			}
			msg := err.Error()
			if strings.Contains(msg, hex.EncodeToString(hostSum[:])) || hostSize.MatchString(msg) {
				t.Errorf("the refusal tells the host file's hash or size: %v", err)
			}
			if _, err := os.Lstat(entry); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the refused entry is still there: %v", err)
			}
			if data, err := os.ReadFile(host); err != nil || !bytes.Equal(data, hostData) {
				t.Errorf("the host file was touched: %q, %v", data, err)
			}
			if tt.name == "entry directory linked to an entry outside the cache" {
				if _, err := os.Stat(filepath.Join(filepath.Dir(host), "planted", entryTar)); err != nil {
					t.Errorf("eviction removed the link's target: %v", err)
				}
			}
			// The next build stores a good entry again.
			c.MaxSize = 0
			if err := c.Put(in, bytes.NewReader(stored)); err != nil {
				t.Fatal(err)
			}
			if got, err := getWithin(t, c, in); err != nil || !bytes.Equal(got, stored) {
				t.Errorf("after the refusal: got %q, %v; want the stored archive", got, err)
			}
		})
	}
}

// TestEveryLevelChecked: a level between the cache root and the entries
// that another user could write, or that is a link, disables the cache:
// nothing is read from it or stored in it.
func TestEveryLevelChecked(t *testing.T) {
	const in = "inputs"
	stored := []byte("tar archive bytes")
	tests := []struct {
		name  string
		level string // below the root
		do    func(t *testing.T, p string)
		root  bool
	}{
		{"root writable by others", ".", chmodTo(0o777), false},
		{"modules writable by group", "modules", chmodTo(0o775), false},
		{"layout directory writable by others", "modules/" + layout, chmodTo(0o777), false},
		{"modules a link", "modules", func(t *testing.T, p string) {
			if err := os.Rename(p, p+".real"); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(p+".real", p); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"modules owned by another user", "modules", func(t *testing.T, p string) {
			if err := os.Chown(p, nobody, -1); err != nil {
				t.Fatal(err)
			}
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.root {
				needRoot(t)
			}
			root := filepath.Join(t.TempDir(), "cache")
			c := New(Dir(root), 0)
			if err := c.Put(in, bytes.NewReader(stored)); err != nil {
				t.Fatal(err)
			}
			tt.do(t, filepath.Join(root, tt.level))
			got, err := getWithin(t, c, in)
			if got != nil || err == nil {
				t.Fatalf("got %q, %v; want an error and no archive", got, err)
			}
			if !strings.Contains(err.Error(), "untrusted") {
				t.Errorf("the error does not say why: %v", err)
			}
			if err := c.Put("other", bytes.NewReader(stored)); err == nil {
				t.Errorf("Put stored into an untrusted cache")
			}
		})
	}
}

func chmodTo(mode os.FileMode) func(t *testing.T, p string) {
	return func(t *testing.T, p string) {
		t.Helper()
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
}

// TestListSkipsUntrustedRecords: the size bound's bookkeeping reads the
// records too, and must not hang on a FIFO or read a device through a
// link.
func TestListSkipsUntrustedRecords(t *testing.T) {
	c := New(t.TempDir(), 1<<20)
	for _, in := range []string{"fifo", "zero", "good"} {
		if err := c.Put(in, bytes.NewReader([]byte(in))); err != nil {
			t.Fatal(err)
		}
	}
	replaceWithFIFO(t, filepath.Join(c.Dir, Key("fifo"), entryMeta))
	replaceWithLink(t, filepath.Join(c.Dir, Key("zero"), entryMeta), "/dev/zero")
	done := make(chan error, 1)
	var entries []Entry
	go func() {
		var err error
		if err = c.Prune(); err == nil {
			entries, err = c.List()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Prune or List hangs")
	}
	if len(entries) != 1 || entries[0].Key != Key("good") {
		t.Errorf("List = %v; want only the good entry", entries)
	}
}
