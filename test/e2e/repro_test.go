//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/podvm-gpu/packer-plugin-podvm/bake"
)

// reproSeed is mkosi's seed for both builds: systemd-repart derives the
// partition and file system UUIDs from it.
const reproSeed = "0e5a3c1f-6b5d-4c39-9d1e-3b7f2a6c8d40"

// TestReproducibleMkosi is make repro: the mkosi disk, exactly as `make
// mkosi` builds it, built twice from the same inputs (the tree's
// settings, SOURCE_DATE_EPOCH, mkosi's seed, the archive's state, and a
// repository key and a module signing key of the user's), one build after
// the other, must give the same bytes in the UKI, the manifest, the SBOM
// and their signatures, the disk record but for the disk's digest, every
// file of the root (content, type, mode, owner, size, time), the
// partition table and the ESP. The root's ext4 file system itself still
// differs in a few bytes of metadata (docs/mkosi.md): logged, not failed.
//
//	go test -tags e2e -run TestReproducibleMkosi -v -timeout 60m ./test/e2e/
func TestReproducibleMkosi(t *testing.T) {
	env := setupBuilderEnv(t)
	root := builderRepoRoot(t)
	mirror := startToolkitMirror(t, root, podvmCache(t))
	keys := t.TempDir()
	repoKey, moduleKey, moduleCert := userKeys(t, keys)
	settings := append(e2eSettings(mirror),
		"LOCAL_REPO_SIGNING_KEY="+repoKey,
		"NVIDIA_MODULE_SIGNING=key", "NVIDIA_MODULE_SIGNING_KEY="+moduleKey, "NVIDIA_MODULE_SIGNING_CERT="+moduleCert,
		// After the keys were made: a key cannot sign before it existed.
		fmt.Sprintf("SOURCE_DATE_EPOCH=%d", time.Now().Unix()))

	var outs [2]string
	for i := range outs {
		work := t.TempDir()
		outs[i] = filepath.Join(work, "output")
		cmd := exec.Command(filepath.Join(root, "example/mkosi/build.sh"), "--seed="+reproSeed)
		cmd.Dir = root
		cmd.Env = env.environ(append(slices.Clone(settings), "PODVM_MKOSI_TREE="+filepath.Join(work, "tree"), "PODVM_MKOSI_OUTPUT="+outs[i]))
		var log bytes.Buffer
		cmd.Stdout, cmd.Stderr = &log, &log
		start := time.Now()
		err := cmd.Run()
		t.Logf("build %d of 2 took %s", i+1, time.Since(start).Round(time.Second))
		if err != nil {
			t.Fatalf("example/mkosi/build.sh: %v\n%s", err, tail(log.String(), 100))
		}
	}
	// What must be the same bytes. The disk itself is compared below by
	// region, and disk.json (which holds its digest) without the digest.
	for _, f := range []string{"image.efi", "podvm-artifacts/manifest.json", "podvm-artifacts/sbom.cdx.json",
		"podvm-artifacts/manifest.json.asc", "podvm-artifacts/sbom.cdx.json.asc"} {
		a, errA := os.ReadFile(filepath.Join(outs[0], f))
		b, errB := os.ReadFile(filepath.Join(outs[1], f))
		switch {
		case errA != nil || errB != nil:
			t.Errorf("%s: %v, %v", f, errA, errB)
		case !bytes.Equal(a, b):
			t.Errorf("%s differs between the two builds", f)
		default:
			t.Logf("%s: the same (%d bytes)", f, len(a))
		}
	}
	var recs [2]bake.DiskRecord
	for i := range recs {
		b, err := os.ReadFile(filepath.Join(outs[i], "podvm-artifacts", bake.DiskFile))
		must(t, err)
		must(t, json.Unmarshal(b, &recs[i]))
	}
	// With the user's key the disk record is signed too.
	for _, o := range outs {
		arts := filepath.Join(o, "podvm-artifacts")
		if out, err := exec.Command("sqv", "--keyring", filepath.Join(arts, bake.KeyFile),
			filepath.Join(arts, bake.DiskFile+bake.SignatureSuffix), filepath.Join(arts, bake.DiskFile)).CombinedOutput(); err != nil {
			t.Errorf("sqv %s%s: %v\n%s", bake.DiskFile, bake.SignatureSuffix, err, out)
		}
	}
	sums := [2]string{recs[0].Disk.SHA256, recs[1].Disk.SHA256}
	recs[0].Disk.SHA256, recs[1].Disk.SHA256 = "", ""
	if recs[0] != recs[1] {
		t.Errorf("%s differs beyond the disk's digest: %+v, %+v", bake.DiskFile, recs[0], recs[1])
	}
	diskA, diskB := filepath.Join(outs[0], "image.raw"), filepath.Join(outs[1], "image.raw")
	if sums[0] == sums[1] {
		t.Logf("image.raw: the same, SHA-256 %s", sums[0])
	} else {
		// Known, and not the layer's: the root's ext4 file system differs
		// in a few bytes of its metadata (docs/mkosi.md). Anything else
		// is a failure.
		for region, n := range diskDiffs(t, diskA, diskB) {
			if n == 0 {
				continue
			}
			if region == "root-x86-64" {
				t.Logf("image.raw: %d bytes of the root partition differ (the file system's metadata: the files are compared below)", n)
				continue
			}
			t.Errorf("image.raw: %d bytes of %s differ", n, region)
		}
	}
	rootA, rootB := mountRoot(t, diskA), mountRoot(t, diskB)
	out, _ := exec.Command("diff", "-rq", "--no-dereference", rootA, rootB).CombinedOutput()
	if s := strings.TrimSpace(strings.NewReplacer(rootA, "", rootB, "").Replace(string(out))); s != "" {
		lines := strings.Split(s, "\n")
		t.Errorf("%d files differ between the two roots:\n%s", len(lines), strings.Join(lines[:min(len(lines), 200)], "\n"))
	}
	// File content, then what diff -r does not compare: type, mode,
	// owner, size and modification time of every path.
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
	if !slices.Equal(pa, pb) {
		t.Fatalf("the partition tables differ:\n%+v\n%+v", pa, pb)
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
