package chroot_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"

	"github.com/podvm-gpu/packer-plugin-podvm/chroot"
	"github.com/podvm-gpu/packer-plugin-podvm/chroot/chroottest"
)

func newComm(t *testing.T) (*chroot.Communicator, string) {
	t.Helper()
	chroottest.RequireRoot(t)
	root := chroottest.BusyboxRoot(t)
	c, err := chroot.New(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, root
}

// syncBuffer is a bytes.Buffer that a command's output goroutines and the
// test can use at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func run(t *testing.T, c packersdk.Communicator, command string) (stdout, stderr string, status int) {
	t.Helper()
	var out, errOut syncBuffer
	rc := &packersdk.RemoteCmd{Command: command, Stdout: &out, Stderr: &errOut}
	if err := c.Start(context.Background(), rc); err != nil {
		t.Fatalf("Start(%q): %v", command, err)
	}
	status = rc.Wait()
	return out.String(), errOut.String(), status
}

func TestStartPassesCommandLiterally(t *testing.T) {
	c, _ := newComm(t)
	// If a host shell saw this command (the SDK's communicator quotes it
	// with strconv.Quote), it would expand $HOME and the backticks before
	// the root's shell ran; here only the root's shell parses it.
	t.Setenv("HOME", "/host-home")
	tests := []struct{ cmd, want string }{
		{`echo '$HOME' '` + "`id -u`" + `'`, "$HOME `id -u`\n"},
		{`echo "$HOME"`, "/root\n"},
		{"echo `echo sub`", "sub\n"},
		{`printf '%s|' "a b" 'c"d' "e'f"`, `a b|c"d|e'f|`},
		{`echo $0`, "/bin/sh\n"},
		{`pwd`, "/\n"},
	}
	for _, tt := range tests {
		out, errOut, status := run(t, c, tt.cmd)
		if status != 0 || out != tt.want {
			t.Errorf("%s: stdout %q, stderr %q, status %d; want stdout %q", tt.cmd, out, errOut, status, tt.want)
		}
	}
}

func TestStartRunsInsideRoot(t *testing.T) {
	c, root := newComm(t)
	if err := os.WriteFile(filepath.Join(root, "marker"), []byte("inside\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, status := run(t, c, "cat /marker")
	if status != 0 || out != "inside\n" {
		t.Errorf("cat /marker: %q, status %d", out, status)
	}
}

func TestStartExitStatusAndStderr(t *testing.T) {
	c, _ := newComm(t)
	out, errOut, status := run(t, c, "echo out; echo err >&2; exit 3")
	if status != 3 || out != "out\n" || errOut != "err\n" {
		t.Errorf("got stdout %q stderr %q status %d", out, errOut, status)
	}
	_, _, status = run(t, c, "kill -9 $$")
	if status != 128+9 {
		t.Errorf("killed by SIGKILL: status %d, want 137", status)
	}
}

func TestStartStdin(t *testing.T) {
	c, _ := newComm(t)
	var out syncBuffer
	rc := &packersdk.RemoteCmd{Command: "cat", Stdin: strings.NewReader("from stdin"), Stdout: &out}
	if err := c.Start(context.Background(), rc); err != nil {
		t.Fatal(err)
	}
	if st := rc.Wait(); st != 0 || out.String() != "from stdin" {
		t.Errorf("got %q status %d", out.String(), st)
	}
}

func TestStartStreamsThroughRunWithUi(t *testing.T) {
	c, _ := newComm(t)
	ui := &lineUi{}
	rc := &packersdk.RemoteCmd{Command: "echo one; echo two >&2; echo three"}
	if err := rc.RunWithUi(context.Background(), c, ui); err != nil {
		t.Fatal(err)
	}
	if rc.ExitStatus() != 0 {
		t.Fatalf("status %d", rc.ExitStatus())
	}
	if got := strings.Join(ui.said(), ","); got != "one,three" {
		t.Errorf("Say lines: %q", got)
	}
	if got := strings.Join(ui.errors(), ","); got != "two" {
		t.Errorf("Error lines: %q", got)
	}
}

func TestStartCancelKillsProcessGroup(t *testing.T) {
	c, root := newComm(t)
	ctx, cancel := context.WithCancel(context.Background())
	// A background child in the same group must go too.
	rc := &packersdk.RemoteCmd{Command: "sleep 30 & sleep 30"}
	if err := c.Start(ctx, rc); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	cancel()
	done := make(chan int)
	go func() { done <- rc.Wait() }()
	select {
	case st := <-done:
		if st == 0 {
			t.Errorf("cancelled command exited 0")
		}
	case <-time.After(time.Second):
		t.Fatal("command still running 1s after cancellation")
	}
	t.Logf("cancelled command ended after %s", time.Since(start))
	waitNoProcesses(t, root)
}

func TestCloseKillsRunningAndRefusesNew(t *testing.T) {
	c, root := newComm(t)
	rc := &packersdk.RemoteCmd{Command: "sleep 30"}
	if err := c.Start(context.Background(), rc); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	c.Close()
	if d := time.Since(start); d > time.Second {
		t.Errorf("Close took %s", d)
	}
	if st := rc.Wait(); st != 128+9 {
		t.Errorf("status after Close %d, want 137", st)
	}
	waitNoProcesses(t, root)
	err := c.Start(context.Background(), &packersdk.RemoteCmd{Command: "true"})
	if !errors.Is(err, chroot.ErrClosed) {
		t.Errorf("Start after Close: %v, want ErrClosed", err)
	}
}

func TestKillProcesses(t *testing.T) {
	c, root := newComm(t)
	// setsid-like escape from the command's group is simulated by a
	// command that is never cancelled: KillProcesses must find it by its
	// root directory alone.
	rc := &packersdk.RemoteCmd{Command: "sleep 30"}
	if err := c.Start(context.Background(), rc); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		ps, _ := chroot.Processes(root)
		if len(ps) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	killed, err := chroot.KillProcesses(root, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(killed) == 0 {
		t.Fatal("no process found in the root")
	}
	if st := rc.Wait(); st != 128+9 {
		t.Errorf("status %d, want 137", st)
	}
}

func waitNoProcesses(t *testing.T, root string) {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for {
		ps, err := chroot.Processes(root)
		if err != nil {
			t.Fatal(err)
		}
		if len(ps) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes left in the root: %v", ps)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestUploadDownloadFile(t *testing.T) {
	c, root := newComm(t)
	src := filepath.Join(t.TempDir(), "tool")
	if err := os.WriteFile(src, []byte("#!/bin/sh\necho tool ran\n"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(src, 0o750|fs.ModeSetuid); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Upload("/opt/new/dir/tool", f, &fi); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(root, "opt/new/dir/tool"))
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Mode() & (fs.ModePerm | fs.ModeSetuid); got != 0o750|fs.ModeSetuid {
		t.Errorf("uploaded mode %v, want setuid 0750", got)
	}
	if out, _, status := run(t, c, "/opt/new/dir/tool"); status != 0 || out != "tool ran\n" {
		t.Errorf("running the uploaded file: %q status %d", out, status)
	}

	// Without a FileInfo, the file gets 0644.
	if err := c.Upload("/tmp/plain", strings.NewReader("plain"), nil); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(root, "tmp/plain")); err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("plain upload: %v, mode %v", err, st.Mode())
	}
	// Into an existing directory: the file keeps its name.
	if _, err := f.Seek(0, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Upload("/tmp", f, &fi); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "tmp/tool")); err != nil {
		t.Errorf("upload into a directory: %v", err)
	}

	var buf bytes.Buffer
	if err := c.Download("/opt/new/dir/tool", &buf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "tool ran") {
		t.Errorf("downloaded %q", buf.String())
	}
	if err := c.Download("/opt", &buf); err == nil {
		t.Error("Download of a directory: want an error")
	}
	if err := c.Download("/no/such/file", &buf); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Download of a missing file: %v, want ErrNotExist", err)
	}
}

// makeTree builds the host tree src/{a.txt 0600, bin/run 0755, sub/deep/c,
// link -> a.txt, skip.log}.
func makeTree(t *testing.T) string {
	t.Helper()
	src := filepath.Join(t.TempDir(), "src")
	files := map[string]fs.FileMode{"a.txt": 0o600, "bin/run": 0o755, "sub/deep/c": 0o644, "skip.log": 0o644}
	for name, mode := range files {
		p := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(name), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(src, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a.txt", filepath.Join(src, "link")); err != nil {
		t.Fatal(err)
	}
	return src
}

func checkTree(t *testing.T, dir string) {
	t.Helper()
	want := map[string]fs.FileMode{"a.txt": 0o600, "bin/run": 0o755, "sub/deep/c": 0o644, "sub": fs.ModeDir | 0o700}
	for name, mode := range want {
		st, err := os.Lstat(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if got := st.Mode() & (fs.ModePerm | fs.ModeDir); got != mode {
			t.Errorf("%s: mode %v, want %v", name, got, mode)
		}
	}
	if target, err := os.Readlink(filepath.Join(dir, "link")); err != nil || target != "a.txt" {
		t.Errorf("link: %q, %v", target, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "skip.log")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("excluded skip.log was copied (%v)", err)
	}
}

func TestUploadDirAndDownloadDir(t *testing.T) {
	c, root := newComm(t)
	src := makeTree(t)
	exclude := []string{"*.log"}

	// No trailing slash: the directory itself is created under dst.
	if err := c.UploadDir("/opt", src, exclude); err != nil {
		t.Fatal(err)
	}
	checkTree(t, filepath.Join(root, "opt/src"))
	// Trailing slash: the contents go into dst.
	if err := c.UploadDir("/srv/flat", src+"/", exclude); err != nil {
		t.Fatal(err)
	}
	checkTree(t, filepath.Join(root, "srv/flat"))
	// Uploading again over the same tree replaces files and links.
	if err := c.UploadDir("/srv/flat", src+"/", exclude); err != nil {
		t.Fatalf("second upload: %v", err)
	}

	host := t.TempDir()
	if err := c.DownloadDir("/opt/src", host, nil); err != nil {
		t.Fatal(err)
	}
	// The excluded file never reached the root, so it cannot come back.
	checkTree(t, filepath.Join(host, "src"))
	host2 := t.TempDir()
	if err := c.DownloadDir("/srv/flat/", host2, []string{"bin"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(host2, "a.txt")); err != nil {
		t.Errorf("trailing-slash download: %v", err)
	}
	if _, err := os.Stat(filepath.Join(host2, "bin")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("excluded bin/ was downloaded (%v)", err)
	}
}

func TestSymlinksCannotEscapeTheRoot(t *testing.T) {
	c, root := newComm(t)
	hostEtc := t.TempDir() // stands in for a host directory worth protecting
	if err := os.WriteFile(filepath.Join(hostEtc, "secret"), []byte("host secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, hostEtc), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, hostEtc, "secret"), []byte("image file"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, l := range []struct{ target, name string }{
		{hostEtc, "abs"},
		{"../../../../../../../../" + hostEtc, "rel"},
		{hostEtc + "/secret", "file"},
	} {
		if err := os.Symlink(l.target, filepath.Join(root, l.name)); err != nil {
			t.Fatal(err)
		}
	}

	for _, p := range []string{"/abs/secret", "/rel/secret", "/file"} {
		var buf bytes.Buffer
		if err := c.Download(p, &buf); err != nil {
			t.Errorf("Download(%s): %v", p, err)
		} else if buf.String() != "image file" {
			t.Errorf("Download(%s) read %q: it left the root", p, buf.String())
		}
	}
	for _, p := range []string{"/abs/planted", "/rel/planted"} {
		if err := c.Upload(p, strings.NewReader("x"), nil); err != nil {
			t.Errorf("Upload(%s): %v", p, err)
		}
	}
	if err := c.Upload("/file", strings.NewReader("overwritten"), nil); err != nil {
		t.Errorf("Upload(/file): %v", err)
	}
	if err := c.UploadDir("/abs/", makeTree(t)+"/", nil); err != nil {
		t.Errorf("UploadDir(/abs/): %v", err)
	}
	entries, _ := os.ReadDir(hostEtc)
	if len(entries) != 1 {
		t.Errorf("the host directory changed: %v", entries)
	}
	if data, _ := os.ReadFile(filepath.Join(hostEtc, "secret")); string(data) != "host secret" {
		t.Errorf("the host file changed: %q", data)
	}
	if _, err := os.Stat(filepath.Join(root, hostEtc, "planted")); err != nil {
		t.Errorf("the upload should land inside the root: %v", err)
	}

	// A link in the image is downloaded as a link, never followed.
	host := t.TempDir()
	if err := c.DownloadDir("/", host, []string{"bin", "proc", "sys", "dev"}); err != nil {
		t.Fatal(err)
	}
	if target, err := os.Readlink(filepath.Join(host, "file")); err != nil || target != hostEtc+"/secret" {
		t.Errorf("downloaded link: %q, %v", target, err)
	}
}

// lineUi records what RemoteCmd.RunWithUi reports; RunWithUi calls it from
// its own goroutine.
type lineUi struct {
	packersdk.MockUi
	mu        sync.Mutex
	sayLines  []string
	errorLine []string
}

func (u *lineUi) Say(m string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.sayLines = append(u.sayLines, m)
}

func (u *lineUi) Error(m string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.errorLine = append(u.errorLine, m)
}

func (u *lineUi) said() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.sayLines...)
}

func (u *lineUi) errors() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.errorLine...)
}
