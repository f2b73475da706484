//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podvm-gpu/packer-plugin-podvm/agenttree/agenttreetest"
	"github.com/podvm-gpu/packer-plugin-podvm/gpustack"
)

// TestCAAShapedE2E adds the GPU layer with `mkosi --into` to a tree shaped
// like cloud-api-adaptor's podvm tree (mkosi/testdata/caa-shaped: an
// initrd image, a system image with a UKI, a squashfs root under
// dm-verity, a volatile /var, no package metadata, and stand-ins for the
// agent stack in a skeleton tree), builds it with real mkosi, exactly as
// `make mkosi PODVM_MKOSI_INTO=DIR` does, and boots the disk offline
// under UEFI with the checks of the other disks and these: the root is
// dm-verity protected and read-only, the stand-in agent stack runs
// (kata-agent started by its path unit), and the CDI unit finished before
// kata-agent started. Then --remove leaves the tree as it was.
//
//	go test -tags e2e -run TestCAAShapedE2E -v -timeout 60m ./test/e2e/
func TestCAAShapedE2E(t *testing.T) {
	env := setupBuilderEnv(t)
	root := builderRepoRoot(t)
	cache := podvmCache(t)
	mirror := startToolkitMirror(t, root, cache)
	settings := e2eSettings(mirror)

	// The agent stack: the stand-ins example/local's e2e builds with, in
	// place of the fixture's minimal ones, so the boot checks the whole
	// agent chain here too.
	agents := agenttreetest.StandIn(t)
	work := t.TempDir()
	tree, pristine := filepath.Join(work, "tree"), filepath.Join(work, "pristine")
	for _, d := range []string{tree, pristine} {
		run(t, root, "cp", "-a", filepath.Join(root, "mkosi/testdata/caa-shaped"), d)
		must(t, os.RemoveAll(filepath.Join(d, "resources/binaries-tree")))
		run(t, root, "cp", "-a", agents, filepath.Join(d, "resources/binaries-tree"))
		// The tree's own archive list, as a user's tree has one: mkosi's
		// built-in list names a -debug suite that mirrors rarely carry.
		archive := strings.TrimSpace(run(t, root, "scripts/install-mkosi.sh", "--print-mirror"))
		sources := filepath.Join(d, "mkosi.sandbox/etc/apt/sources.list.d/mkosi.sources")
		must(t, os.MkdirAll(filepath.Dir(sources), 0o755))
		must(t, os.WriteFile(sources, []byte("Types: deb\nURIs: "+archive+"\nSuites: trixie trixie-updates\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"), 0o644))
	}

	cmd := exec.Command(filepath.Join(root, "example/mkosi/build.sh"))
	cmd.Dir = root
	cmd.Env = env.environ(append(settings, "PODVM_MKOSI_INTO="+tree))
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	start := time.Now()
	err := cmd.Run()
	t.Logf("make mkosi PODVM_MKOSI_INTO=<CAA-shaped tree> took %s", time.Since(start).Round(time.Second))
	if err != nil {
		t.Fatalf("example/mkosi/build.sh: %v\n%s", err, tail(log.String(), 200))
	}
	for _, line := range strings.Split(log.String(), "\n") {
		if strings.Contains(line, "size is") || strings.Contains(line, "GPU layer") {
			t.Log(strings.TrimSpace(line))
		}
	}
	out := filepath.Join(tree, "build")
	disk, uki, arts := filepath.Join(out, "system.raw"), filepath.Join(out, "system.efi"), filepath.Join(out, "podvm-artifacts")

	// The tree drops dpkg's database (CleanPackageMetadata=), so the SBOM
	// is checked for its signature and content, not against the disk.
	t.Run("signed record", func(t *testing.T) { checkRecord(t, arts, "") })
	t.Run("boot", func(t *testing.T) {
		spec := layerSpec(t, tree, arts)
		spec.AgentUnits = agentUnits(t, agents)
		logDisk(t, disk)
		assertNoNouveauInUKI(t, uki)
		assertBoot(t, bootCheck(t, disk, spec), spec)
	})

	t.Run("remove", func(t *testing.T) {
		must(t, os.RemoveAll(out))
		if b, err := exec.Command(filepath.Join(env.dir, "packer-plugin-podvm"), "mkosi", "--into", tree, "--remove").CombinedOutput(); err != nil {
			t.Fatalf("--remove: %v\n%s", err, b)
		}
		if b, err := exec.Command("diff", "-r", "--no-dereference", pristine, tree).CombinedOutput(); err != nil {
			t.Fatalf("--remove did not restore the tree: %v\n%s", err, b)
		}
	})
}

// layerSpec is what the boot checks look for in a disk built from a tree
// with the GPU layer: the units and mount the layer's drop-in holds, the
// main module the manifest names, and the ConfigMap's sources entry.
func layerSpec(t *testing.T, tree, arts string) guestSpec {
	t.Helper()
	var m struct {
		GPU struct{ Modules []string }
	}
	b, err := os.ReadFile(filepath.Join(arts, "manifest.json"))
	must(t, err)
	must(t, json.Unmarshal(b, &m))
	if len(m.GPU.Modules) == 0 {
		t.Fatalf("manifest.json names no NVIDIA module:\n%s", b)
	}
	extra := filepath.Join(tree, "mkosi.images/system/mkosi.conf.d/50-podvm-nvidia-gpu/mkosi.extra")
	spec := guestSpec{Module: m.GPU.Modules[0], InitrdOnHost: true, Verity: true,
		Expose: exposeWhere(t, filepath.Join(extra, "etc/systemd/system", gpustack.ExposeUnit))}
	gates, err := filepath.Glob(filepath.Join(extra, "etc/systemd/system/*.d/podvm-gpu-gate.conf"))
	must(t, err)
	for _, g := range gates {
		spec.GPUUnits = append(spec.GPUUnits, strings.TrimSuffix(filepath.Base(filepath.Dir(g)), ".d"))
	}
	if len(spec.GPUUnits) == 0 {
		t.Fatalf("the layer in %s has no gated GPU unit", extra)
	}
	spec.Sources = configMapSources(t, arts)
	return spec
}
