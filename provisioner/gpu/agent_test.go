package gpu

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podvm-gpu/packer-plugin-podvm/agenttree/agenttreetest"
	"github.com/podvm-gpu/packer-plugin-podvm/chroot"
	"github.com/podvm-gpu/packer-plugin-podvm/chroot/chroottest"
)

// agentRoot is a busybox root with GNU tar (as every Debian and Ubuntu
// image has), the stand-in binaries tree, and a runner into the root
// through the chroot communicator.
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
	hostProgram(t, root, "/usr/bin/tar", "bin/tar")
	comm, err := chroot.New(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { comm.Close() })
	tree = agenttreetest.StandIn(t)
	ui = &testUi{t: t}
	r = &runner{comm: comm, ui: ui, tmpl: DefaultExecuteCommand, runID: "test",
		backoff: func(int) time.Duration { return 0 }, now: time.Now, stageDir: "/tmp"}
	return root, tree, r, ui
}

// hostProgram copies a program of the build host and the libraries ldd
// names into root, the program at rel.
func hostProgram(t *testing.T, root, prog, rel string) {
	t.Helper()
	out, err := exec.Command("ldd", prog).Output()
	if err != nil {
		t.Fatalf("ldd %s: %v", prog, err)
	}
	files := map[string]string{prog: rel}
	for _, f := range strings.Fields(string(out)) {
		if strings.HasPrefix(f, "/") {
			files[f] = strings.TrimPrefix(f, "/")
		}
	}
	for from, to := range files {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(root, to)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// TestAgentStackChroot: the tree lands with its modes and links, links
// as links (the absolute one into /run, the wants link to a unit the
// image lacks); what an SSH upload of an earlier build left (a copy of a
// unit where a link belongs, a user's files) is replaced; every program,
// unit and link is root's; the image's /etc keeps its mode; the links
// whose targets the image lacks are named in the build log; no archive
// is left on either side.
func TestAgentStackChroot(t *testing.T) {
	root, tree, r, ui := agentRoot(t)
	must(t, os.Chmod(filepath.Join(root, "etc"), 0o751))
	wants := filepath.Join(root, "etc/systemd/system/multi-user.target.wants")
	must(t, os.MkdirAll(wants, 0o755))
	// What a file-by-file SSH upload leaves: the unit's content, not a
	// link, owned by the SSH user.
	kap := filepath.Join(wants, "kata-agent.path")
	must(t, os.WriteFile(kap, []byte("[Path]\n"), 0o644))
	must(t, os.MkdirAll(filepath.Join(root, "usr/local/bin"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "usr/local/bin/kata-agent"), []byte("old"), 0o755))
	for _, p := range []string{filepath.Join(root, "usr/local/bin/kata-agent"), kap} {
		must(t, os.Lchown(p, 1000, 1000))
	}
	note, err := agentStack(context.Background(), r, tree)
	if err != nil {
		t.Fatal(err)
	}
	want := "podvm-gpu: pod VM: agent stack from " + tree + ": units agent-protocol-forwarder.path kata-agent.path process-user-data.service " +
		agenttreetest.SkeletonUnit + " scratch-space.path"
	if note != want {
		t.Errorf("note %q, want %q", note, want)
	}
	for _, l := range []string{"kata-agent.path", "agent-protocol-forwarder.path", "process-user-data.service", agenttreetest.SkeletonUnit} {
		p := filepath.Join(wants, l)
		if got, err := os.Readlink(p); err != nil || got != "../"+l {
			t.Errorf("%s: link to %q (%v), want ../%s", p, got, err, l)
		}
		assertRootOwned(t, p)
	}
	policy := filepath.Join(root, "etc/kata-opa/default-policy.rego")
	if got, err := os.Readlink(policy); err != nil || got != "/run/peerpod/policy.rego" {
		t.Errorf("%s: link to %q (%v), want /run/peerpod/policy.rego", policy, got, err)
	}
	assertRootOwned(t, policy)
	for _, e := range []string{"kata-agent", "agent-protocol-forwarder", "process-user-data"} {
		p := filepath.Join(root, "usr/local/bin", e)
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode() != 0o755 {
			t.Errorf("%s: mode %v (%v), want 0755", p, fi.Mode(), err)
		}
		assertRootOwned(t, p)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "usr/local/bin/kata-agent")); string(b) == "old" {
		t.Error("the image's old kata-agent was kept")
	}
	fi, err := os.Stat(filepath.Join(root, "etc/systemd/system/kata-agent.service"))
	if err != nil || fi.Mode() != 0o644 {
		t.Errorf("kata-agent.service: %v (%v), want 0644", fi.Mode(), err)
	}
	if fi, err := os.Stat(filepath.Join(root, "etc")); err != nil || fi.Mode().Perm() != 0o751 {
		t.Errorf("/etc: %v (%v), want the image's own 0751", fi.Mode(), err)
	}
	said := strings.Join(ui.said, "\n")
	for _, w := range []string{"unpacked the binaries tree", "/etc/kata-opa/default-policy.rego -> /run/peerpod/policy.rego points below /run"} {
		if !strings.Contains(said, w) {
			t.Errorf("the build log lacks %q:\n%s", w, said)
		}
	}
	if !slices.ContainsFunc(ui.errors, func(s string) bool {
		return strings.Contains(s, "warning: the link /etc/systemd/system/multi-user.target.wants/"+agenttreetest.SkeletonUnit)
	}) {
		t.Errorf("no warning of the wants link to a unit the image lacks: %q", ui.errors)
	}
	left, _ := filepath.Glob(filepath.Join(root, "tmp", "*"))
	if len(left) > 0 {
		t.Errorf("left in the image's /tmp: %v", left)
	}
}

// TestAgentStackUnpackFails: an image that cannot unpack the tree fails
// the build naming the step, and the staged archive is removed.
func TestAgentStackUnpackFails(t *testing.T) {
	root, tree, r, _ := agentRoot(t)
	must(t, os.Remove(filepath.Join(root, "bin/tar")))
	_, err := agentStack(context.Background(), r, tree)
	if err == nil || !strings.Contains(err.Error(), "unpacking the binaries tree") || !strings.Contains(err.Error(), "tar -C /") {
		t.Fatalf("agentStack: %v, want the unpack step and its command named", err)
	}
	left, _ := filepath.Glob(filepath.Join(root, "tmp", "*"))
	if len(left) > 0 {
		t.Errorf("left in the image's /tmp: %v", left)
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

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
