//go:build e2e

// End-to-end tests of the podvm-rootfs builder: the real packer ($PACKER)
// runs the real plugin as root, debootstrapping Debian trixie through the
// base tree cache. Run them with
//
//	go test -tags e2e -run 'TestBuilder' -v ./test/e2e/
//
// They need root, debootstrap, network access to a Debian mirror (the
// first run of a UTC day; later runs hit the cache) and packer: $PACKER,
// which make sets to its pinned build.
package e2e

import (
	"archive/tar"
	"bufio"
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

	"github.com/klauspost/compress/zstd"

	"github.com/podvm-gpu/packer-plugin-podvm/chroot"
	"github.com/podvm-gpu/packer-plugin-podvm/chroot/chroottest"
)

// builderEnv is what every builder e2e case shares: packer, the installed
// plugin and a scratch directory.
type builderEnv struct {
	packer     string
	pluginPath string
	dir        string
}

func builderRepoRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(filepath.Dir(wd))
}

// setupBuilderEnv builds the plugin and installs it with packer into a
// private PACKER_PLUGIN_PATH.
func setupBuilderEnv(t *testing.T) *builderEnv {
	t.Helper()
	chroottest.RequireRoot(t)
	for _, tool := range []string{"debootstrap", "findmnt"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found: install it (apt-get install debootstrap util-linux)", tool)
		}
	}
	root := builderRepoRoot(t)
	packer := os.Getenv("PACKER")
	if packer == "" {
		t.Fatal("PACKER is not set: run the e2e tests through make test-e2e, which builds the pinned packer and sets it")
	}
	if _, err := os.Stat(packer); err != nil {
		t.Fatalf("packer not found at %s: run make tools, or set PACKER to a packer binary", packer)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "packer-plugin-podvm")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the plugin: %v\n%s", err, out)
	}
	env := &builderEnv{packer: packer, pluginPath: filepath.Join(dir, "plugins"), dir: dir}
	install := exec.Command(packer, "plugins", "install", "--path", bin, "github.com/podvm-gpu/podvm")
	install.Env = env.environ(nil)
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("install the plugin: %v\n%s", err, out)
	}
	return env
}

func (e *builderEnv) environ(extra []string) []string {
	env := append(os.Environ(),
		"PACKER_PLUGIN_PATH="+e.pluginPath,
		"CHECKPOINT_DISABLE=1",
		"PACKER_NO_COLOR=1",
	)
	return append(env, extra...)
}

// builderTemplate is a podvm-rootfs build of trixie minbase with the given
// extra source settings and provisioner blocks.
func builderTemplate(out, sourceExtra, provisioners string) string {
	return fmt.Sprintf(`
source "podvm-rootfs" "trixie" {
  suite            = "trixie"
  variant          = "minbase"
  output_directory = %q
%s
}

build {
  sources = ["source.podvm-rootfs.trixie"]
%s
}
`, out, sourceExtra, provisioners)
}

// builderRun is one packer build, its output and log kept for failures.
type builderRun struct {
	cmd    *exec.Cmd
	output *builderOutput
	log    string
	took   time.Duration
	err    error
}

type builderOutput struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *builderOutput) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *builderOutput) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (e *builderEnv) startBuild(t *testing.T, template string, args ...string) *builderRun {
	t.Helper()
	return e.startBuildEnv(t, template, nil, args...)
}

// startBuildEnv is startBuild with extra environment variables for packer
// and its plugins.
func (e *builderEnv) startBuildEnv(t *testing.T, template string, extraEnv []string, args ...string) *builderRun {
	t.Helper()
	dir := t.TempDir()
	tpl := filepath.Join(dir, "rootfs.pkr.hcl")
	if err := os.WriteFile(tpl, []byte(template), 0o644); err != nil {
		t.Fatal(err)
	}
	r := &builderRun{output: &builderOutput{}, log: filepath.Join(dir, "packer.log")}
	cmd := exec.Command(e.packer, append(append([]string{"build", "-color=false"}, args...), tpl)...)
	cmd.Dir = dir
	cmd.Env = e.environ(append([]string{"PACKER_LOG=1", "PACKER_LOG_PATH=" + r.log}, extraEnv...))
	cmd.Stdout = r.output
	cmd.Stderr = r.output
	// A process group of its own, so the test can interrupt packer the way
	// Ctrl-C in a terminal does: SIGINT to the whole foreground group. (The
	// outer packer process only wraps the real one and ignores signals.)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	r.cmd = cmd
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *builderRun) wait(t *testing.T, start time.Time) {
	t.Helper()
	r.err = r.cmd.Wait()
	r.took = time.Since(start)
	t.Logf("packer build took %s, exit: %v", r.took.Round(time.Second), r.err)
	r.logTimings(t)
}

// logTimings reports the builder's own timings ("...: done in 5.5s").
func (r *builderRun) logTimings(t *testing.T) {
	t.Helper()
	for _, line := range strings.Split(r.output.String(), "\n") {
		if strings.Contains(line, ": done in ") {
			t.Log(strings.TrimSpace(line))
		}
	}
}

func (r *builderRun) dump(t *testing.T) {
	t.Helper()
	t.Logf("packer output:\n%s", r.output.String())
	if data, err := os.ReadFile(r.log); err == nil {
		lines := strings.Split(string(data), "\n")
		if len(lines) > 150 {
			lines = lines[len(lines)-150:]
		}
		t.Logf("packer log (tail):\n%s", strings.Join(lines, "\n"))
	}
}

func (e *builderEnv) build(t *testing.T, template string, args ...string) *builderRun {
	t.Helper()
	start := time.Now()
	r := e.startBuild(t, template, args...)
	r.wait(t, start)
	return r
}

// assertRootfsClean checks what every build must leave behind, however it
// ended: nothing mounted under the directory (findmnt is the judge), no
// process inside it, and the lock released.
func assertRootfsClean(t *testing.T, out string) {
	t.Helper()
	cmd := exec.Command("findmnt", "-rn", "-o", "TARGET")
	data, err := cmd.Output()
	if err != nil {
		t.Fatalf("findmnt: %v", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		// findmnt -r escapes blanks as \x20; our paths have none.
		if line == out || strings.HasPrefix(line, out+"/") {
			t.Errorf("still mounted after the build: %s", line)
		}
	}
	if ps, err := chroot.Processes(out); err != nil {
		t.Error(err)
	} else if len(ps) > 0 {
		t.Errorf("processes still running in the tree: %v", ps)
	}
	lock := filepath.Join(filepath.Dir(out), "."+filepath.Base(out)+".lock")
	if f, err := os.Open(lock); err == nil {
		defer f.Close()
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			t.Errorf("lock %s still held: %v", lock, err)
		}
		t.Errorf("lock file %s left behind", lock)
	}
}

func TestBuilderE2E(t *testing.T) {
	env := setupBuilderEnv(t)
	work := t.TempDir()

	t.Run("success", func(t *testing.T) {
		out := filepath.Join(work, "ok")
		tarball := filepath.Join(work, "ok.tar.zst")
		download := filepath.Join(work, "downloaded")
		tpl := builderTemplate(out, fmt.Sprintf("  output_tarball = %q", tarball), fmt.Sprintf(`
  provisioner "shell" {
    inline = [
      "echo built-by-packer > /etc/podvm-e2e",
      "echo \"$HOME\" > /etc/podvm-e2e-home",
      "test -r /proc/self/status",
      "test -c /dev/null",
      "test -d /dev/pts",
      "test -x /usr/sbin/policy-rc.d",
      "grep -q nameserver /etc/resolv.conf",
      "mkdir -p /opt/podvm-e2e/sub && echo deep > /opt/podvm-e2e/sub/file && ln -sf /etc/shadow /opt/podvm-e2e/link",
    ]
  }
  provisioner "file" {
    direction   = "download"
    source      = "/opt/podvm-e2e/"
    destination = %q
  }
`, download+"/"))
		r := env.build(t, tpl)
		if r.err != nil {
			r.dump(t)
			t.Fatalf("packer build failed: %v", r.err)
		}
		for _, want := range []string{"Running debootstrap", "Unpacking the cached base tree"} {
			if strings.Contains(r.output.String(), want) {
				t.Logf("base tree: %s", want)
			}
		}
		if data, err := os.ReadFile(filepath.Join(out, "etc/podvm-e2e")); err != nil || string(data) != "built-by-packer\n" {
			t.Errorf("provisioned file: %q, %v", data, err)
		}
		if data, _ := os.ReadFile(filepath.Join(out, "etc/podvm-e2e-home")); string(data) != "/root\n" {
			t.Errorf("$HOME in the chroot: %q", data)
		}
		if _, err := os.Lstat(filepath.Join(out, "usr/sbin/policy-rc.d")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("policy-rc.d left in the image (%v)", err)
		}
		// apt_sources and upgrade default to on: the image takes security and
		// point updates, and debootstrap's one-line sources.list is gone.
		if data, err := os.ReadFile(filepath.Join(out, "etc/apt/sources.list.d/debian.sources")); err != nil {
			t.Errorf("no deb822 apt sources in the image: %v", err)
		} else {
			for _, want := range []string{"Suites: trixie trixie-updates\n", "Suites: trixie-security\n",
				"Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"} {
				if !strings.Contains(string(data), want) {
					t.Errorf("debian.sources lacks %q:\n%s", want, data)
				}
			}
		}
		if _, err := os.Lstat(filepath.Join(out, "etc/apt/sources.list")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("debootstrap's /etc/apt/sources.list left in the image (%v)", err)
		}
		for _, want := range []string{"Running apt-get -q update", "Upgrading the tree's packages: done in"} {
			if !strings.Contains(r.output.String(), want) {
				t.Errorf("build output lacks %q", want)
			}
		}
		if data, err := os.ReadFile(filepath.Join(download, "sub/file")); err != nil || string(data) != "deep\n" {
			t.Errorf("downloaded directory: %q, %v", data, err)
		}
		if target, err := os.Readlink(filepath.Join(download, "link")); err != nil || target != "/etc/shadow" {
			t.Errorf("downloaded link: %q, %v", target, err)
		}
		names := rootfsTarNames(t, tarball)
		for _, want := range []string{"./etc/podvm-e2e", "./usr/bin/apt-get"} {
			if !names[want] {
				t.Errorf("tarball lacks %s", want)
			}
		}
		for n := range names {
			// The mount points themselves belong in the archive; nothing below them.
			if (strings.HasPrefix(n, "./proc/") && n != "./proc/") || (strings.HasPrefix(n, "./dev/pts/") && n != "./dev/pts/") {
				t.Errorf("tarball holds %s from a mount", n)
				break
			}
		}
		assertRootfsClean(t, out)
	})

	t.Run("failing command", func(t *testing.T) {
		out := filepath.Join(work, "fail")
		tpl := builderTemplate(out, "", `
  provisioner "shell" {
    inline = ["echo about to fail", "exit 3"]
  }
`)
		r := env.build(t, tpl)
		if r.err == nil {
			r.dump(t)
			t.Fatal("packer build succeeded despite exit 3")
		}
		if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("output_directory kept after a failed build (%v)", err)
		}
		assertRootfsClean(t, out)
	})

	t.Run("failing command with on-error abort", func(t *testing.T) {
		out := filepath.Join(work, "abort")
		tpl := builderTemplate(out, "", `
  provisioner "shell" {
    inline = ["touch /etc/podvm-before-failure", "exit 3"]
  }
`)
		r := env.build(t, tpl, "-on-error=abort")
		if r.err == nil {
			r.dump(t)
			t.Fatal("packer build succeeded despite exit 3")
		}
		if _, err := os.Stat(filepath.Join(out, "etc/podvm-before-failure")); err != nil {
			r.dump(t)
			t.Errorf("-on-error=abort should keep the tree: %v", err)
		}
		assertRootfsClean(t, out)
		if err := os.RemoveAll(out); err != nil {
			t.Error(err)
		}
	})

	t.Run("SIGINT mid-step", func(t *testing.T) {
		out := filepath.Join(work, "interrupted")
		tpl := builderTemplate(out, "", `
  provisioner "shell" {
    inline = ["echo podvm-e2e-sleeping", "sleep 60", "touch /etc/podvm-not-reached"]
  }
`)
		start := time.Now()
		r := env.startBuild(t, tpl)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if !waitForBuilderOutput(ctx, r.output, "podvm-e2e-sleeping") {
			r.cmd.Process.Kill()
			r.wait(t, start)
			r.dump(t)
			t.Fatal("the provisioner never started sleeping")
		}
		time.Sleep(3 * time.Second)
		interrupted := time.Now()
		if err := syscall.Kill(-r.cmd.Process.Pid, syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { r.wait(t, start); close(done) }()
		select {
		case <-done:
		case <-time.After(90 * time.Second):
			r.cmd.Process.Kill()
			<-done
			r.dump(t)
			t.Fatal("packer still running 90s after SIGINT")
		}
		t.Logf("packer exited %s after SIGINT", time.Since(interrupted).Round(100*time.Millisecond))
		if r.err == nil {
			t.Error("an interrupted build exited 0")
		}
		if time.Since(interrupted) > 30*time.Second {
			t.Errorf("cleanup after SIGINT took %s; the sleep was not killed", time.Since(interrupted))
		}
		if _, err := os.Stat(filepath.Join(out, "etc/podvm-not-reached")); err == nil {
			t.Error("the provisioner ran past the interrupted sleep")
		}
		assertRootfsClean(t, out)
		if t.Failed() {
			r.dump(t)
		}
	})
}

func waitForBuilderOutput(ctx context.Context, buf *builderOutput, marker string) bool {
	for {
		if strings.Contains(buf.String(), marker) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// rootfsTarNames lists the member names of a .tar.zst file.
func rootfsTarNames(t *testing.T, file string) map[string]bool {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d, err := zstd.NewReader(bufio.NewReader(f))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	names := map[string]bool{}
	tr := tar.NewReader(d)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names
		}
		if err != nil {
			t.Fatalf("read %s: %v", file, err)
		}
		names[h.Name] = true
	}
}
