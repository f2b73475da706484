package gpu

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podvm-gpu/packer-plugin-podvm/agenttree/agenttreetest"
	"github.com/podvm-gpu/packer-plugin-podvm/chroot"
	"github.com/podvm-gpu/packer-plugin-podvm/chroot/chroottest"
)

// agentRoot is a busybox root with the stand-in binaries tree uploaded to
// it as example/local's file provisioner does (UploadDir to / with a
// trailing-slash source), and a runner into it through the chroot
// communicator.
func agentRoot(t *testing.T) (root, tree string, r *runner, ui *testUi) {
	t.Helper()
	chroottest.RequireRoot(t)
	root = chroottest.BusyboxRoot(t)
	// The applets the agent script uses beyond chroottest's.
	for _, a := range []string{"[", "chown"} {
		if err := os.Symlink("busybox", filepath.Join(root, "bin", a)); err != nil {
			t.Fatal(err)
		}
	}
	comm, err := chroot.New(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { comm.Close() })
	tree = agenttreetest.StandIn(t)
	if err := comm.UploadDir("/", tree+"/", nil); err != nil {
		t.Fatal(err)
	}
	ui = &testUi{t: t}
	r = &runner{comm: comm, ui: ui, tmpl: DefaultExecuteCommand, runID: "test",
		backoff: func(int) time.Duration { return 0 }, now: time.Now, stageDir: "/tmp"}
	return root, tree, r, ui
}

// TestAgentStackChroot: the tree lands with its modes and links through
// the chroot upload; an SSH upload's copy of a wants link (it follows
// links) is made a link again; every program, unit and link is root's.
func TestAgentStackChroot(t *testing.T) {
	root, tree, r, _ := agentRoot(t)
	wants := filepath.Join(root, "etc/systemd/system/multi-user.target.wants")
	// What an SSH upload leaves: the unit's content, not a link.
	kap := filepath.Join(wants, "kata-agent.path")
	b, err := os.ReadFile(kap)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(kap); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kap, b, 0o644); err != nil {
		t.Fatal(err)
	}
	// What an upload by a non-root SSH user leaves: the user's files.
	for _, p := range []string{filepath.Join(root, "usr/local/bin/kata-agent"), filepath.Join(wants, "process-user-data.service")} {
		if err := os.Lchown(p, 1000, 1000); err != nil {
			t.Fatal(err)
		}
	}
	note, err := agentStack(context.Background(), r, tree)
	if err != nil {
		t.Fatal(err)
	}
	want := "podvm-gpu: pod VM: agent stack from " + tree + ": units agent-protocol-forwarder.path kata-agent.path process-user-data.service"
	if note != want {
		t.Errorf("note %q, want %q", note, want)
	}
	for _, l := range []string{"kata-agent.path", "agent-protocol-forwarder.path", "process-user-data.service"} {
		p := filepath.Join(wants, l)
		if got, err := os.Readlink(p); err != nil || got != "../"+l {
			t.Errorf("%s: link to %q (%v), want ../%s", p, got, err, l)
		}
		assertRootOwned(t, p)
	}
	for _, e := range []string{"kata-agent", "agent-protocol-forwarder", "process-user-data"} {
		p := filepath.Join(root, "usr/local/bin", e)
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode() != 0o755 {
			t.Errorf("%s: mode %v (%v), want 0755", p, fi.Mode(), err)
		}
		assertRootOwned(t, p)
	}
	fi, err := os.Stat(filepath.Join(root, "etc/systemd/system/kata-agent.service"))
	if err != nil || fi.Mode() != 0o644 {
		t.Errorf("kata-agent.service: %v (%v), want 0644", fi.Mode(), err)
	}
}

// TestAgentStackNotUploaded: a tree that never reached the image fails the
// build with a message that says what to do.
func TestAgentStackNotUploaded(t *testing.T) {
	root, tree, r, _ := agentRoot(t)
	if err := os.Remove(filepath.Join(root, "usr/local/bin/kata-agent")); err != nil {
		t.Fatal(err)
	}
	_, err := agentStack(context.Background(), r, tree)
	if err == nil || !strings.Contains(err.Error(), "/usr/local/bin/kata-agent is not in the image") ||
		!strings.Contains(err.Error(), "file provisioner before podvm-gpu") {
		t.Fatalf("agentStack: %v, want the missing program named", err)
	}
}

// TestAgentStackNone: without a tree the build says it makes a GPU base
// image and runs nothing.
func TestAgentStackNone(t *testing.T) {
	comm := newFakeComm(debian13())
	r := &runner{comm: comm, ui: &recordingUi{comm: comm}, tmpl: DefaultExecuteCommand}
	note, err := agentStack(context.Background(), r, "")
	if err != nil || note != baseImageNote || len(comm.log) != 0 {
		t.Fatalf("agentStack: %q, %v, commands %v", note, err, comm.log)
	}
	if !strings.Contains(note, "GPU base image, not a pod VM") {
		t.Errorf("note %q", note)
	}
}

func assertRootOwned(t *testing.T, p string) {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Error(err)
		return
	}
	st := fi.Sys().(*syscall.Stat_t)
	if st.Uid != 0 || st.Gid != 0 {
		t.Errorf("%s: owner %d:%d, want 0:0", p, st.Uid, st.Gid)
	}
}
