package agenttree

import (
	"errors"
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
	wantEnabled := []string{"agent-protocol-forwarder.path", "kata-agent.path", "process-user-data.service"}
	if got := tree.Enabled(); !slices.Equal(got, wantEnabled) {
		t.Errorf("enabled %v, want %v", got, wantEnabled)
	}
	if len(tree.Units) != 5 {
		t.Errorf("units %v, want the stand-in's five", tree.Units)
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
		{"absolute symlink", func(t *testing.T, dir string) string {
			must(t, os.Symlink("/etc/shadow", filepath.Join(dir, "etc/shadow-copy")))
			return dir
		}, "an absolute path"},
		{"relative symlink escaping the tree", func(t *testing.T, dir string) string {
			must(t, os.Symlink("../../../../etc/passwd", filepath.Join(dir, "etc/systemd/passwd")))
			return dir
		}, "outside the tree"},
		{"dangling symlink", func(t *testing.T, dir string) string {
			must(t, os.Symlink("../absent.service", filepath.Join(dir, unitDir, "multi-user.target.wants/absent.service")))
			return dir
		}, "not in the tree"},
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
