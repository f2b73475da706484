package modcache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// exitError is a command that ran and failed.
type exitError int

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", int(e)) }
func (e exitError) ExitCode() int { return int(e) }

// fakeImage plays the image side of the script: it reads the command
// words after the script's name and keeps the files moved in and out.
type fakeImage struct {
	pending string            // the pending report
	files   map[string][]byte // uploaded or packed
	log     []string          // the commands, script name and arguments only
	reject  bool              // restore checks fail (exit 3)
}

func (f *fakeImage) words(command string) []string {
	i := strings.LastIndex(command, " podvm-dkms ")
	if !strings.HasPrefix(command, "sh -c '") || i < 0 {
		panic("not a podvm-dkms command: " + command)
	}
	var ws []string
	for _, w := range strings.Fields(command[i+len(" podvm-dkms "):]) {
		ws = append(ws, strings.Trim(w, "'"))
	}
	f.log = append(f.log, strings.Join(ws, " "))
	return ws
}

func (f *fakeImage) Run(ctx context.Context, command string) error {
	ws := f.words(command)
	switch ws[0] {
	case "restore":
		if _, ok := f.files[restoreTar]; !ok {
			return exitError(1)
		}
		delete(f.files, restoreTar)
		if f.reject {
			return exitError(exitRejected)
		}
	case "build":
	case "pack":
		f.files[packTar] = []byte("unsigned modules of " + ws[1] + " for " + ws[3])
	case "clean":
		delete(f.files, packTar)
		delete(f.files, restoreTar)
	case "finish":
	default:
		return exitError(2)
	}
	return nil
}

func (f *fakeImage) Output(ctx context.Context, command string) (string, error) {
	if ws := f.words(command); ws[0] != "pending" {
		return "", exitError(2)
	}
	return f.pending, nil
}

func (f *fakeImage) Upload(ctx context.Context, path string, r *os.File) error {
	data, err := io.ReadAll(r)
	f.files[path] = data
	return err
}

func (f *fakeImage) Download(ctx context.Context, path string, open func() (io.WriteCloser, error)) error {
	data, ok := f.files[path]
	if !ok {
		return fmt.Errorf("%s: no such file", path)
	}
	w, err := open()
	if err != nil {
		return err
	}
	// A first attempt that breaks off: the retry starts over.
	w.Write(data[:len(data)/2])
	if w, err = open(); err != nil {
		return err
	}
	if _, err := w.Write(data); err != nil {
		return err
	}
	return w.Close()
}

const report = `entry nvidia-current 550.163.01 6.12.1-amd64 x86_64
layout 1
module nvidia-current 550.163.01
kernel 6.12.1-amd64 x86_64
end
entry nvidia-current 550.163.01 6.12.2-amd64 x86_64
layout 1
module nvidia-current 550.163.01
kernel 6.12.2-amd64 x86_64
end
`

func TestParsePending(t *testing.T) {
	ps, err := ParsePending(report)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 2 || ps[1].String() != "nvidia-current/550.163.01 for 6.12.2-amd64 (x86_64)" ||
		ps[0].Inputs != "layout 1\nmodule nvidia-current 550.163.01\nkernel 6.12.1-amd64 x86_64\n" {
		t.Errorf("got %+v", ps)
	}
	for _, bad := range []string{"entry a b c\nend\n", "entry a b c d\nlayout 1\n", "garbage\n"} {
		if _, err := ParsePending(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func build(t *testing.T, img *fakeImage, c *Cache) []string {
	t.Helper()
	img.log = nil
	var said []string
	if err := Build(context.Background(), img, c, []string{"6.12.1-amd64", "6.12.2-amd64"}, func(s string) { said = append(said, s) }); err != nil {
		t.Fatal(err)
	}
	if len(img.files) != 0 {
		t.Errorf("files left in the image: %v", img.files)
	}
	return said
}

func TestBuildThroughCache(t *testing.T) {
	c := New(t.TempDir(), 0)
	img := &fakeImage{pending: report, files: map[string][]byte{}}
	k1, k2 := "nvidia-current 550.163.01 6.12.1-amd64 x86_64", "nvidia-current 550.163.01 6.12.2-amd64 x86_64"

	// Miss: built, packed, copied out and stored, per kernel.
	build(t, img, c)
	want := []string{"pending 6.12.1-amd64 6.12.2-amd64",
		"build " + k1, "pack " + k1, "clean",
		"build " + k2, "pack " + k2, "clean", "finish"}
	if !slices.Equal(img.log, want) {
		t.Errorf("miss ran\n%s\nwant\n%s", strings.Join(img.log, "\n"), strings.Join(want, "\n"))
	}
	ps, _ := ParsePending(report)
	if got, err := get(t, c, ps[1].Inputs); err != nil || string(got) != "unsigned modules of nvidia-current for 6.12.2-amd64" {
		t.Fatalf("stored: %q, %v", got, err)
	}

	// Hit: restored, nothing built.
	said := build(t, img, c)
	want = []string{"pending 6.12.1-amd64 6.12.2-amd64", "restore " + k1, "restore " + k2, "finish"}
	if !slices.Equal(img.log, want) {
		t.Errorf("hit ran\n%s\nwant\n%s", strings.Join(img.log, "\n"), strings.Join(want, "\n"))
	}
	if !strings.Contains(strings.Join(said, "\n"), "module cache: restored nvidia-current/550.163.01 for 6.12.1-amd64") {
		t.Errorf("a hit does not say so: %q", said)
	}

	// A corrupt archive on the host: removed, that kernel rebuilt and
	// stored again.
	tar := filepath.Join(c.Dir, Key(ps[0].Inputs), entryTar)
	if err := os.WriteFile(tar, []byte("unsigned modules of nvidia-current for 6.12.1-amd64, patched"), 0o644); err != nil {
		t.Fatal(err)
	}
	said = build(t, img, c)
	want = []string{"pending 6.12.1-amd64 6.12.2-amd64", "build " + k1, "pack " + k1, "clean", "restore " + k2, "finish"}
	if !slices.Equal(img.log, want) {
		t.Errorf("corrupt entry ran\n%s\nwant\n%s", strings.Join(img.log, "\n"), strings.Join(want, "\n"))
	}
	if s := strings.Join(said, "\n"); !strings.Contains(s, "corrupt cache entry") || !strings.Contains(s, "building instead") {
		t.Errorf("a corrupt entry is not reported: %q", said)
	}
	if got, _ := get(t, c, ps[0].Inputs); string(got) != "unsigned modules of nvidia-current for 6.12.1-amd64" {
		t.Errorf("rebuilt entry: %q", got)
	}

	// Checks in the image fail (vermagic, a signature): removed, rebuilt.
	img.reject = true
	build(t, img, c)
	want = []string{"pending 6.12.1-amd64 6.12.2-amd64",
		"restore " + k1, "build " + k1, "pack " + k1, "clean",
		"restore " + k2, "build " + k2, "pack " + k2, "clean", "finish"}
	if !slices.Equal(img.log, want) {
		t.Errorf("rejected restore ran\n%s\nwant\n%s", strings.Join(img.log, "\n"), strings.Join(want, "\n"))
	}
}

func TestBuildWithoutCache(t *testing.T) {
	img := &fakeImage{pending: report, files: map[string][]byte{}}
	build(t, img, nil)
	k1, k2 := "nvidia-current 550.163.01 6.12.1-amd64 x86_64", "nvidia-current 550.163.01 6.12.2-amd64 x86_64"
	want := []string{"pending 6.12.1-amd64 6.12.2-amd64", "build " + k1, "build " + k2, "finish"}
	if !slices.Equal(img.log, want) {
		t.Errorf("ran\n%s\nwant\n%s", strings.Join(img.log, "\n"), strings.Join(want, "\n"))
	}
}

func TestBuildFailureNamesTheModule(t *testing.T) {
	img := &failingBuild{fakeImage{pending: report, files: map[string][]byte{}}}
	err := Build(context.Background(), img, New(t.TempDir(), 0), []string{"6.12.1-amd64"}, func(string) {})
	if err == nil || !strings.Contains(err.Error(), "building nvidia-current/550.163.01 for 6.12.1-amd64 (x86_64) (podvm-dkms build): exit status 10") {
		t.Errorf("got %v", err)
	}
}

type failingBuild struct{ fakeImage }

func (f *failingBuild) Run(ctx context.Context, command string) error {
	if strings.Contains(command, " podvm-dkms 'build'") {
		return exitError(10)
	}
	return f.fakeImage.Run(ctx, command)
}

// scripted is a fakeImage whose commands fail as a test says.
type scripted struct {
	fakeImage
	runFails      map[string]error // by subcommand
	uploadFails   error
	downloadFails error
}

func (f *scripted) Run(ctx context.Context, command string) error {
	i := strings.LastIndex(command, " podvm-dkms '")
	sub := strings.Trim(strings.Fields(command[i+len(" podvm-dkms "):])[0], "'")
	if err := f.runFails[sub]; err != nil {
		f.log = append(f.log, sub+" (fails)")
		return err
	}
	return f.fakeImage.Run(ctx, command)
}

func (f *scripted) Upload(ctx context.Context, path string, r *os.File) error {
	if f.uploadFails != nil {
		f.files[path] = []byte("partial")
		return f.uploadFails
	}
	return f.fakeImage.Upload(ctx, path, r)
}

func (f *scripted) Download(ctx context.Context, path string, open func() (io.WriteCloser, error)) error {
	if f.downloadFails != nil {
		return f.downloadFails
	}
	return f.fakeImage.Download(ctx, path, open)
}

// TestCacheFailuresNeverFailTheBuild: the cache is a shortcut; when it
// cannot be read, written or copied, the module is built and the build
// goes on, with nothing left in the image.
func TestCacheFailuresNeverFailTheBuild(t *testing.T) {
	one := "entry m 1 6.12.1 x86_64\nlayout 1\nend\n"
	for _, tc := range []struct {
		name string
		img  *scripted
		prep func(c *Cache)
		want []string
		say  string
	}{
		{name: "download fails", img: &scripted{downloadFails: errors.New("link down")},
			want: []string{"pending 6.12.1", "build m 1 6.12.1 x86_64", "pack m 1 6.12.1 x86_64", "clean", "finish"},
			say:  "not stored: copying it out of the image: link down"},
		{name: "pack fails", img: &scripted{runFails: map[string]error{"pack": exitError(1)}},
			want: []string{"pending 6.12.1", "build m 1 6.12.1 x86_64", "pack (fails)", "clean", "finish"},
			say:  "not stored: exit status 1"},
		{name: "upload fails", img: &scripted{uploadFails: errors.New("disk full")},
			prep: func(c *Cache) { must(t, c.Put("layout 1\n", strings.NewReader("cached"))) },
			want: []string{"pending 6.12.1", "clean", "build m 1 6.12.1 x86_64", "pack m 1 6.12.1 x86_64", "clean", "finish"},
			say:  "copying the build of m/1 for 6.12.1 (x86_64)"},
		{name: "built for no kernel", img: &scripted{runFails: map[string]error{"build": exitError(exitSkipped)}},
			want: []string{"pending 6.12.1", "build (fails)", "finish"},
			say:  "skipped m/1 for 6.12.1 (x86_64)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := New(t.TempDir(), 0)
			if tc.prep != nil {
				tc.prep(c)
			}
			tc.img.pending, tc.img.files = one, map[string][]byte{}
			var said []string
			err := Build(context.Background(), tc.img, c, []string{"6.12.1"}, func(s string) { said = append(said, s) })
			if err != nil {
				t.Fatalf("the build failed: %v", err)
			}
			if !slices.Equal(tc.img.log, tc.want) {
				t.Errorf("ran\n%s\nwant\n%s", strings.Join(tc.img.log, "\n"), strings.Join(tc.want, "\n"))
			}
			if !strings.Contains(strings.Join(said, "\n"), tc.say) {
				t.Errorf("said %q; want %q", said, tc.say)
			}
			if len(tc.img.files) != 0 {
				t.Errorf("left in the image: %v", tc.img.files)
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// slowImage is a fakeImage whose DKMS build blocks until released.
type slowImage struct {
	*fakeImage
	building chan struct{} // closed when the build starts
	release  chan struct{}
}

func (s *slowImage) Run(ctx context.Context, command string) error {
	err := s.fakeImage.Run(ctx, command)
	if strings.HasPrefix(s.log[len(s.log)-1], "build ") {
		close(s.building)
		<-s.release
	}
	return err
}

// TestConcurrentSameModulesBuildOnce: two images built at once that need
// the same modules compile them once; the second waits for the first's
// build lock and restores its entry. Each build has its own cache value,
// as two processes would.
func TestConcurrentSameModulesBuildOnce(t *testing.T) {
	dir := t.TempDir()
	one := "entry nvidia-current 550.163.01 6.12.1-amd64 x86_64\nlayout 1\nmodule nvidia-current 550.163.01\nkernel 6.12.1-amd64 x86_64\nend\n"
	first := &slowImage{&fakeImage{pending: one, files: map[string][]byte{}}, make(chan struct{}), make(chan struct{})}
	second := &fakeImage{pending: one, files: map[string][]byte{}}
	errs := make(chan error, 2)
	go func() {
		errs <- Build(context.Background(), first, New(dir, 0), []string{"6.12.1-amd64"}, func(string) {})
	}()
	<-first.building
	waiting := make(chan struct{})
	var said []string
	go func() {
		errs <- Build(context.Background(), second, New(dir, 0), []string{"6.12.1-amd64"}, func(s string) {
			said = append(said, s)
			if strings.Contains(s, "waiting for it") {
				close(waiting)
			}
		})
	}()
	select {
	case <-waiting:
	case err := <-errs:
		close(first.release)
		t.Fatalf("the second build did not wait for the first (err %v):\n%s", err, strings.Join(second.log, "\n"))
	}
	close(first.release)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	k := "nvidia-current 550.163.01 6.12.1-amd64 x86_64"
	if want := []string{"pending 6.12.1-amd64", "build " + k, "pack " + k, "clean", "finish"}; !slices.Equal(first.log, want) {
		t.Errorf("first build ran\n%s\nwant\n%s", strings.Join(first.log, "\n"), strings.Join(want, "\n"))
	}
	if want := []string{"pending 6.12.1-amd64", "restore " + k, "finish"}; !slices.Equal(second.log, want) {
		t.Errorf("second build ran\n%s\nwant\n%s\nsaid %q", strings.Join(second.log, "\n"), strings.Join(want, "\n"), said)
	}
	// The lock file is no entry, and prune leaves it.
	if es, err := New(dir, 0).List(); err != nil || len(es) != 1 {
		t.Errorf("List: %v, %v; want the one entry", es, err)
	}
}

// TestLockCancelled: a build that waits for the lock stops with its
// context.
func TestLockCancelled(t *testing.T) {
	c := New(t.TempDir(), 0)
	unlock, err := c.Lock(context.Background(), "inputs", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	ctx, cancel := context.WithCancel(context.Background())
	if _, err := New(c.Dir, 0).Lock(ctx, "inputs", cancel); !errors.Is(err, context.Canceled) {
		t.Errorf("Lock while held, then cancelled: %v, want context.Canceled", err)
	}
}

// TestEntryStoredBeforeTheLockIsTaken: another build stores its entry
// after this one's first read missed and before it takes the lock. This
// build must install that entry, not compile its own: every later build
// restores that entry, and two builds from the same inputs must give the
// same modules (make repro) even where two compiles would not.
func TestEntryStoredBeforeTheLockIsTaken(t *testing.T) {
	c := New(t.TempDir(), 0)
	ps, _ := ParsePending(report)
	img := &fakeImage{pending: report, files: map[string][]byte{}}
	stored := map[string]bool{}
	say := func(s string) {
		// The first miss of each kernel: the other build stores now.
		for _, p := range ps {
			if strings.HasPrefix(s, "module cache: no build of "+p.String()) && !stored[p.Kernel] {
				stored[p.Kernel] = true
				must(t, c.Put(p.Inputs, strings.NewReader("the other build's modules for "+p.Kernel)))
			}
		}
	}
	if err := Build(context.Background(), img, c, []string{"6.12.1-amd64", "6.12.2-amd64"}, say); err != nil {
		t.Fatal(err)
	}
	k1, k2 := "nvidia-current 550.163.01 6.12.1-amd64 x86_64", "nvidia-current 550.163.01 6.12.2-amd64 x86_64"
	want := []string{"pending 6.12.1-amd64 6.12.2-amd64", "restore " + k1, "restore " + k2, "finish"}
	if !slices.Equal(img.log, want) {
		t.Errorf("ran\n%s\nwant\n%s", strings.Join(img.log, "\n"), strings.Join(want, "\n"))
	}
}
