package rootfs

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/podvm-gpu/packer-plugin-podvm/chroot"
	"github.com/podvm-gpu/packer-plugin-podvm/chroot/chroottest"
	"github.com/podvm-gpu/packer-plugin-podvm/chroot/mount"
)

// killHelperEnv carries a killedBuild to the helper process.
const killHelperEnv = "PODVM_ROOTFS_KILL_HELPER"

// killedBuild is a build that the helper process runs until the test
// kills it.
type killedBuild struct {
	Raw      map[string]interface{}
	Commands []string // run in the chroot as the provisioner
}

// TestKilledBuildHelper is the plugin process of TestBuildSIGKILLThenForce:
// it runs a build and is killed with SIGKILL half way through.
func TestKilledBuildHelper(t *testing.T) {
	spec := os.Getenv(killHelperEnv)
	if spec == "" {
		t.Skip("the helper process of TestBuildSIGKILLThenForce")
	}
	var kb killedBuild
	if err := json.Unmarshal([]byte(spec), &kb); err != nil {
		t.Fatal(err)
	}
	b := &Builder{}
	h := fakeHost()
	h.getwd = os.Getwd
	if err := b.config.Prepare(h, kb.Raw); err != nil {
		t.Fatal(err)
	}
	ui := &testUi{}
	_, err := b.Run(context.Background(), ui, &commandHook{commands: kb.Commands})
	t.Fatalf("the build ended before it was killed: %v\n%s", err, ui.output())
}

// A plugin killed with SIGKILL runs no cleanup: it leaves the chroot's
// mounts, the processes a provisioner started in the tree, and half
// written archives in their staging directories. A rerun with -force must
// leave none of them: no mounts, no processes and no staging, beside the
// outputs or in the base-tree cache.
func TestBuildSIGKILLThenForce(t *testing.T) {
	chroottest.RequireRoot(t)
	src := chroottest.BusyboxRoot(t)
	realTar, err := exec.LookPath("tar")
	if err != nil {
		t.Fatal(err)
	}
	// A tar that hangs when it packs: the build is killed while an archive
	// is half written. It unpacks with the real one.
	slowBin := t.TempDir()
	must(t, os.WriteFile(filepath.Join(slowBin, "tar"), []byte(`#!/bin/sh
for a in "$@"; do [ "$a" = --create ] && exec sleep 300; done
exec `+realTar+` "$@"
`), 0o755))

	tests := []struct {
		name     string
		raw      func(dir string) map[string]interface{}
		commands []string
		slowTar  bool
		// killWhen is a glob below dir that matches once the build is
		// where it is to be killed.
		killWhen string
		// left is a glob below dir that the kill must leave, or "" when
		// mounts and processes are what it leaves.
		left string
	}{
		{
			name: "while provisioning",
			raw: func(dir string) map[string]interface{} {
				return map[string]interface{}{"source_type": "directory", "source_path": src, "output_directory": filepath.Join(dir, "rootfs")}
			},
			commands: []string{"setsid sleep 300 </dev/null >/dev/null 2>&1 & touch /provisioning; exec sleep 300"},
			killWhen: "rootfs/provisioning",
		},
		{
			name: "while packing output_tarball",
			raw: func(dir string) map[string]interface{} {
				return map[string]interface{}{"source_type": "directory", "source_path": src, "output_directory": filepath.Join(dir, "rootfs"), "format": "tar"}
			},
			slowTar:  true,
			killWhen: ".rootfs.tar.zst.tmp-*/rootfs.tar.zst",
			left:     ".rootfs.tar.zst.tmp-*",
		},
		{
			name: "while saving the base tree to the cache",
			raw: func(dir string) map[string]interface{} {
				return map[string]interface{}{"suite": "trixie", "mirror": "file:///srv/mirror/debian", "apt_sources": false, "upgrade": false,
					"cache_dir": filepath.Join(dir, "cache"), "output_directory": filepath.Join(dir, "rootfs")}
			},
			slowTar:  true,
			killWhen: "cache/.debootstrap-*.tmp-*/debootstrap-*",
			left:     "cache/.debootstrap-*.tmp-*",
		},
	}
	fakeDebootstrap(t, src)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "rootfs")
			t.Cleanup(func() { mount.Sweep(out, nil) })
			spec, err := json.Marshal(killedBuild{Raw: tt.raw(dir), Commands: tt.commands})
			if err != nil {
				t.Fatal(err)
			}
			helper := exec.Command(os.Args[0], "-test.run=^TestKilledBuildHelper$", "-test.v")
			path := os.Getenv("PATH")
			if tt.slowTar {
				path = slowBin + ":" + path
			}
			helper.Env = append(os.Environ(), killHelperEnv+"="+string(spec), "PATH="+path)
			var log bytes.Buffer
			helper.Stdout, helper.Stderr = &log, &log
			if err := helper.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- helper.Wait() }()
			deadline := time.After(60 * time.Second)
		wait:
			for {
				if m, _ := filepath.Glob(filepath.Join(dir, tt.killWhen)); len(m) > 0 {
					break
				}
				select {
				case err := <-exited:
					t.Fatalf("the helper ended before the kill: %v\n%s", err, log.String())
				case <-deadline:
					helper.Process.Kill()
					<-exited
					t.Fatalf("the build never reached %s\n%s", tt.killWhen, log.String())
				case <-time.After(20 * time.Millisecond):
					continue wait
				}
			}
			must(t, helper.Process.Kill())
			<-exited

			// The kill left what the rerun must clean up.
			if tt.left == "" {
				if m, _ := mount.Under(out); len(m) == 0 {
					t.Errorf("the killed build left no mounts: the test kills too late\n%s", log.String())
				}
				if ps, _ := chroot.Processes(out); len(ps) == 0 {
					t.Errorf("the killed build left no processes in the tree\n%s", log.String())
				}
			} else if m, _ := filepath.Glob(filepath.Join(dir, tt.left)); len(m) == 0 {
				t.Errorf("the killed build left no staging %s\n%s", tt.left, log.String())
			}

			raw := tt.raw(dir)
			raw["packer_force"] = true
			b := &Builder{}
			h := fakeHost()
			h.getwd = os.Getwd
			must(t, b.config.Prepare(h, raw))
			ui := &testUi{}
			if _, err := b.Run(context.Background(), ui, &commandHook{commands: []string{"test -x /bin/busybox"}}); err != nil {
				t.Fatalf("rerun with -force: %v\n%s", err, ui.output())
			}
			assertTornDown(t, out)
			for _, pattern := range []string{".*.tmp-*", ".podvm-disk-*", "cache/.*.tmp-*"} {
				if m, _ := filepath.Glob(filepath.Join(dir, pattern)); len(m) > 0 {
					t.Errorf("staging left after the rerun: %q", m)
				}
			}
			if _, err := os.Stat(filepath.Join(out, "provisioning")); err == nil {
				t.Error("-force kept the killed build's tree")
			}
			if strings.Contains(tt.name, "tarball") {
				if _, err := os.Stat(filepath.Join(dir, "rootfs.tar.zst")); err != nil {
					t.Errorf("no output_tarball after the rerun: %v", err)
				}
			}
		})
	}
}

// Writing an archive removes the staging that killed builds left beside
// it, this version's (named by process) and earlier ones' (a bare temp
// file), and leaves a live build's and unrelated files alone.
func TestWriteTarballRemovesKilledStaging(t *testing.T) {
	chroottest.RequireRoot(t)
	src := chroottest.BusyboxRoot(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "x.tar.zst")
	dead := filepath.Join(dir, ".x.tar.zst.tmp-999999999-1")
	live := filepath.Join(dir, ".x.tar.zst.tmp-"+strconv.Itoa(os.Getpid())+"-1")
	legacy := filepath.Join(dir, ".x.tar.zst.tmp-123456789")
	other := filepath.Join(dir, ".x.tar.zst.tmp-notes")
	for _, d := range []string{dead, live} {
		must(t, os.MkdirAll(filepath.Join(d, "sub"), 0o755))
	}
	for _, f := range []string{legacy, other} {
		must(t, os.WriteFile(f, nil, 0o644))
	}
	sum, err := writeTarball(context.Background(), src, file, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dead, legacy} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s left", p)
		}
	}
	for _, p := range []string{live, other} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s removed: %v", p, err)
		}
	}
	if rec, err := os.ReadFile(file + ".sha256"); err != nil || string(rec) != sum+"  x.tar.zst\n" || sum != fileSHA256(t, file) {
		t.Errorf("digest record %q (%v), sum %s", rec, err, sum)
	}
}
