package modcache

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

func get(t *testing.T, c *Cache, inputs string) ([]byte, error) {
	t.Helper()
	f, err := c.Get(inputs)
	if err != nil || f == nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

func TestMissHitCorrupt(t *testing.T) {
	c := New(t.TempDir(), 0)
	in := "module nvidia-current 550\nkernel 6.12.1\n"
	if got, err := get(t, c, in); got != nil || err != nil {
		t.Fatalf("empty cache: got %q, %v; want a miss", got, err)
	}
	want := []byte("tar archive bytes")
	if err := c.Put(in, bytes.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	if got, err := get(t, c, in); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("hit: got %q, %v", got, err)
	}
	if got, err := get(t, c, in+"compiler other\n"); got != nil || err != nil {
		t.Fatalf("other inputs: got %q, %v; want a miss", got, err)
	}

	// Each kind of damage is a miss that removes the entry.
	damage := []struct {
		name string
		do   func(dir string) error
	}{
		{"flipped byte", func(dir string) error {
			return os.WriteFile(filepath.Join(dir, entryTar), []byte("tar archive bytez"), 0o644)
		}},
		{"truncated", func(dir string) error { return os.Truncate(filepath.Join(dir, entryTar), 3) }},
		{"archive missing", func(dir string) error { return os.Remove(filepath.Join(dir, entryTar)) }},
		{"bad record", func(dir string) error { return os.WriteFile(filepath.Join(dir, entryMeta), []byte("{"), 0o644) }},
		{"record of other inputs", func(dir string) error {
			data, err := os.ReadFile(filepath.Join(dir, entryMeta))
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(dir, entryMeta), bytes.Replace(data, []byte("6.12.1"), []byte("6.12.2"), 1), 0o644)
		}},
	}
	for _, d := range damage {
		t.Run(d.name, func(t *testing.T) {
			if err := c.Put(in, bytes.NewReader(want)); err != nil {
				t.Fatal(err)
			}
			if err := d.do(filepath.Join(c.Dir, Key(in))); err != nil {
				t.Fatal(err)
			}
			got, err := get(t, c, in)
			if got != nil || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("got %q, %v; want ErrCorrupt", got, err)
			}
			if _, err := os.Stat(filepath.Join(c.Dir, Key(in))); !os.IsNotExist(err) {
				t.Errorf("the corrupt entry is still there: %v", err)
			}
			if got, err := get(t, c, in); got != nil || err != nil {
				t.Errorf("after removal: got %q, %v; want a plain miss", got, err)
			}
		})
	}
}

func TestPruneKeepsRecentlyUsed(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	c := New(t.TempDir(), 25)
	c.now = func() time.Time { return now }
	put := func(in string) {
		t.Helper()
		if err := c.Put(in, bytes.NewReader(make([]byte, 10))); err != nil {
			t.Fatal(err)
		}
		// Entries get their use time from the record's mtime.
		if err := os.Chtimes(filepath.Join(c.Dir, Key(in), entryMeta), now, now); err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Minute)
	}
	put("a")
	put("b")
	if _, err := get(t, c, "a"); err != nil { // a is now newer than b
		t.Fatal(err)
	}
	now = now.Add(time.Minute)
	put("c") // 30 bytes > 25: the least recently used, b, goes
	for in, want := range map[string]bool{"a": true, "b": false, "c": true} {
		got, err := get(t, c, in)
		if err != nil || (got != nil) != want {
			t.Errorf("%s: present %v (err %v), want %v", in, got != nil, err, want)
		}
	}
	entries, err := c.List()
	if err != nil || len(entries) != 2 {
		t.Fatalf("List: %v, %v", entries, err)
	}
}

func TestPruneRemovesStaleTemporaries(t *testing.T) {
	c := New(t.TempDir(), 0)
	old := filepath.Join(c.Dir, tmpPrefix+"killed")
	fresh := filepath.Join(c.Dir, tmpPrefix+"running")
	for _, d := range []string{old, fresh} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	long := time.Now().Add(-2 * staleTmp)
	if err := os.Chtimes(old, long, long); err != nil {
		t.Fatal(err)
	}
	if err := c.Prune(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("a killed build's temporary directory stayed: %v", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("a running build's temporary directory went: %v", err)
	}
}

// TestConcurrentBuilds has builds store and read the same and different
// inputs at once, with a bound that evicts all the time: every read is a
// miss or exactly what was stored, never a torn or foreign archive.
func TestConcurrentBuilds(t *testing.T) {
	c := New(t.TempDir(), 3*4096)
	content := func(in string) []byte { return bytes.Repeat([]byte(in), 4096/len(in)) }
	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				in := fmt.Sprintf("in%d", (w+i)%5)
				if err := c.Put(in, bytes.NewReader(content(in))); err != nil {
					errs <- fmt.Errorf("put %s: %w", in, err)
					return
				}
				f, err := c.Get(in)
				if err != nil {
					errs <- fmt.Errorf("get %s: %w", in, err)
					return
				}
				if f == nil {
					continue // evicted by another build meanwhile
				}
				got, err := io.ReadAll(f)
				f.Close()
				if err != nil || !bytes.Equal(got, content(in)) {
					errs <- fmt.Errorf("get %s: %d bytes, %v; want the stored archive", in, len(got), err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	des, err := os.ReadDir(c.Dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range des {
		if de.Name()[0] == '.' {
			t.Errorf("left behind: %s", de.Name())
		}
	}
}
