package agenttree

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/podvm-gpu/packer-plugin-podvm/agenttree/agenttreetest"
	"github.com/podvm-gpu/packer-plugin-podvm/inputcheck"
)

func copyStandIn(t *testing.T) string { return agenttreetest.StandIn(t) }

func TestCheckGoodTree(t *testing.T) {
	tree, err := Check(copyStandIn(t))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(tree.Executables, Executables) {
		t.Errorf("executables %v, want %v", tree.Executables, Executables)
	}
	wantEnabled := []string{"agent-protocol-forwarder.path", "kata-agent.path", "process-user-data.service", agenttreetest.SkeletonUnit, "scratch-space.path"}
	if got := tree.Enabled(); !slices.Equal(got, wantEnabled) {
		t.Errorf("enabled %v, want %v", got, wantEnabled)
	}
	if len(tree.Units) != 7 {
		t.Errorf("units %v, want the stand-in's seven", tree.Units)
	}
	for _, l := range tree.Links {
		if l.Target != "../"+filepath.Base(l.Path) {
			t.Errorf("link %s -> %s", l.Path, l.Target)
		}
	}
}

// TestCheckRefuses: each broken tree is refused with an inputcheck.Error
// whose problem names what is wrong.
func TestCheckRefuses(t *testing.T) {
	const unitDir = "etc/systemd/system"
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string) string // returns the path to check
		want  string
	}{
		{"missing directory", func(t *testing.T, dir string) string { return filepath.Join(dir, "absent") }, "no such directory"},
		{"empty directory", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "empty")
			must(t, os.Mkdir(p, 0o755))
			return p
		}, "an empty directory"},
		{"a file instead of a directory", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "file")
			must(t, os.WriteFile(p, []byte("x"), 0o644))
			return p
		}, "a regular file, not a directory"},
		{"missing executable", func(t *testing.T, dir string) string {
			must(t, os.Remove(filepath.Join(dir, "usr/local/bin/kata-agent")))
			return dir
		}, "no /usr/local/bin/kata-agent"},
		{"executable not executable", func(t *testing.T, dir string) string {
			must(t, os.Chmod(filepath.Join(dir, "usr/local/bin/process-user-data"), 0o644))
			return dir
		}, "/usr/local/bin/process-user-data has mode 0644"},
		{"executable a link", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "usr/local/bin/agent-protocol-forwarder")
			must(t, os.Remove(p))
			must(t, os.Symlink("kata-agent", p))
			return dir
		}, "agent-protocol-forwarder is a symbolic link"},
		{"missing unit", func(t *testing.T, dir string) string {
			must(t, os.Remove(filepath.Join(dir, unitDir, "agent-protocol-forwarder.service")))
			return dir
		}, "no unit agent-protocol-forwarder.service"},
		{"unit line outside a section", func(t *testing.T, dir string) string {
			must(t, os.WriteFile(filepath.Join(dir, unitDir, "kata-agent.service"), []byte("ExecStart=/bin/true\n[Service]\n"), 0o644))
			return dir
		}, "comes before any [Section]"},
		{"unit line not key=value", func(t *testing.T, dir string) string {
			must(t, os.WriteFile(filepath.Join(dir, unitDir, "kata-agent.service"), []byte("[Service]\nExecStart /bin/true\n"), 0o644))
			return dir
		}, "is not Key=value"},
		{"path unit without [Path]", func(t *testing.T, dir string) string {
			must(t, os.WriteFile(filepath.Join(dir, unitDir, "kata-agent.path"), []byte("[Unit]\nDescription=x\n"), 0o644))
			return dir
		}, "has no [Path] section"},
		{"broken section header", func(t *testing.T, dir string) string {
			must(t, os.WriteFile(filepath.Join(dir, unitDir, "extra.target"), []byte("[Unit\n"), 0o644))
			return dir
		}, "broken section header"},
		{"a file below /var/run", func(t *testing.T, dir string) string {
			must(t, os.MkdirAll(filepath.Join(dir, "var/run/kata"), 0o755))
			must(t, os.WriteFile(filepath.Join(dir, "var/run/kata/x"), nil, 0o644))
			return dir
		}, "it has /var/run: in the image /var/run is a link into /run"},
		{"wants link not named as a unit", func(t *testing.T, dir string) string {
			must(t, os.Symlink("/run/x", filepath.Join(dir, unitDir, "multi-user.target.wants/notes.txt")))
			return dir
		}, "is not named as a unit"},
		{"hard link to a file outside the tree", func(t *testing.T, dir string) string {
			outside := filepath.Join(t.TempDir(), "host-file")
			must(t, os.WriteFile(outside, []byte("host"), 0o644))
			must(t, os.Link(outside, filepath.Join(dir, "etc/linked")))
			return dir
		}, "/etc/linked has 2 hard links, 1 of them outside the tree"},
		{"wants link to a non-unit", func(t *testing.T, dir string) string {
			must(t, os.Symlink("../../../agent-config.toml", filepath.Join(dir, unitDir, "multi-user.target.wants/config.service")))
			return dir
		}, "not a unit file of the tree"},
		{"kata-agent not enabled", func(t *testing.T, dir string) string {
			must(t, os.Remove(filepath.Join(dir, unitDir, "multi-user.target.wants/kata-agent.path")))
			return dir
		}, "nothing enables kata-agent"},
		{"directory mode 0775", func(t *testing.T, dir string) string {
			must(t, os.Chmod(filepath.Join(dir, "etc"), 0o775))
			return dir
		}, "directory /etc has mode 0775"},
		{"tree root mode 0700", func(t *testing.T, dir string) string {
			must(t, os.Chmod(dir, 0o700))
			return dir
		}, "directory / has mode 0700"},
		{"world-writable file", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "etc/agent-config.toml")
			must(t, os.Chmod(p, 0o666))
			return dir
		}, "/etc/agent-config.toml has mode 0666"},
		{"setuid file", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "usr/local/bin/kata-agent")
			must(t, os.Chmod(p, 0o755|fs.ModeSetuid))
			return dir
		}, "nor setuid"},
		{"a FIFO", func(t *testing.T, dir string) string {
			must(t, syscall.Mkfifo(filepath.Join(dir, "etc/fifo"), 0o644))
			return dir
		}, "is a FIFO"},
		{"bin at the top", func(t *testing.T, dir string) string {
			must(t, os.Mkdir(filepath.Join(dir, "bin"), 0o755))
			return dir
		}, "/bin at its top"},
		{"a plain file at the top", func(t *testing.T, dir string) string {
			must(t, os.WriteFile(filepath.Join(dir, "README"), nil, 0o644))
			return dir
		}, "README at its top is a regular file"},
		{"a control character in a name", func(t *testing.T, dir string) string {
			must(t, os.WriteFile(filepath.Join(dir, "etc/bad\nname"), nil, 0o644))
			return dir
		}, "control character"},
		{"empty path", func(t *testing.T, dir string) string { return "" }, "empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := copyStandIn(t)
			p := tt.setup(t, dir)
			_, err := Check(p)
			var ie *inputcheck.Error
			switch {
			case err == nil:
				t.Fatalf("Check(%s) accepted it; want %q", p, tt.want)
			case !errors.As(err, &ie):
				t.Fatalf("Check: %T %v, want an *inputcheck.Error", err, err)
			case !strings.Contains(ie.Problem, tt.want):
				t.Errorf("Check: problem %q, want it to contain %q", ie.Problem, tt.want)
			case ie.Allowed == "":
				t.Errorf("Check: %v says nothing of what is allowed", err)
			}
		})
	}
}

// TestCheckHiddenTopFile: CAA's tree has a hidden placeholder file at its
// top, which is allowed.
func TestCheckHiddenTopFile(t *testing.T) {
	dir := copyStandIn(t)
	must(t, os.WriteFile(filepath.Join(dir, ".placeholder.crt"), []byte("x"), 0o644))
	if _, err := Check(dir); err != nil {
		t.Fatal(err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestCheckCarriesLinks: links of every kind CAA's tree has are carried
// as links: absolute ones into /run, a wants link to a unit the image's
// skeleton provides (an escaped name), and relative ones that climb
// above the tree, which name a path in the image, never one on the host.
// Hard links inside the tree are fine.
func TestCheckCarriesLinks(t *testing.T) {
	dir := copyStandIn(t)
	wants := "etc/systemd/system/multi-user.target.wants"
	must(t, os.Symlink("dl/../../../../etc/shadow", filepath.Join(dir, "usr/local/l")))
	must(t, os.Symlink("../..", filepath.Join(dir, "usr/local/dl")))
	must(t, os.Link(filepath.Join(dir, "etc/agent-config.toml"), filepath.Join(dir, "etc/agent-config.copy")))
	tree, err := Check(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Link{
		"/etc/kata-opa/default-policy.rego":           {Target: "/run/peerpod/policy.rego", Dest: "/run/peerpod/policy.rego"},
		"/" + wants + `/run-kata\x2dcontainers.mount`: {Target: `../run-kata\x2dcontainers.mount`, Dest: `/etc/systemd/system/run-kata\x2dcontainers.mount`},
		"/usr/local/l": {Target: "dl/../../../../etc/shadow", Dest: "/etc/shadow"},
	}
	got := map[string]Link{}
	for _, l := range tree.Elsewhere() {
		got[l.Path] = Link{Target: l.Target, Dest: l.Dest}
	}
	for p, w := range want {
		if g, ok := got[p]; !ok || g != w {
			t.Errorf("link %s: %+v (carried, target elsewhere: %v), want %+v", p, g, ok, w)
		}
	}
	if !slices.ContainsFunc(tree.Links, func(l Link) bool { return strings.HasSuffix(l.Path, `run-kata\x2dcontainers.mount`) }) {
		t.Errorf("enabling links %+v lack the skeleton's mount unit", tree.Links)
	}
	// The rest name what the tree has: its units, and its own root.
	for _, l := range tree.Carried {
		if _, elsewhere := want[l.Path]; l.InTree == elsewhere {
			t.Errorf("link %s -> %s: InTree %v", l.Path, l.Target, l.InTree)
		}
	}
}

// TestWriteTarKeepsLinks: the archive holds the links as links, every
// entry root's, and reads nothing through a link: the host's files that
// the tree's links name are not in it.
func TestWriteTarKeepsLinks(t *testing.T) {
	dir := copyStandIn(t)
	secret := filepath.Join(t.TempDir(), "host-secret")
	must(t, os.WriteFile(secret, []byte("HOST SECRET"), 0o644))
	must(t, os.Symlink(secret, filepath.Join(dir, "etc/abs-to-host")))
	tree, err := Check(dir)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := tree.WriteTar(&buf); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(buf.Bytes(), []byte("HOST SECRET")) {
		t.Fatal("the archive holds the content of a host file a link names")
	}
	tr := tar.NewReader(&buf)
	entries := map[string]*tar.Header{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		entries[h.Name] = h
		if h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s: owner %d:%d, want 0:0", h.Name, h.Uid, h.Gid)
		}
	}
	for name, want := range map[string]string{
		"etc/abs-to-host":                                            secret,
		"etc/kata-opa/default-policy.rego":                           "/run/peerpod/policy.rego",
		"etc/systemd/system/multi-user.target.wants/kata-agent.path": "../kata-agent.path",
	} {
		h := entries[name]
		if h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != want {
			t.Errorf("%s: %+v, want a link to %s", name, h, want)
		}
	}
	if h := entries["usr/local/bin/kata-agent"]; h == nil || h.Typeflag != tar.TypeReg || h.Mode != 0o755 {
		t.Errorf("kata-agent: %+v, want a regular file 0755", h)
	}
	if h := entries["etc/"]; h == nil || h.Typeflag != tar.TypeDir || h.Mode != 0o755 {
		t.Errorf("etc/: %+v, want a directory 0755", h)
	}
}

// TestWriteTarRefusesChanges: what changed between Check and WriteTar is
// never packed unchecked: a file swapped for a link to a host file, a
// directory made writable by all, a file swapped for another are
// refused naming the path; a file added since is left out; a tree given
// as a link that is repointed since is still read where it was checked.
func TestWriteTarRefusesChanges(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "host-secret")
	must(t, os.WriteFile(secret, []byte("HOST SECRET"), 0o644))
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, dir string)
		want   string // in the error; "" for none
	}{
		{"file swapped for a link", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "etc/agent-config.toml")
			must(t, os.Remove(p))
			must(t, os.Symlink(secret, p))
		}, "/etc/agent-config.toml changed after it was checked (a regular file with mode 0644, now a symbolic link"},
		{"directory made writable by all", func(t *testing.T, dir string) {
			must(t, os.Chmod(filepath.Join(dir, "etc/kata-opa"), 0o777))
		}, "/etc/kata-opa changed after it was checked (a directory with mode 0755, now a directory with mode 0777)"},
		{"file replaced", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "usr/local/bin/kata-agent")
			must(t, os.Remove(p))
			must(t, os.WriteFile(p, []byte("HOST SECRET"), 0o755))
		}, "/usr/local/bin/kata-agent changed after it was checked"},
		{"file added", func(t *testing.T, dir string) {
			must(t, os.WriteFile(filepath.Join(dir, "etc/added"), []byte("HOST SECRET"), 0o644))
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyStandIn(t)
			tree, err := Check(dir)
			if err != nil {
				t.Fatal(err)
			}
			tc.change(t, dir)
			var buf bytes.Buffer
			err = tree.WriteTar(&buf)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("WriteTar: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("WriteTar: %v, want an error with %q", err, tc.want)
			}
			if bytes.Contains(buf.Bytes(), []byte("HOST SECRET")) {
				t.Error("the archive holds what was not checked")
			}
		})
	}
	t.Run("tree link repointed", func(t *testing.T) {
		good, other := copyStandIn(t), t.TempDir()
		must(t, os.MkdirAll(filepath.Join(other, "etc"), 0o755))
		must(t, os.WriteFile(filepath.Join(other, "etc/agent-config.toml"), []byte("HOST SECRET"), 0o644))
		link := filepath.Join(t.TempDir(), "tree")
		must(t, os.Symlink(good, link))
		tree, err := Check(link)
		if err != nil {
			t.Fatal(err)
		}
		must(t, os.Remove(link))
		must(t, os.Symlink(other, link))
		var buf bytes.Buffer
		if err := tree.WriteTar(&buf); err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(buf.Bytes(), []byte("HOST SECRET")) {
			t.Error("the archive holds the tree the link points to now, not the one checked")
		}
	})
}
