package rootfs

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"

	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"

	"github.com/podvm-gpu/packer-plugin-podvm/chroot"
	"github.com/podvm-gpu/packer-plugin-podvm/chroot/chroottest"
	"github.com/podvm-gpu/packer-plugin-podvm/chroot/mount"
)

// These tests run the builder in-process on a busybox tree (source_type
// directory): everything but debootstrap and packer itself, in seconds.

// testUi records what the builder says; it may be told to panic once on a
// message, to test cleanup during a panic.
type testUi struct {
	packersdk.MockUi
	mu      sync.Mutex
	lines   []string
	panicOn string
}

func (u *testUi) record(prefix, m string) {
	u.mu.Lock()
	u.lines = append(u.lines, prefix+m)
	p := u.panicOn != "" && strings.Contains(m, u.panicOn)
	if p {
		u.panicOn = ""
	}
	u.mu.Unlock()
	if p {
		panic("test panic on " + m)
	}
}

func (u *testUi) Say(m string)                        { u.record("", m) }
func (u *testUi) Sayf(f string, a ...any)             { u.record("", fmt.Sprintf(f, a...)) }
func (u *testUi) Error(m string)                      { u.record("ERROR ", m) }
func (u *testUi) Errorf(f string, a ...any)           { u.record("ERROR ", fmt.Sprintf(f, a...)) }
func (u *testUi) Message(m string)                    { u.record("", m) }
func (u *testUi) Machine(string, ...string)           {}
func (u *testUi) Ask(string) (string, error)          { return "", errors.New("no input in tests") }
func (u *testUi) Askf(string, ...any) (string, error) { return "", errors.New("no input in tests") }

func (u *testUi) output() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return strings.Join(u.lines, "\n")
}

// commandHook is the provision hook: it runs each command through the
// communicator the builder provides, as a shell provisioner would.
type commandHook struct {
	commands []string
	started  chan struct{} // closed when the last command starts, if set
	err      error
}

func (h *commandHook) Run(ctx context.Context, name string, ui packersdk.Ui, comm packersdk.Communicator, _ interface{}) error {
	if name != packersdk.HookProvision {
		return nil
	}
	if comm == nil {
		return errors.New("no communicator in the state bag")
	}
	for i, c := range h.commands {
		rc := &packersdk.RemoteCmd{Command: c}
		if h.started != nil && i == len(h.commands)-1 {
			close(h.started)
		}
		if err := rc.RunWithUi(ctx, comm, ui); err != nil {
			return err
		}
		if st := rc.ExitStatus(); st != 0 {
			return fmt.Errorf("%q exited %d", c, st)
		}
	}
	return h.err
}

type fixture struct {
	src, out string
	builder  *Builder
}

// newFixture prepares a builder that copies a busybox tree into a fresh
// output directory. The tree's resolv.conf is a symlink, as with
// systemd-resolved, so restoring it is visible.
func newFixture(t *testing.T, extra map[string]interface{}) *fixture {
	t.Helper()
	chroottest.RequireRoot(t)
	src := chroottest.BusyboxRoot(t)
	if err := os.Symlink("../run/resolv.conf", filepath.Join(src, "etc/resolv.conf")); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "rootfs")
	raw := map[string]interface{}{
		"source_type":       "directory",
		"source_path":       src,
		"output_directory":  out,
		"packer_build_name": "test",
	}
	for k, v := range extra {
		raw[k] = v
	}
	b := &Builder{}
	h := fakeHost()
	h.getwd = os.Getwd
	if err := b.config.Prepare(h, raw); err != nil {
		t.Fatal(err)
	}
	f := &fixture{src: src, out: out, builder: b}
	t.Cleanup(func() {
		// Should a test fail half way, leave no mount behind on the host.
		mount.Sweep(out, nil)
	})
	return f
}

func (f *fixture) run(ctx context.Context, ui packersdk.Ui, hook packersdk.Hook) (packersdk.Artifact, error) {
	return f.builder.Run(ctx, ui, hook)
}

// assertTornDown checks what every build leaves, however it ended.
func assertTornDown(t *testing.T, out string) {
	t.Helper()
	if left, err := mount.Under(out); err != nil || len(left) > 0 {
		t.Errorf("still mounted: %q (%v)", left, err)
	}
	if ps, _ := chroot.Processes(out); len(ps) > 0 {
		t.Errorf("still running in the tree: %v", ps)
	}
	if _, err := os.Stat(lockPath(out)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lock file left (%v)", err)
	}
	if l, err := lockDir(out); err != nil {
		t.Errorf("lock still held: %v", err)
	} else {
		l.release()
	}
}

func TestBuildSuccess(t *testing.T) {
	f := newFixture(t, map[string]interface{}{})
	tarball := filepath.Join(filepath.Dir(f.out), "rootfs.tar.gz")
	f.builder.config.OutputTarball = tarball
	ui := &testUi{}
	hook := &commandHook{commands: []string{
		"echo provisioned > /etc/podvm-test",
		"test -x /usr/sbin/policy-rc.d && /usr/sbin/policy-rc.d; test $? -eq 101",
		"test -f /etc/resolv.conf && ! test -L /etc/resolv.conf",
		"test -r /proc/self/status && test -c /dev/null && test -d /dev/pts",
		"mount | grep -q ' /run type tmpfs'",
		`echo "$HOME $PATH" > /etc/podvm-env`,
	}}
	a, err := f.run(context.Background(), ui, hook)
	if err != nil {
		t.Fatalf("%v\n%s", err, ui.output())
	}
	if a.Id() != f.out || len(a.Files()) != 2 || a.Files()[1] != tarball || !strings.Contains(a.String(), tarball) {
		t.Errorf("artifact: id %q files %q string %q", a.Id(), a.Files(), a.String())
	}
	if a.BuilderId() != BuilderID {
		t.Errorf("builder id %q", a.BuilderId())
	}
	if data, _ := os.ReadFile(filepath.Join(f.out, "etc/podvm-test")); string(data) != "provisioned\n" {
		t.Errorf("provisioned file: %q", data)
	}
	if data, _ := os.ReadFile(filepath.Join(f.out, "etc/podvm-env")); !strings.HasPrefix(string(data), "/root /usr/local/sbin:") {
		t.Errorf("environment in the chroot: %q", data)
	}
	if target, err := os.Readlink(filepath.Join(f.out, "etc/resolv.conf")); err != nil || target != "../run/resolv.conf" {
		t.Errorf("resolv.conf not restored: %q, %v", target, err)
	}
	if _, err := os.Lstat(filepath.Join(f.out, "usr/sbin/policy-rc.d")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("policy-rc.d left in the tree (%v)", err)
	}
	assertTornDown(t, f.out)

	names := gzipTarNames(t, tarball)
	if !names["./etc/podvm-test"] || !names["./bin/busybox"] {
		t.Errorf("tarball lacks files: %v", names)
	}
	for _, want := range []string{"Copying", "done in", "Mounted proc, sys, dev, dev/pts, dev/shm, run", "Packing"} {
		if !strings.Contains(ui.output(), want) {
			t.Errorf("output lacks %q:\n%s", want, ui.output())
		}
	}

	// Destroy removes both.
	if err := a.Destroy(); err != nil {
		t.Fatal(err)
	}
	for _, p := range a.Files() {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s survives Destroy (%v)", p, err)
		}
	}
}

func gzipTarNames(t *testing.T, file string) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	names := map[string]bool{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names
		}
		if err != nil {
			t.Fatal(err)
		}
		names[h.Name] = true
	}
}

func TestBuildFailureRemovesTree(t *testing.T) {
	f := newFixture(t, nil)
	ui := &testUi{}
	_, err := f.run(context.Background(), ui, &commandHook{commands: []string{"touch /etc/x", "exit 3"}})
	if err == nil || !strings.Contains(err.Error(), "exited 3") {
		t.Fatalf("error %v\n%s", err, ui.output())
	}
	if _, err := os.Stat(f.out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("output_directory survives a failed build (%v)", err)
	}
	assertTornDown(t, f.out)
}

func TestBuildOnErrorAbortKeepsTreeButUnmounts(t *testing.T) {
	f := newFixture(t, map[string]interface{}{"packer_on_error": "abort"})
	ui := &testUi{}
	_, err := f.run(context.Background(), ui, &commandHook{commands: []string{"touch /etc/before-failure", "exit 3"}})
	if err == nil {
		t.Fatal("no error")
	}
	if _, err := os.Stat(filepath.Join(f.out, "etc/before-failure")); err != nil {
		t.Errorf("-on-error=abort should keep the tree: %v\n%s", err, ui.output())
	}
	assertTornDown(t, f.out)
}

func TestBuildCancelledMidCommand(t *testing.T) {
	f := newFixture(t, nil)
	ui := &testUi{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hook := &commandHook{commands: []string{"sleep 30"}, started: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		_, err := f.run(ctx, ui, hook)
		done <- err
	}()
	<-hook.started
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	cancel()
	select {
	case err := <-done:
		if err == nil {
			t.Error("a cancelled build succeeded")
		}
		t.Logf("cancelled build returned after %s: %v", time.Since(start), err)
	case <-time.After(10 * time.Second):
		t.Fatal("build still running 10s after cancellation")
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("cancellation took %s", time.Since(start))
	}
	assertTornDown(t, f.out)
}

func TestBuildPanicStillUnmounts(t *testing.T) {
	f := newFixture(t, nil)
	// The builder says this after mounting, before provisioning.
	ui := &testUi{panicOn: "Mounted proc"}
	func() {
		defer func() {
			if r := recover(); r == nil {
				t.Error("the panic did not propagate")
			}
		}()
		f.run(context.Background(), ui, &commandHook{})
	}()
	assertTornDown(t, f.out)
}

func TestBuildKillsStrayDaemons(t *testing.T) {
	f := newFixture(t, nil)
	ui := &testUi{}
	// setsid takes the daemon out of the command's process group, as a
	// package's service start would.
	hook := &commandHook{commands: []string{"setsid sleep 300 </dev/null >/dev/null 2>&1 &"}}
	if _, err := f.run(context.Background(), ui, hook); err != nil {
		t.Fatalf("%v\n%s", err, ui.output())
	}
	if !strings.Contains(ui.output(), "killed processes still running in the chroot: ") {
		t.Errorf("no report of the killed daemon:\n%s", ui.output())
	}
	assertTornDown(t, f.out)
}

func TestBuildLockedDirectory(t *testing.T) {
	f := newFixture(t, nil)
	l, err := lockDir(f.out)
	if err != nil {
		t.Fatal(err)
	}
	defer l.release()
	_, err = f.run(context.Background(), &testUi{}, &commandHook{})
	if err == nil || !strings.Contains(err.Error(), "is in use by another build") {
		t.Fatalf("error %v, want a lock conflict", err)
	}
	if _, err := os.Stat(f.out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the locked build touched the directory (%v)", err)
	}
}

func TestBuildExistingDirectory(t *testing.T) {
	f := newFixture(t, nil)
	if err := os.MkdirAll(filepath.Join(f.out, "proc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.out, "old"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := f.run(context.Background(), &testUi{}, &commandHook{})
	if err == nil || !strings.Contains(err.Error(), "already exists and is not empty; remove it or run packer build -force") {
		t.Fatalf("error %v", err)
	}
	if _, err := os.Stat(filepath.Join(f.out, "old")); err != nil {
		t.Errorf("the existing directory was touched without -force: %v", err)
	}

	// A crashed earlier build left a mount; -force replaces the tree, but
	// only after unmounting it.
	if err := new(mount.Stack).Mount(mount.Mount{Source: "tmpfs", Target: filepath.Join(f.out, "proc"), FSType: "tmpfs"}); err != nil {
		t.Fatal(err)
	}
	f.builder.config.PackerForce = true
	ui := &testUi{}
	if _, err := f.run(context.Background(), ui, &commandHook{}); err != nil {
		t.Fatalf("%v\n%s", err, ui.output())
	}
	if _, err := os.Stat(filepath.Join(f.out, "old")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("-force kept the old tree (%v)", err)
	}
	if !strings.Contains(ui.output(), "earlier, interrupted build") {
		t.Errorf("no report of the stale mount:\n%s", ui.output())
	}
	assertTornDown(t, f.out)
}

func TestBuildFromTarball(t *testing.T) {
	chroottest.RequireRoot(t)
	src := chroottest.BusyboxRoot(t)
	dir := t.TempDir()
	for _, name := range []string{"base.tar.zst", "base.tar.gz"} {
		tb := filepath.Join(dir, name)
		if err := createTarball(context.Background(), src, tb); err != nil {
			t.Fatal(err)
		}
		t.Run(name, func(t *testing.T) {
			out := filepath.Join(dir, "out-"+name)
			b := &Builder{}
			h := fakeHost()
			h.getwd = os.Getwd
			if err := b.config.Prepare(h, map[string]interface{}{
				"source_type": "tarball", "source_path": tb, "output_directory": out,
			}); err != nil {
				t.Fatal(err)
			}
			ui := &testUi{}
			if _, err := b.Run(context.Background(), ui, &commandHook{commands: []string{"test -x /bin/busybox"}}); err != nil {
				t.Fatalf("%v\n%s", err, ui.output())
			}
			assertTornDown(t, out)
		})
	}
	// A damaged tarball fails the build with tar's complaint, and cleans up.
	bad := filepath.Join(dir, "bad.tar.zst")
	if err := os.WriteFile(bad, []byte("not zstd"), 0o644); err != nil {
		t.Fatal(err)
	}
	b := &Builder{}
	h := fakeHost()
	h.getwd = os.Getwd
	out := filepath.Join(dir, "out-bad")
	if err := b.config.Prepare(h, map[string]interface{}{"source_type": "tarball", "source_path": bad, "output_directory": out}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Run(context.Background(), &testUi{}, &commandHook{}); err == nil || !strings.Contains(err.Error(), "extract") {
		t.Errorf("damaged tarball: %v", err)
	}
	assertTornDown(t, out)
}

// A build killed with SIGKILL leaves its processes running in the tree and
// its mounts (a bind of a host directory among them). The next -force
// build kills the processes, unmounts, and replaces the tree without ever
// deleting through the bind into the host's directory.
func TestBuildRecoversFromKilledBuild(t *testing.T) {
	f := newFixture(t, nil)
	copyCmd := exec.Command("cp", "-a", f.src+"/.", f.out)
	if err := os.MkdirAll(f.out, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := copyCmd.CombinedOutput(); err != nil {
		t.Fatalf("cp: %v\n%s", err, out)
	}
	host := t.TempDir()
	sentinel := filepath.Join(host, "host-file")
	if err := os.WriteFile(sentinel, []byte("keep\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := new(mount.Stack).Mount(mount.Mount{Source: host, Target: filepath.Join(f.out, "dev"), Flags: mount.Bind}); err != nil {
		t.Fatal(err)
	}
	// The orphan: a process whose root is the tree, as a chrooted daemon's.
	orphan := exec.Command("chroot", f.out, "/bin/sleep", "300")
	orphan.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := orphan.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { orphan.Wait(); close(done) }()
	t.Cleanup(func() { orphan.Process.Kill() })
	deadline := time.Now().Add(5 * time.Second)
	for {
		// Until chroot has exec'd sleep: between chroot(2) and exec the
		// process in the tree is still named chroot.
		if ps, _ := chroot.Processes(f.out); len(ps) > 0 && ps[0].Comm == "sleep" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the orphan never entered the tree")
		}
		time.Sleep(20 * time.Millisecond)
	}

	f.builder.config.PackerForce = true
	ui := &testUi{}
	if _, err := f.run(context.Background(), ui, &commandHook{}); err != nil {
		t.Fatalf("%v\n%s", err, ui.output())
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Error("the orphan still runs")
	}
	for _, want := range []string{"killed 1 processes that an earlier, interrupted build left running", "sleep (pid", "earlier, interrupted build left under"} {
		if !strings.Contains(ui.output(), want) {
			t.Errorf("output lacks %q:\n%s", want, ui.output())
		}
	}
	if b, err := os.ReadFile(sentinel); err != nil || string(b) != "keep\n" {
		t.Fatalf("the host directory behind the bind lost its file: %q, %v", b, err)
	}
	assertTornDown(t, f.out)
}

// removeTree's second guard sees a file system boundary by itself.
func TestOtherFileSystem(t *testing.T) {
	chroottest.RequireRoot(t)
	dir := t.TempDir()
	sub := filepath.Join(dir, "a", "mnt")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := otherFileSystem(dir); err != nil || got != "" {
		t.Fatalf("one file system: %q, %v", got, err)
	}
	tmpfs := new(mount.Stack)
	if err := tmpfs.Mount(mount.Mount{Source: "tmpfs", Target: sub, FSType: "tmpfs"}); err != nil {
		t.Fatal(err)
	}
	defer tmpfs.Unmount()
	if got, err := otherFileSystem(dir); err != nil || got != sub {
		t.Errorf("tmpfs below: %q, %v; want %s", got, err, sub)
	}
	if err := removeTree(dir); err == nil {
		t.Error("removeTree went ahead over a mount")
	}
}
