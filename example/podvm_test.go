package example_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"

	"github.com/podvm-gpu/packer-plugin-podvm/agenttree/agenttreetest"
	"github.com/podvm-gpu/packer-plugin-podvm/chroot/chroottest"
)

// provisionerStep is one provisioner of a build block, in order: a plain
// block or a dynamic one, with its type.
type provisionerStep struct {
	typ     string
	dynamic *hclsyntax.Block // the dynamic block, nil for a plain one
	block   *hclsyntax.Block
}

// buildSteps lists the provisioners of the template's build block.
func buildSteps(t *testing.T, path string) []provisionerStep {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, diags := hclsyntax.ParseConfig(src, path, hcl.InitialPos)
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	var steps []provisionerStep
	for _, b := range f.Body.(*hclsyntax.Body).Blocks {
		if b.Type != "build" {
			continue
		}
		for _, p := range b.Body.Blocks {
			switch {
			case p.Type == "provisioner" && len(p.Labels) == 1:
				steps = append(steps, provisionerStep{typ: p.Labels[0], block: p})
			case p.Type == "dynamic" && len(p.Labels) == 1 && p.Labels[0] == "provisioner":
				v, diags := p.Body.Attributes["labels"].Expr.Value(nil)
				if diags.HasErrors() || !v.Type().IsTupleType() || v.LengthInt() != 1 {
					t.Fatalf("%s: a dynamic provisioner without one static label: %v", path, diags)
				}
				var content *hclsyntax.Block
				for _, c := range p.Body.Blocks {
					if c.Type == "content" {
						content = c
					}
				}
				steps = append(steps, provisionerStep{typ: v.Index(cty.NumberIntVal(0)).AsString(), dynamic: p, block: content})
			}
		}
	}
	return steps
}

// exprText is an attribute's source text, "" when absent.
func exprText(t *testing.T, path string, b *hclsyntax.Block, name string) string {
	t.Helper()
	a, ok := b.Body.Attributes[name]
	if !ok {
		return ""
	}
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r := a.Expr.Range()
	return string(src[r.Start.Byte:r.End.Byte])
}

// TestAgentStackBeforeGPU: every template installs the binaries tree only
// with podvm_binaries, before podvm-gpu, and hands podvm-gpu the same tree;
// local copies it straight onto the root, the clouds through a staging
// directory that root installs from.
func TestAgentStackBeforeGPU(t *testing.T) {
	for dir, want := range map[string][]string{
		"local": {"file", "podvm-gpu"},
		"aws":   {"shell", "file", "shell", "podvm-gpu"},
		"azure": {"shell", "file", "shell", "podvm-gpu"},
	} {
		t.Run(dir, func(t *testing.T) {
			path := filepath.Join(dir, "podvm.pkr.hcl")
			var got []string
			var gpu *hclsyntax.Block
			for _, s := range buildSteps(t, path) {
				if s.dynamic != nil || s.typ == "podvm-gpu" {
					got = append(got, s.typ)
				}
				if s.typ == "podvm-gpu" {
					gpu = s.block
				}
				if s.dynamic == nil {
					continue
				}
				if fe := exprText(t, path, s.dynamic, "for_each"); !strings.Contains(fe, "podvm_binaries") {
					t.Errorf("a dynamic %s provisioner runs without podvm_binaries: for_each = %s", s.typ, fe)
				}
				if s.typ == "file" {
					dst := exprText(t, path, s.block, "destination")
					if (dir == "local") != (dst == `"/"`) {
						t.Errorf("the tree's file provisioner uploads to %s", dst)
					}
				}
			}
			if !slices.Equal(got, want) {
				t.Errorf("provisioners %v, want %v (the agent stack before podvm-gpu)", got, want)
			}
			if gpu == nil || !strings.Contains(exprText(t, path, gpu, "podvm_binaries"), "var.podvm_binaries") {
				t.Error("podvm-gpu is not given podvm_binaries")
			}
		})
	}
}

// TestCloudAgentInstall runs the cloud templates' install step for real:
// the stand-in tree as an SSH upload leaves it in the staging directory
// (links followed, the SSH user's files), installed by root into a root
// directory. Everything lands owned by root with the tree's modes, the
// image's own directories keep theirs, and the staging directory goes.
func TestCloudAgentInstall(t *testing.T) {
	chroottest.RequireRoot(t)
	for _, cloud := range []string{"aws", "azure"} {
		t.Run(cloud, func(t *testing.T) {
			work := t.TempDir()
			staging, root := filepath.Join(work, "staging"), filepath.Join(work, "root")
			// An SSH upload follows links: cp -L does the same.
			run(t, "cp", "-RL", agenttreetest.StandIn(t), staging)
			run(t, "chown", "-R", "1000:1000", staging)
			for _, d := range []string{"etc", "usr"} {
				if err := os.MkdirAll(filepath.Join(root, d), 0o700); err != nil {
					t.Fatal(err)
				}
			}
			script := installScript(t, filepath.Join(cloud, "podvm.pkr.hcl"), staging)
			// The script installs into /; the test's root stands in for it.
			if !strings.Contains(script, " -C / ") {
				t.Fatalf("the install step does not unpack into /:\n%s", script)
			}
			run(t, "sh", "-c", strings.ReplaceAll(script, " -C / ", " -C "+root+" "))

			for _, p := range []string{"usr/local/bin/kata-agent", "etc/systemd/system/kata-agent.service",
				"etc/systemd/system/multi-user.target.wants/kata-agent.path"} {
				fi, err := os.Lstat(filepath.Join(root, p))
				if err != nil {
					t.Error(err)
					continue
				}
				if st := fi.Sys().(*syscall.Stat_t); st.Uid != 0 || st.Gid != 0 {
					t.Errorf("/%s: owner %d:%d, want root", p, st.Uid, st.Gid)
				}
				want := os.FileMode(0o644)
				if strings.HasPrefix(p, "usr/local/bin/") {
					want = 0o755
				}
				if fi.Mode() != want {
					t.Errorf("/%s: mode %v, want %v", p, fi.Mode(), want)
				}
			}
			if fi, err := os.Stat(filepath.Join(root, "etc")); err != nil || fi.Mode().Perm() != 0o700 {
				t.Errorf("the image's /etc: %v (%v), want its own mode 0700 kept", fi.Mode(), err)
			}
			if _, err := os.Lstat(staging); !os.IsNotExist(err) {
				t.Errorf("the staging directory is left (%v)", err)
			}
		})
	}
}

// installScript is the inline script of the template's last dynamic shell
// provisioner, with its staging directory at staging.
func installScript(t *testing.T, path, staging string) string {
	t.Helper()
	var install *hclsyntax.Block
	for _, s := range buildSteps(t, path) {
		if s.dynamic != nil && s.typ == "shell" {
			install = s.block
		}
	}
	if install == nil {
		t.Fatalf("%s: no dynamic shell provisioner", path)
	}
	if ec := exprText(t, path, install, "execute_command"); !strings.Contains(ec, "sudo -n sh") {
		t.Errorf("the install step does not run as root through sudo -n: %s", ec)
	}
	ctx := &hcl.EvalContext{Variables: map[string]cty.Value{
		"local": cty.ObjectVal(map[string]cty.Value{"podvm_staging": cty.StringVal(staging)}),
	}}
	v, diags := install.Body.Attributes["inline"].Expr.Value(ctx)
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	var lines []string
	for it := v.ElementIterator(); it.Next(); {
		_, l := it.Element()
		lines = append(lines, l.AsString())
	}
	return strings.Join(lines, "\n")
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}
