//go:build e2e

package e2e

import (
	"bytes"
	"debug/pe"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/podvm-gpu/packer-plugin-podvm/bake"
	"github.com/podvm-gpu/packer-plugin-podvm/diskrecord"
	"github.com/podvm-gpu/packer-plugin-podvm/sbom"
)

// reproSeed is mkosi's seed for both builds: systemd-repart derives the
// partition and file system UUIDs from it.
const reproSeed = "0e5a3c1f-6b5d-4c39-9d1e-3b7f2a6c8d40"

// TestReproducibleMkosi is make repro: two mkosi trees, each built twice
// from the same inputs (the tree's settings, SOURCE_DATE_EPOCH, mkosi's
// seed, the archive's state, and a repository key and a module signing
// key of the user's), one build after the other, must give the same
// bytes: the standalone disk exactly as `make mkosi` builds it, and the
// CAA-shaped tree with the GPU layer (`make mkosi PODVM_MKOSI_INTO=`),
// whose squashfs root is under dm-verity. A difference fails the test
// with the differing files named: the artefacts, the disk by region, and
// the root's files and their metadata.
//
//	go test -tags e2e -run TestReproducibleMkosi -v -timeout 90m ./test/e2e/
func TestReproducibleMkosi(t *testing.T) {
	env := setupBuilderEnv(t)
	root := builderRepoRoot(t)
	mirror := startToolkitMirror(t, root, podvmCache(t))
	keys := t.TempDir()
	repoKey, moduleKey, moduleCert := userKeys(t, keys)
	settings := append(e2eSettings(mirror),
		"LOCAL_REPO_SIGNING_KEY="+repoKey,
		"NVIDIA_MODULE_SIGNING=key", "NVIDIA_MODULE_SIGNING_KEY="+moduleKey, "NVIDIA_MODULE_SIGNING_CERT="+moduleCert,
		// After the keys were made, as a user's release date would be.
		// The CAA-shaped tree sets its own (0, as cloud-api-adaptor's
		// does), before the keys: their signatures are dated when the
		// keys were made.
		fmt.Sprintf("SOURCE_DATE_EPOCH=%d", time.Now().Unix()))
	// Under make check, the run's build cache, where the image lane's
	// compiled modules are; alone, the user's.
	if d := os.Getenv("PODVM_E2E_BUILD_CACHE"); d != "" {
		settings = append(settings, "PODVM_BUILD_CACHE_DIR="+d)
	}

	t.Run("standalone", func(t *testing.T) {
		var outs [2]string
		for i := range outs {
			work := t.TempDir()
			outs[i] = filepath.Join(work, "output")
			reproBuild(t, env, root, i, append(slices.Clone(settings),
				"PODVM_MKOSI_TREE="+filepath.Join(work, "tree"), "PODVM_MKOSI_OUTPUT="+outs[i]))
		}
		compareBuilds(t, outs, "image.raw", "image.efi", false)
	})
	t.Run("caa-shaped", func(t *testing.T) {
		var outs [2]string
		for i := range outs {
			tree := filepath.Join(t.TempDir(), "tree")
			caaShapedTree(t, root, tree)
			// mkosi's --seed is the top-level image's alone; a tree of
			// several images that wants the same UUIDs and verity salt
			// each build sets Seed= where its disk is made.
			seed := filepath.Join(tree, "mkosi.images/system/mkosi.conf.d/90-seed.conf")
			must(t, os.MkdirAll(filepath.Dir(seed), 0o755))
			must(t, os.WriteFile(seed, []byte("[Output]\nSeed="+reproSeed+"\n"), 0o644))
			// Without the layer the fixture is not reproducible: each image
			// keeps ldconfig's aux-cache and alternatives.log (inode numbers
			// and times), since mkosi applies the top level's
			// RemoveFiles= to no subimage. A tree that wants the same
			// bytes removes them in each image; the layer must keep it so.
			for _, img := range []string{"initrd", "system"} {
				f := filepath.Join(tree, "mkosi.images", img, "mkosi.conf.d/90-repro.conf")
				must(t, os.MkdirAll(filepath.Dir(f), 0o755))
				must(t, os.WriteFile(f, []byte("[Content]\nRemoveFiles=/var/cache/ldconfig/aux-cache\nRemoveFiles=/var/log/alternatives.log\n"), 0o644))
			}
			reproBuild(t, env, root, i, append(slices.Clone(settings), "PODVM_MKOSI_INTO="+tree))
			outs[i] = filepath.Join(tree, "build")
		}
		compareBuilds(t, outs, "system.raw", "system.efi", true)
		var rec bake.DiskRecord
		b, err := os.ReadFile(filepath.Join(outs[0], "podvm-artifacts", bake.DiskFile))
		must(t, err)
		must(t, json.Unmarshal(b, &rec))
		if rec.Disk.RootHash == "" {
			t.Errorf("%s of the verity tree has no root hash: %s", bake.DiskFile, b)
		}
		t.Logf("dm-verity root hash of both builds: %s", rec.Disk.RootHash)
	})
}

// reproBuild runs example/mkosi/build.sh, build i of two, with mkosi's
// seed fixed.
func reproBuild(t *testing.T, env *builderEnv, root string, i int, settings []string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(root, "example/mkosi/build.sh"), "--seed="+reproSeed)
	cmd.Dir = root
	cmd.Env = env.environ(settings)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	start := time.Now()
	err := cmd.Run()
	t.Logf("build %d of 2 took %s", i+1, time.Since(start).Round(time.Second))
	if err != nil {
		t.Fatalf("example/mkosi/build.sh: %v\n%s", err, tail(log.String(), 100))
	}
	for _, line := range strings.Split(log.String(), "\n") {
		if strings.Contains(line, "module cache") {
			t.Log(strings.TrimSpace(line))
		}
	}
}

// compareBuilds compares the outputs of two builds (outs: mkosi's output
// directories) and fails on any difference, naming it: the UKI, the
// manifest, the SBOM, their signatures and the disk record byte for byte,
// the disk's SHA-256, and where the disks differ, by region, then every
// file of the root (content, type, mode, owner, size, time).
func compareBuilds(t *testing.T, outs [2]string, disk, uki string, verity bool) {
	t.Helper()
	arts := "podvm-artifacts/"
	for _, f := range []string{uki, arts + bake.ManifestFile, arts + sbom.File, arts + bake.DiskFile,
		arts + bake.ManifestFile + bake.SignatureSuffix, arts + sbom.File + bake.SignatureSuffix, arts + bake.DiskFile + bake.SignatureSuffix} {
		a, errA := os.ReadFile(filepath.Join(outs[0], f))
		b, errB := os.ReadFile(filepath.Join(outs[1], f))
		switch {
		case errA != nil || errB != nil:
			t.Errorf("%s: %v, %v", f, errA, errB)
		case !bytes.Equal(a, b):
			t.Errorf("%s differs between the two builds%s", f, peDiffs(a, b))
		default:
			t.Logf("%s: the same (%d bytes)", f, len(a))
		}
	}
	// With the user's key the disk record is signed too.
	for _, o := range outs {
		a := filepath.Join(o, arts)
		if out, err := exec.Command("sqv", "--keyring", filepath.Join(a, bake.KeyFile),
			filepath.Join(a, bake.DiskFile+bake.SignatureSuffix), filepath.Join(a, bake.DiskFile)).CombinedOutput(); err != nil {
			t.Errorf("sqv %s%s: %v\n%s", bake.DiskFile, bake.SignatureSuffix, err, out)
		}
	}
	diskA, diskB := filepath.Join(outs[0], disk), filepath.Join(outs[1], disk)
	verityUKI := ""
	if verity {
		verityUKI = filepath.Join(outs[0], uki)
	}
	checkDiskRecord(t, filepath.Join(outs[0], arts), diskA, verityUKI, true)
	sumA, sumB := fileSHA256(t, diskA), fileSHA256(t, diskB)
	if sumA == sumB {
		t.Logf("%s: the same, SHA-256 %s", disk, sumA)
		return
	}
	t.Errorf("%s differs: SHA-256 %s and %s", disk, sumA, sumB)
	for region, n := range diskDiffs(t, diskA, diskB) {
		if n != 0 {
			t.Errorf("%s: %d bytes of %s differ", disk, n, region)
		}
	}
	rootA, rootB := mountRoot(t, diskA), mountRoot(t, diskB)
	out, _ := exec.Command("diff", "-rq", "--no-dereference", rootA, rootB).CombinedOutput()
	if s := strings.TrimSpace(strings.NewReplacer(rootA, "", rootB, "").Replace(string(out))); s != "" {
		lines := strings.Split(s, "\n")
		t.Errorf("%d files differ between the two roots:\n%s", len(lines), strings.Join(lines[:min(len(lines), 200)], "\n"))
		// Where the first few differ, and what they are: a module's
		// build, a log's times, a cache's order.
		n := 0
		for _, l := range lines {
			f := strings.Fields(l)
			if len(f) != 5 || f[0] != "Files" || n == 10 {
				continue
			}
			n++
			out, _ := exec.Command("cmp", filepath.Join(rootA, f[1]), filepath.Join(rootB, f[3])).CombinedOutput()
			t.Errorf("%s: %s", f[1], strings.NewReplacer(rootA, "", rootB, "").Replace(strings.TrimSpace(string(out))))
		}
	}
	// What diff -r does not compare: type, mode, owner, size and
	// modification time of every path.
	meta := func(dir string) string {
		out, err := exec.Command("find", dir, "-printf", "%P %y %m %U %G %s %T@\n").Output()
		must(t, err)
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		slices.Sort(lines)
		return strings.Join(lines, "\n")
	}
	if a, b := meta(rootA), meta(rootB); a != b {
		d := filepath.Join(t.TempDir(), "meta")
		must(t, os.WriteFile(d+"1", []byte(a), 0o644))
		must(t, os.WriteFile(d+"2", []byte(b), 0o644))
		out, _ := exec.Command("diff", d+"1", d+"2").CombinedOutput()
		t.Errorf("the roots' file metadata differ (path type mode uid gid size mtime):\n%s", tail(string(out), 100))
	}
}

// userKeys makes the keys a user brings: an OpenPGP signing key (GnuPG)
// for the repository and an X.509 key and certificate (OpenSSL) for the
// NVIDIA modules.
func userKeys(t *testing.T, dir string) (repoKey, moduleKey, moduleCert string) {
	t.Helper()
	home := filepath.Join(dir, "gnupg")
	must(t, os.Mkdir(home, 0o700))
	gpg := func(args ...string) []byte {
		out, err := exec.Command("gpg", append([]string{"--batch", "--homedir", home, "--pinentry-mode", "loopback", "--passphrase", ""}, args...)...).Output()
		if err != nil {
			t.Fatalf("gpg %v: %v", args, err)
		}
		return out
	}
	gpg("--quick-gen-key", "podvm repro", "ed25519", "sign", "never")
	repoKey = filepath.Join(dir, "repo.asc")
	must(t, os.WriteFile(repoKey, gpg("--armor", "--export-secret-keys"), 0o600))
	moduleKey, moduleCert = filepath.Join(dir, "module.key"), filepath.Join(dir, "module.crt")
	run(t, dir, "openssl", "req", "-new", "-x509", "-newkey", "rsa:3072", "-nodes", "-days", "36500",
		"-subj", "/CN=podvm repro module signing/", "-keyout", moduleKey, "-out", moduleCert)
	return repoKey, moduleKey, moduleCert
}

// diskDiffs counts the bytes that differ between two disks of the same
// layout, by region: "table" (before the first partition and after the
// last: the GPT and its backup) and each partition by its name.
func diskDiffs(t *testing.T, a, b string) map[string]int {
	t.Helper()
	pa, pb := partitions(t, a), partitions(t, b)
	// The layout must agree for a comparison by region; the UUIDs need
	// not: on a verity disk systemd-repart derives them from the root
	// hash, so they differ whenever the roots do, and the roots' files
	// are what says why.
	layout := func(ps []diskrecord.Partition) []diskrecord.Partition {
		out := slices.Clone(ps)
		for i := range out {
			out[i].UUID = ""
		}
		return out
	}
	if !slices.Equal(layout(pa), layout(pb)) {
		t.Fatalf("the partition layouts differ:\n%+v\n%+v", pa, pb)
	}
	for i := range pa {
		if pa[i].UUID != pb[i].UUID {
			t.Errorf("partition %s: UUIDs %s and %s", pa[i].Name, pa[i].UUID, pb[i].UUID)
		}
	}
	ba, err := os.ReadFile(a)
	must(t, err)
	bb, err := os.ReadFile(b)
	must(t, err)
	if len(ba) != len(bb) || len(pa) == 0 {
		t.Fatalf("disk sizes %d and %d, %d partitions", len(ba), len(bb), len(pa))
	}
	count := func(from, to int64) (n int) {
		for i := from; i < to; i++ {
			if ba[i] != bb[i] {
				n++
			}
		}
		return n
	}
	last := pa[len(pa)-1]
	diffs := map[string]int{"table": count(0, pa[0].Offset) + count(last.Offset+last.Size, int64(len(ba)))}
	for _, p := range pa {
		n := count(p.Offset, p.Offset+p.Size)
		diffs[p.Name] += n
		t.Logf("partition %s (%s): %d of %d bytes differ", p.Name, p.Type, n, p.Size)
	}
	return diffs
}

// comparePackerRuns compares the GPU-owned state of two roots that
// podvm-gpu built from the same base tree and inputs (the same
// SOURCE_DATE_EPOCH) with ephemeral keys: the files the plan writes, the
// files of the NVIDIA packages, DKMS's tree, the image kernel's extra
// modules, the local repository and the layer's keyrings, each by type,
// mode and content. They must be the same but for what the keys sign
// (docs/mkosi.md, "Reproducible builds"): the modules, which carry the
// build's module signature, the module certificate and the record of the
// modules' signatures, and the repository's keyrings, signatures and
// manifest.
func comparePackerRuns(t *testing.T, a, b string) {
	t.Helper()
	paths := map[string]bool{}
	for _, f := range gpuOwnedFiles(t, a, b) {
		paths[f] = true
	}
	for pkg := range nvidiaPackages(dpkgInstalled(t, a)) {
		lists, err := filepath.Glob(filepath.Join(a, "var/lib/dpkg/info", pkg+"*.list"))
		must(t, err)
		for _, l := range lists {
			if n := strings.TrimSuffix(filepath.Base(l), ".list"); n != pkg && !strings.HasPrefix(n, pkg+":") {
				continue
			}
			data, err := os.ReadFile(l)
			must(t, err)
			for _, f := range strings.Split(strings.TrimSpace(string(data)), "\n") {
				if f = strings.TrimPrefix(f, "/"); f != "" && f != "." {
					paths[f] = true
				}
			}
		}
	}
	kernels, err := filepath.Glob(filepath.Join(a, "usr/lib/modules/*/updates"))
	must(t, err)
	dirs := []string{"var/lib/dkms", "opt/local-packages", "usr/share/podvm-gpu"}
	for _, k := range kernels {
		rel, _ := filepath.Rel(a, k)
		dirs = append(dirs, rel)
	}
	for _, root := range []string{a, b} {
		for _, d := range dirs {
			for _, line := range treeListing(t, filepath.Join(root, d)) {
				paths[filepath.Join(d, strings.Fields(line)[0])] = true
			}
		}
	}
	keyDependent := func(p string) bool {
		return strings.HasPrefix(p, "usr/lib/modules/") && strings.Contains(p, "/updates/") && strings.Contains(p, ".ko") ||
			strings.HasPrefix(p, "usr/share/podvm-gpu/module-signing.") ||
			slices.Contains([]string{"usr/share/podvm-gpu/module-signatures.tsv",
				"usr/share/keyrings/podvm-local-packages.gpg", "opt/local-packages/InRelease", "opt/local-packages/Release.gpg",
				"opt/local-packages/keyring.gpg", "opt/local-packages/manifest.json", "opt/local-packages/keyring.asc"}, p)
	}
	var same, keyed int
	var differ []string
	for _, p := range slices.Sorted(maps.Keys(paths)) {
		la, lb := pathListing(t, a, p), pathListing(t, b, p)
		switch {
		case la == lb:
			same++
		case keyDependent(p):
			keyed++
		default:
			differ = append(differ, fmt.Sprintf("%s: %s | %s", p, la, lb))
		}
	}
	t.Logf("GPU-owned paths of the two Packer builds: %d the same, %d differ by their keys", same, keyed)
	if len(differ) > 0 {
		t.Errorf("%d GPU-owned paths differ between two Packer builds from the same inputs:\n%s", len(differ), strings.Join(differ[:min(len(differ), 100)], "\n"))
	}
	if same == 0 || keyed == 0 {
		t.Errorf("compared %d paths the same and %d key-dependent: the listing found nothing to compare", same, keyed)
	}
}

// pathListing is one path below root by type, mode and content digest
// (a link by its target); "absent" when there is none.
func pathListing(t *testing.T, root, rel string) string {
	t.Helper()
	p := filepath.Join(root, rel)
	fi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "absent"
	}
	must(t, err)
	switch {
	case fi.Mode().IsRegular():
		return fi.Mode().String() + " " + fileSHA256(t, p)
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(p)
		must(t, err)
		return fi.Mode().String() + " -> " + target
	}
	return fi.Mode().String()
}

// peDiffs names the sections in which two PE files (UKIs) differ, or
// says nothing when they are not PE files.
func peDiffs(a, b []byte) string {
	fa, errA := pe.NewFile(bytes.NewReader(a))
	fb, errB := pe.NewFile(bytes.NewReader(b))
	if errA != nil || errB != nil {
		return ""
	}
	var names []string
	for _, sa := range fa.Sections {
		sb := fb.Section(sa.Name)
		if sb == nil {
			names = append(names, sa.Name+" (in the first only)")
			continue
		}
		da, _ := sa.Data()
		db, _ := sb.Data()
		if !bytes.Equal(da, db) {
			names = append(names, fmt.Sprintf("%s (%d and %d bytes)", sa.Name, len(da), len(db)))
		}
	}
	return ": sections " + strings.Join(names, ", ")
}
