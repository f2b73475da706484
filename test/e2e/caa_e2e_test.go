//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"

	"github.com/podvm-gpu/packer-plugin-podvm/agenttree/agenttreetest"
	"github.com/podvm-gpu/packer-plugin-podvm/diskrecord"
	"github.com/podvm-gpu/packer-plugin-podvm/gpustack"
	"github.com/podvm-gpu/packer-plugin-podvm/sbom"
)

// TestCAAShapedE2E runs the CAA-shaped build and boot of TestImageE2E on
// its own (make check-caa), with the user's module cache, for work on
// the --into path; make check runs it inside TestImageE2E, where it also
// gets compared with the standalone mkosi image.
//
//	go test -tags e2e -run TestCAAShapedE2E -v -timeout 60m ./test/e2e/
func TestCAAShapedE2E(t *testing.T) {
	env := setupBuilderEnv(t)
	root := builderRepoRoot(t)
	mirror := startToolkitMirror(t, root, podvmCache(t))
	testCAAShaped(t, env, root, e2eSettings(mirror), "")
}

// testCAAShaped adds the GPU layer with `mkosi --into` to a tree shaped
// like cloud-api-adaptor's podvm tree (mkosi/testdata/caa-shaped: an
// initrd image, a system image with a UKI, a squashfs root under
// dm-verity, a volatile /var, no package metadata, and stand-ins for the
// agent stack in a skeleton tree), builds it with real mkosi, exactly as
// `make mkosi PODVM_MKOSI_INTO=DIR` does, and boots the disk offline
// under UEFI with the checks of the other disks and these: the root is
// dm-verity protected and read-only, the stand-in agent stack runs
// (kata-agent started by its path unit), and the CDI unit finished before
// kata-agent started. With standalone set (the root of the standalone
// mkosi image of the same settings), the disk's root is compared with it
// on the GPU-owned state. Then --remove leaves the tree as it was.
func testCAAShaped(t *testing.T, env *builderEnv, root string, settings []string, standalone string) {
	t.Helper()
	work := t.TempDir()
	tree, pristine := filepath.Join(work, "tree"), filepath.Join(work, "pristine")
	agents := caaShapedTree(t, root, tree)
	caaShapedTree(t, root, pristine)

	cmd := exec.Command(filepath.Join(root, "example/mkosi/build.sh"))
	cmd.Dir = root
	cmd.Env = env.environ(append(slices.Clone(settings), "PODVM_MKOSI_INTO="+tree))
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	start := time.Now()
	err := cmd.Run()
	t.Logf("make mkosi PODVM_MKOSI_INTO=<CAA-shaped tree> took %s", time.Since(start).Round(time.Second))
	if err != nil {
		t.Fatalf("example/mkosi/build.sh: %v\n%s", err, tail(log.String(), 200))
	}
	for _, line := range strings.Split(log.String(), "\n") {
		if strings.Contains(line, "size is") || strings.Contains(line, "GPU layer") || strings.Contains(line, "module cache") {
			t.Log(strings.TrimSpace(line))
		}
	}
	out := filepath.Join(tree, "build")
	disk, uki, arts := filepath.Join(out, "system.raw"), filepath.Join(out, "system.efi"), filepath.Join(out, "podvm-artifacts")

	// The tree drops dpkg's database (CleanPackageMetadata=), so the SBOM
	// is checked for its signature and content, not against the disk.
	t.Run("caa signed record", func(t *testing.T) {
		checkRecord(t, arts, "")
		checkDiskRecord(t, arts, disk, uki, false)
	})
	t.Run("caa boot", func(t *testing.T) {
		spec := layerSpec(t, tree, arts)
		spec.AgentUnits = agentUnits(t, agents)
		logDisk(t, disk)
		assertNoNouveauInUKI(t, uki)
		assertBoot(t, bootCheck(t, disk, spec), spec)
	})
	if standalone != "" {
		t.Run("caa equivalence", func(t *testing.T) { compareLayer(t, standalone, mountRoot(t, disk), arts) })
	}

	t.Run("caa remove", func(t *testing.T) {
		must(t, os.RemoveAll(out))
		if b, err := exec.Command(filepath.Join(env.dir, "packer-plugin-podvm"), "mkosi", "--into", tree, "--remove").CombinedOutput(); err != nil {
			t.Fatalf("--remove: %v\n%s", err, b)
		}
		if b, err := exec.Command("diff", "-r", "--no-dereference", pristine, tree).CombinedOutput(); err != nil {
			t.Fatalf("--remove did not restore the tree: %v\n%s", err, b)
		}
	})
}

// caaShapedTree copies the CAA-shaped fixture to dir, with the stand-ins
// of the agent stack that example/local's e2e builds with in place of the
// fixture's minimal ones (so the boot checks the whole agent chain), and
// returns where those stand-ins are.
func caaShapedTree(t *testing.T, root, dir string) (agents string) {
	t.Helper()
	agents = agenttreetest.StandIn(t)
	run(t, root, "cp", "-a", filepath.Join(root, "mkosi/testdata/caa-shaped"), dir)
	must(t, os.RemoveAll(filepath.Join(dir, "resources/binaries-tree")))
	run(t, root, "cp", "-a", agents, filepath.Join(dir, "resources/binaries-tree"))
	// The tree's own archive list, as a user's tree has one: mkosi's
	// built-in list names a -debug suite that mirrors rarely carry.
	archive := strings.TrimSpace(run(t, root, "scripts/install-mkosi.sh", "--print-mirror"))
	sources := filepath.Join(dir, "mkosi.sandbox/etc/apt/sources.list.d/mkosi.sources")
	must(t, os.MkdirAll(filepath.Dir(sources), 0o755))
	must(t, os.WriteFile(sources, []byte("Types: deb\nURIs: "+archive+"\nSuites: trixie trixie-updates\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"), 0o644))
	return agents
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

// mountRoot mounts the root partition of disk read-only, through a
// read-only loop device, and returns where; both go at the test's end.
func mountRoot(t *testing.T, disk string) string {
	t.Helper()
	for _, p := range partitions(t, disk) {
		if p.Type != diskrecord.RootType {
			continue
		}
		dev := strings.TrimSpace(run(t, "/", "losetup", "--find", "--show", "--read-only",
			"--offset", strconv.FormatInt(p.Offset, 10), "--sizelimit", strconv.FormatInt(p.Size, 10), disk))
		t.Cleanup(func() { _ = exec.Command("losetup", "-d", dev).Run() })
		dir := t.TempDir()
		run(t, "/", "mount", "-o", "ro", dev, dir)
		t.Cleanup(func() { _ = exec.Command("umount", dir).Run() })
		return dir
	}
	t.Fatalf("%s has no root partition (type %s)", disk, diskrecord.RootType)
	return ""
}

// partitions reads disk's partition table.
func partitions(t *testing.T, disk string) []diskrecord.Partition {
	t.Helper()
	f, err := os.Open(disk)
	must(t, err)
	defer f.Close()
	parts, err := diskrecord.ReadGPT(f)
	if err != nil {
		t.Fatalf("%s: %v", disk, err)
	}
	return parts
}

// compareLayer compares the GPU-owned state of the layer in a tree of
// the user's (caaRoot: the mounted root of its disk, with no dpkg
// database; caaArts: its artefacts) with the standalone mkosi image of
// the same settings: the files the plan writes byte for byte, the
// enabled NVIDIA units, the NVIDIA packages (the SBOM stands in for the
// dropped database) and the manifest beyond what each build has of its
// own.
func compareLayer(t *testing.T, standalone, caaRoot, caaArts string) {
	t.Helper()
	files := gpuOwnedFiles(t, standalone, caaRoot)
	t.Logf("comparing %d files byte for byte", len(files))
	for _, f := range files {
		a, errA := os.ReadFile(filepath.Join(standalone, f))
		b, errB := os.ReadFile(filepath.Join(caaRoot, f))
		if errA != nil || errB != nil || !bytes.Equal(a, b) {
			t.Errorf("%s differs (standalone %v, CAA-shaped %v)", f, errA, errB)
		}
	}
	if a, b := nvidiaUnits(t, standalone), nvidiaUnits(t, caaRoot); !slices.Equal(a, b) || len(a) == 0 {
		t.Errorf("enabled NVIDIA units differ or none: standalone %v, CAA-shaped %v", a, b)
	}

	want := nvidiaPackages(dpkgInstalled(t, standalone))
	bb, err := os.ReadFile(filepath.Join(caaArts, sbom.File))
	must(t, err)
	var bom cdx.BOM
	must(t, cdx.NewBOMDecoder(bytes.NewReader(bb), cdx.BOMFileFormatJSON).Decode(&bom))
	listed := map[string]string{}
	for _, c := range *bom.Components {
		listed[c.Name] = c.Version
	}
	if got := nvidiaPackages(listed); !equalMaps(want, got) || len(want) == 0 {
		t.Errorf("NVIDIA packages differ or none:\nstandalone %v\nCAA-shaped %v", want, got)
	} else {
		t.Logf("NVIDIA packages: %d, same names and versions", len(want))
	}

	kver := dirNames(t, filepath.Join(standalone, "usr/lib/modules"))[0]
	if k := dirNames(t, filepath.Join(caaRoot, "usr/lib/modules"))[0]; k != kver {
		t.Fatalf("kernels differ: standalone %s, CAA-shaped %s", kver, k)
	}
	a, b := normalManifest(t, standalone, kver, false), normalManifest(t, caaRoot, kver, false)
	if !reflect.DeepEqual(a, b) {
		ja, _ := json.MarshalIndent(a, "", " ")
		jb, _ := json.MarshalIndent(b, "", " ")
		t.Errorf("manifests differ beyond generator, created and keys:\nstandalone %s\nCAA-shaped %s", ja, jb)
	} else {
		t.Logf("manifests equal beyond generator, created and keys (%d GPU packages, %d in the repository)", len(a.GPU.Packages), len(a.Repo.Packages))
	}
}
