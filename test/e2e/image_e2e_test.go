//go:build e2e

package e2e

import (
	"bytes"
	"crypto/md5"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/podvm-gpu/packer-plugin-podvm/agenttree"
	"github.com/podvm-gpu/packer-plugin-podvm/agenttree/agenttreetest"
	"github.com/podvm-gpu/packer-plugin-podvm/aptrepo"
	"github.com/podvm-gpu/packer-plugin-podvm/bake"
	"github.com/podvm-gpu/packer-plugin-podvm/gpustack"
	"github.com/podvm-gpu/packer-plugin-podvm/keyscan"
	"github.com/podvm-gpu/packer-plugin-podvm/settings"
)

// e2eSettings are the options both back ends get, through the environment
// as `make image` and `make mkosi` pass them: the table's defaults, which
// is what a user gets with no flags (the GPU stack, Debian's driver with
// the proprietary modules auto picks on 13, the pinned toolkit, hook and
// CDI service, holds), with only the container toolkit's repository
// pointed at the local stand-in mirror, since NVIDIA's is out of reach.
func e2eSettings(m toolkitMirror) []string {
	return []string{
		"NVIDIA_CONTAINER_TOOLKIT_REPO_URL=" + m.URL,
		"NVIDIA_CONTAINER_TOOLKIT_REPO_KEYRING=" + m.Keyring,
	}
}

// TestImageE2E builds example/local with real packer, exactly as
// `sudo make image` does, and the same options as a mkosi image with real
// mkosi 25.3, exactly as `make mkosi` does. Both images get the same checks:
// NVIDIA modules for the image's own kernel, hook, toolkit config (set by
// the real nvidia-ctk), units, the signed repository and manifest, no
// private key anywhere, and the offline driver-container check: a second
// minimal rootfs plays the GPU Operator's driver container and, with the
// baked repository bind-mounted read-only and the ConfigMap's sources entry
// as its only apt source, installs the kernel headers inside a network
// namespace with no network at all. example/local is built a second time
// from the same inputs and the two roots compared on their GPU-owned files.
// Then the Packer and mkosi images are compared on the GPU-owned state.
//
//	go test -tags e2e -run TestImageE2E -v -timeout 60m ./test/e2e/
func TestImageE2E(t *testing.T) {
	env := setupBuilderEnv(t)
	root := builderRepoRoot(t)
	cache := podvmCache(t)
	mirror := startToolkitMirror(t, root, cache)
	// A module cache of this run's own: the Packer build misses and stores
	// the DKMS build, the mkosi builds of the same kernel and driver
	// restore it.
	// One SOURCE_DATE_EPOCH for every build: the two Packer builds are
	// compared.
	settings := append(e2eSettings(mirror), "PODVM_BUILD_CACHE_DIR="+runCache(t),
		fmt.Sprintf("SOURCE_DATE_EPOCH=%d", time.Now().Unix()))

	// The Packer image is a pod VM: the agent stack from the stand-in
	// binaries tree, then the GPU layer.
	agents := agenttreetest.StandIn(t)
	rootfs, arts := buildWithPacker(t, env, root, agents, settings, "stored")
	t.Run("packer", func(t *testing.T) { checkGPUImage(t, env, rootfs, arts) })
	t.Run("packer agent stack", func(t *testing.T) { checkAgentStack(t, rootfs, agents) })
	t.Run("packer disk record", func(t *testing.T) { checkDiskRecord(t, arts, rootfs+".qcow2", "", false) })
	t.Run("packer boot", func(t *testing.T) {
		disk := rootfs + ".qcow2"
		logDisk(t, disk)
		spec := imageSpec(t, rootfs, arts)
		spec.AgentUnits = agentUnits(t, agents)
		// Booted as a cloud volume larger than the image is.
		spec.GrowTo = 8 << 30
		// The example generates the initramfs once, after the GPU layer:
		// its nouveau hook must have applied.
		initrds, err := filepath.Glob(filepath.Join(rootfs, "boot/initrd.img-*"))
		must(t, err)
		if len(initrds) != 1 {
			t.Fatalf("the image has %d initramfs files, want one: %v", len(initrds), initrds)
		}
		data, err := os.ReadFile(initrds[0])
		must(t, err)
		assertNoNouveauInInitrd(t, initrds[0], data)
		assertBoot(t, bootCheck(t, disk, spec), spec)
	})

	// The same inputs once more, on the cached base tree and modules: the
	// GPU-owned files must be the same but for what the ephemeral keys
	// sign.
	rerun, _ := buildWithPacker(t, env, root, agents, settings, "restored")
	t.Run("packer rerun", func(t *testing.T) { comparePackerRuns(t, rootfs, rerun) })
	must(t, os.RemoveAll(filepath.Dir(rerun)))

	image, mkArts := buildWithMkosi(t, env, root, cache, settings)
	t.Run("mkosi", func(t *testing.T) { checkGPUImage(t, env, image, mkArts) })

	// The disk, exactly as `make mkosi` builds it, booted with the checks
	// the Packer disk gets; what to look for comes from the tree build of
	// the same configuration.
	disk, uki, diskArts := buildMkosiDisk(t, env, root, settings)
	t.Run("mkosi disk record", func(t *testing.T) { checkDiskRecord(t, diskArts, disk, "", false) })
	t.Run("mkosi boot", func(t *testing.T) {
		logDisk(t, disk)
		// The disk is its own build, with its own repository key: the
		// ConfigMap comes from its artefacts.
		spec := imageSpec(t, image, diskArts)
		spec.InitrdOnHost = true
		assertNoNouveauInUKI(t, uki)
		assertBoot(t, bootCheck(t, disk, spec), spec)
	})

	t.Run("equivalence", func(t *testing.T) { compareImages(t, rootfs, image) })

	// The layer added with --into to a tree shaped like cloud-api-adaptor's,
	// built with this run's module cache, booted, and compared with the
	// standalone mkosi image.
	testCAAShaped(t, env, root, settings, image)
}

// runCache is the build cache of this run: make check's, which starts
// empty and which its lanes share (PODVM_E2E_BUILD_CACHE: the NVIDIA
// modules are compiled once per run, and TestReproducibleMkosi restores
// them), or the test's own.
func runCache(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("PODVM_E2E_BUILD_CACHE"); d != "" {
		return d
	}
	return t.TempDir()
}

// userCacheDir is the user's cache directory ($XDG_CACHE_HOME or
// ~/.cache), where make keeps $PODVM_CACHE by default.
func userCacheDir(t *testing.T) string {
	t.Helper()
	d, err := os.UserCacheDir()
	must(t, err)
	return d
}

// podvmCache is the build cache the builds under test use: $PODVM_CACHE,
// or the Makefile's default below the user's cache directory.
func podvmCache(t *testing.T) string {
	t.Helper()
	if c := os.Getenv("PODVM_CACHE"); c != "" {
		return c
	}
	return filepath.Join(userCacheDir(t), "podvm")
}

// buildWithPacker builds example/local with the pod VM binaries tree
// agents, as `make image PODVM_BINARIES=DIR` does.
// cache is what the module cache must report: "stored" (a build that
// compiled the modules) or "restored".
func buildWithPacker(t *testing.T, env *builderEnv, root, agents string, settings []string, cache string) (rootfs, arts string) {
	t.Helper()
	work := t.TempDir()
	rootfs, arts = filepath.Join(work, "rootfs"), filepath.Join(work, "artifacts")
	start := time.Now()
	cmd := exec.Command(env.packer, "build", "-color=false",
		"-var", "output_directory="+rootfs, "-var", "artifacts_directory="+arts, "-var", "podvm_binaries="+agents, ".")
	cmd.Dir = filepath.Join(root, "example/local")
	cmd.Env = env.environ(settings)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	t.Logf("packer build of example/local took %s", time.Since(start).Round(time.Second))
	logTimings(t, out.String())
	if err != nil {
		t.Fatalf("packer build: %v; its whole output:\n%s", err, out.String())
	}
	assertRootfsClean(t, rootfs)
	// The builder tells the provisioner its target is a chroot (generated
	// data through packer), so dpkg ran without fsync, as in mkosi.
	if !strings.Contains(out.String(), "the target is the podvm-rootfs chroot: dpkg runs without fsync") {
		t.Error("the provisioner did not learn from the builder that its target is a chroot")
	}
	assertModuleCache(t, "packer build", out.String(), cache)
	if cache == "restored" {
		assertKnownSound(t, out.String())
	}
	// The note names every unit the tree's links enable, those the image
	// or its skeleton provides among them.
	at, err := agenttree.Check(agents)
	must(t, err)
	want := "podvm-gpu: pod VM: agent stack from " + agents + ": units " + strings.Join(at.Enabled(), " ")
	if !strings.Contains(out.String(), want) {
		t.Errorf("the build log lacks %q", want)
	}
	return rootfs, arts
}

// agentUnits are the units a binaries tree enables.
func agentUnits(t *testing.T, tree string) []string {
	t.Helper()
	at, err := agenttree.Check(tree)
	if err != nil {
		t.Fatal(err)
	}
	// The units of the tree's own: a link to one the image's skeleton
	// provides (or nobody does) is checked as a link (agent-links).
	var units []string
	for _, l := range at.Links {
		if l.InTree {
			units = append(units, path.Base(l.Path))
		}
	}
	slices.Sort(units)
	return slices.Compact(units)
}

// checkAgentStack: the tree's programs, units and enabling links are in
// the image as the tree has them, owned by root, beside the GPU layer.
func checkAgentStack(t *testing.T, rootfs, agents string) {
	at, err := agenttree.Check(agents)
	must(t, err)
	for _, e := range at.Executables {
		assertOwnerMode(t, filepath.Join(rootfs, e), 0o755)
	}
	for _, u := range at.Units {
		assertOwnerMode(t, filepath.Join(rootfs, u), 0o644)
	}
	for _, l := range at.Carried {
		got, err := os.Readlink(filepath.Join(rootfs, l.Path))
		if err != nil || got != l.Target {
			t.Errorf("%s: link to %q (%v), want %q", l.Path, got, err, l.Target)
		}
	}
	enabled := enabledUnits(t, rootfs)
	for _, u := range append(at.Enabled(), "nvidia-cdi-generate.service") {
		if !enabled[u] {
			t.Errorf("%s is not enabled", u)
		}
	}
}

// buildWithMkosi renders the tree with the plugin binary's mkosi command
// and the same settings, and builds it with real mkosi.
func buildWithMkosi(t *testing.T, env *builderEnv, root, cache string, settings []string) (image, arts string) {
	t.Helper()
	mkosiEnv, err := exec.Command(filepath.Join(root, "scripts/install-mkosi.sh"), "--print-env").Output()
	if err != nil {
		t.Fatalf("scripts/install-mkosi.sh: %v", err)
	}
	work := t.TempDir()
	tree, out := filepath.Join(work, "tree"), filepath.Join(work, "out")
	gen := exec.Command(filepath.Join(env.dir, "packer-plugin-podvm"), "mkosi", "--output", tree, "--distribution", "debian", "--release", "13")
	gen.Env = env.environ(settings)
	if b, err := gen.CombinedOutput(); err != nil {
		t.Fatalf("packer-plugin-podvm mkosi: %v\n%s", err, b)
	}
	pkgcache := filepath.Join(cache, "mkosi-pkgcache")
	must(t, os.MkdirAll(pkgcache, 0o755))
	args := append(strings.Fields(strings.TrimSpace(string(mkosiEnv))), "--format=directory", "--bootable=no",
		"--kernel-modules-initrd=no", "--output-dir="+out, "--package-cache-dir="+pkgcache, "-f", "build")
	cmd := exec.Command("env", args...)
	cmd.Dir = tree
	cmd.Env = env.environ(settings)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	start := time.Now()
	err = cmd.Run()
	t.Logf("mkosi build took %s", time.Since(start).Round(time.Second))
	if err != nil {
		t.Fatalf("mkosi build: %v; its whole output:\n%s", err, log.String())
	}
	assertModuleCache(t, "mkosi build", log.String(), "restored")
	return filepath.Join(out, "image"), filepath.Join(out, "podvm-artifacts")
}

// buildMkosiDisk runs example/mkosi/build.sh, which `make mkosi` runs, with
// the same settings, into a scratch tree and output directory.
func buildMkosiDisk(t *testing.T, env *builderEnv, root string, settings []string) (disk, uki, arts string) {
	t.Helper()
	work := t.TempDir()
	out := filepath.Join(work, "output")
	cmd := exec.Command(filepath.Join(root, "example/mkosi/build.sh"))
	cmd.Dir = root
	cmd.Env = env.environ(append(slices.Clone(settings), "PODVM_MKOSI_TREE="+filepath.Join(work, "tree"), "PODVM_MKOSI_OUTPUT="+out))
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	start := time.Now()
	err := cmd.Run()
	t.Logf("make mkosi (example/mkosi/build.sh) took %s", time.Since(start).Round(time.Second))
	if err != nil {
		t.Fatalf("example/mkosi/build.sh: %v\n%s", err, log.String())
	}
	assertModuleCache(t, "make mkosi", log.String(), "restored")
	for _, line := range strings.Split(log.String(), "\n") {
		if strings.Contains(line, "tools tree") || strings.Contains(line, "size is") {
			t.Log(strings.TrimSpace(line))
		}
	}
	disk, uki = filepath.Join(out, "image.raw"), filepath.Join(out, "image.efi")
	for _, f := range []string{disk, uki} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("make mkosi left no %s: %v\n%s", filepath.Base(f), err, log.String())
		}
	}
	return disk, uki, filepath.Join(out, "podvm-artifacts")
}

// assertModuleCache checks that a build took its NVIDIA modules through the
// module cache as expected ("stored": built and kept; "restored": taken
// from the cache, no DKMS build), and logs the cache's lines.
func assertModuleCache(t *testing.T, what, log, want string) {
	t.Helper()
	var lines []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "module cache: ") || strings.Contains(l, "building nvidia-") || strings.Contains(l, "built nvidia-") {
			lines = append(lines, strings.TrimSpace(l))
		}
	}
	t.Logf("%s, module cache:\n%s", what, strings.Join(lines, "\n"))
	if !strings.Contains(log, "module cache: "+want+" nvidia-") {
		t.Errorf("%s: no module %s through the module cache", what, want)
	}
	if want == "restored" && strings.Contains(log, "building nvidia-") {
		t.Errorf("%s: built a module with DKMS although the cache had it", what)
	}
}

// repoLineRe is the bake's summary line with the .deb cache on.
var repoLineRe = regexp.MustCompile(`repository \S+: ([0-9]+) packages \(([0-9]+) found sound by an earlier build`)

// assertKnownSound: a rebuild from the same cache indexes every package
// without decompressing it again (the first build checked them all).
func assertKnownSound(t *testing.T, log string) {
	t.Helper()
	m := repoLineRe.FindStringSubmatch(log)
	if m == nil {
		t.Errorf("the rebuild's log has no repository line with the packages found sound before")
		return
	}
	t.Logf("rebuild: %s", m[0])
	if m[1] != m[2] {
		t.Errorf("the rebuild decompressed .debs an earlier build had checked: %s of %s known", m[2], m[1])
	}
}

func logTimings(t *testing.T, out string) {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, ": done in ") || strings.Contains(line, "steps done in") {
			t.Log(strings.TrimSpace(line))
		}
	}
}

// checkGPUImage is what every GPU image must satisfy, whichever back end
// built it.
func checkGPUImage(t *testing.T, env *builderEnv, rootfs, arts string) {
	kernels := dirNames(t, filepath.Join(rootfs, "usr/lib/modules"))
	if len(kernels) != 1 {
		t.Fatalf("kernels in the image: %v, want one", kernels)
	}
	kver := kernels[0]
	var uts syscall.Utsname
	must(t, syscall.Uname(&uts))
	host := utsString(uts.Release)
	t.Logf("image kernel %s, host kernel %s", kver, host)

	t.Run("modules built for the image kernel", func(t *testing.T) {
		if kver == host {
			t.Skipf("host and image run the same kernel %s: cannot tell them apart", host)
		}
		got := run(t, rootfs, "chroot", rootfs, "modinfo", "-k", kver, "-F", "vermagic", "nvidia-current")
		if !strings.HasPrefix(got, kver+" ") {
			t.Errorf("modinfo nvidia-current for %s: vermagic %s", kver, got)
		}
		if _, err := os.Stat(filepath.Join(rootfs, "usr/lib/modules", host)); err == nil {
			t.Errorf("modules were built for the host's kernel %s too", host)
		}
	})

	// DKMS's pause and the initramfs deferral last only as long as the
	// build: the image keeps DKMS's own behaviour on a node's kernel
	// upgrades, and initramfs-tools' conffile as its package shipped it.
	t.Run("no build-time pauses left", func(t *testing.T) {
		for _, f := range []string{"etc/dkms/no-autoinstall", "etc/initramfs-tools/update-initramfs.conf.podvm-saved"} {
			if _, err := os.Lstat(filepath.Join(rootfs, f)); !os.IsNotExist(err) {
				t.Errorf("/%s is in the image (%v)", f, err)
			}
		}
		conf, err := os.ReadFile(filepath.Join(rootfs, "etc/initramfs-tools/update-initramfs.conf"))
		if errors.Is(err, fs.ErrNotExist) {
			return // an image without initramfs-tools (mkosi makes its own initrd)
		}
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(conf), "\nupdate_initramfs=yes\n") {
			t.Errorf("update-initramfs.conf lost update_initramfs=yes:\n%s", conf)
		}
	})

	t.Run("modules signed by the build's certificate", func(t *testing.T) {
		checkModuleSigning(t, rootfs, arts, kver)
	})

	t.Run("hook, toolkit config, units", func(t *testing.T) {
		hook := filepath.Join(rootfs, gpustack.HookPath)
		assertOwnerMode(t, hook, 0o755)
		b, err := os.ReadFile(hook)
		must(t, err)
		if !strings.Contains(string(b), "exec /usr/bin/nvidia-container-toolkit -debug") {
			t.Errorf("hook script:\n%s", b)
		}
		if fi, err := os.Lstat(filepath.Join(rootfs, "usr/bin/nvidia-container-toolkit")); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			t.Errorf("the toolkit's hook binary is missing: %v", err)
		}
		var cfg struct {
			DisableRequire bool `toml:"disable-require"`
			CLI            struct {
				NoCgroups bool   `toml:"no-cgroups"`
				NoPivot   bool   `toml:"no-pivot"`
				Debug     string `toml:"debug"`
			} `toml:"nvidia-container-cli"`
			Runtime struct {
				Debug string `toml:"debug"`
			} `toml:"nvidia-container-runtime"`
		}
		if _, err := toml.DecodeFile(filepath.Join(rootfs, "etc/nvidia-container-runtime/config.toml"), &cfg); err != nil {
			t.Fatal(err)
		}
		if !cfg.DisableRequire || !cfg.CLI.NoCgroups || !cfg.CLI.NoPivot || cfg.CLI.Debug == "" || cfg.Runtime.Debug == "" {
			t.Errorf("toolkit config: %+v", cfg)
		}
		for _, u := range []string{"nvidia-persistenced.service", "nvidia-cdi-generate.service"} {
			if !enabledUnits(t, rootfs)[u] {
				t.Errorf("%s is not enabled", u)
			}
		}
		for _, p := range []string{
			"etc/systemd/system/nvidia-cdi-generate.service.d/podvm-gpu-gate.conf",
			"etc/systemd/system/nvidia-persistenced.service.d/podvm-gpu-gate.conf",
			"etc/modprobe.d/podvm-blacklist-nouveau.conf",
		} {
			if _, err := os.Lstat(filepath.Join(rootfs, p)); err != nil {
				t.Error(err)
			}
		}
		assertOwnerMode(t, filepath.Join(rootfs, "usr/libexec/podvm-gpu/has-nvidia-gpu"), 0o755)
		assertOwnerMode(t, filepath.Join(rootfs, "usr/libexec/podvm-gpu/nvidia-cdi-generate"), 0o755)
	})

	repo := filepath.Join(rootfs, "opt/local-packages")
	t.Run("repository and manifest", func(t *testing.T) {
		var m bake.Manifest
		b, err := os.ReadFile(filepath.Join(arts, bake.ManifestFile))
		must(t, err)
		must(t, json.Unmarshal(b, &m))
		inImage, err := os.ReadFile(filepath.Join(repo, "manifest.json"))
		must(t, err)
		if !bytes.Equal(b, inImage) {
			t.Error("manifest.json differs between the image and the output directory")
		}
		if strings.Join(m.Kernels, " ") != kver || m.GPU == nil || m.GPU.Flavour != "proprietary" || m.Repo == nil {
			t.Fatalf("manifest: %s", b)
		}
		// The defaults: the driver's installed version recorded, the pinned
		// toolkit, the kernel, driver and toolkit held.
		if !strings.HasPrefix(m.GPU.DriverVersion, m.GPU.DriverBranch+".") || m.GPU.ToolkitVersion != settings.DefaultToolkitVersion {
			t.Errorf("manifest: driver version %q (branch %s), toolkit %q, want the installed driver and toolkit %s",
				m.GPU.DriverVersion, m.GPU.DriverBranch, m.GPU.ToolkitVersion, settings.DefaultToolkitVersion)
		}
		for _, want := range []string{"linux-image-" + kver, "nvidia-kernel-dkms", "nvidia-container-toolkit"} {
			if !slices.Contains(m.Held, want) {
				t.Errorf("manifest: %s not held; held %v", want, m.Held)
			}
		}
		names := map[string]bool{}
		for _, p := range m.Repo.Packages {
			names[p.Name] = true
			if _, err := os.Stat(filepath.Join(repo, p.Filename)); err != nil {
				t.Errorf("manifest lists %s, not in the repo: %v", p.Filename, err)
			}
		}
		for _, want := range []string{"linux-headers-" + kver, "linux-image-" + kver} {
			if !names[want] {
				t.Errorf("repo lacks %s", want)
			}
		}
		filepath.WalkDir(repo, func(p string, d fs.DirEntry, err error) error {
			must(t, err)
			want := fs.FileMode(0o644)
			if d.IsDir() {
				want = 0o755
			}
			assertOwnerMode(t, p, want)
			return nil
		})
		for _, f := range []string{"InRelease", "Release", "Release.gpg", "Packages", "Packages.gz"} {
			if _, err := os.Stat(filepath.Join(repo, f)); err != nil {
				t.Error(err)
			}
		}
	})

	t.Run("signed record", func(t *testing.T) { checkRecord(t, arts, rootfs) })
	t.Run("no private key material", func(t *testing.T) {
		scanNoPrivateKey(t, rootfs)
		scanNoPrivateKey(t, arts)
	})

	t.Run("offline driver container", func(t *testing.T) {
		offlineDriverContainer(t, env, arts, repo, kver)
	})
}

// enabledUnits lists the units the image starts: wants symlinks, and the
// units its preset files enable (applied on first boot).
func enabledUnits(t *testing.T, root string) map[string]bool {
	t.Helper()
	units := map[string]bool{}
	wants, _ := filepath.Glob(filepath.Join(root, "etc/systemd/system/*.wants/*"))
	for _, w := range wants {
		units[filepath.Base(w)] = true
	}
	for _, dir := range []string{"etc/systemd/system-preset", "usr/lib/systemd/system-preset"} {
		files, _ := filepath.Glob(filepath.Join(root, dir, "*podvm*.preset"))
		for _, f := range files {
			b, err := os.ReadFile(f)
			must(t, err)
			for _, line := range strings.Split(string(b), "\n") {
				if u, ok := strings.CutPrefix(strings.TrimSpace(line), "enable "); ok {
					units[strings.TrimSpace(u)] = true
				}
			}
		}
	}
	return units
}

// compareImages holds the two back ends to the same GPU-owned state. The
// one known difference is the kernel point release: mkosi installs from the
// release's security suite as well (see docs/mkosi.md), so kernel package
// names are compared with the version replaced by {kernel}.
func compareImages(t *testing.T, packerRoot, mkosiRoot string) {
	pk, mk := dirNames(t, filepath.Join(packerRoot, "usr/lib/modules"))[0], dirNames(t, filepath.Join(mkosiRoot, "usr/lib/modules"))[0]
	t.Logf("kernels: packer %s, mkosi %s", pk, mk)

	if a, b := nvidiaPackages(dpkgInstalled(t, packerRoot)), nvidiaPackages(dpkgInstalled(t, mkosiRoot)); !equalMaps(a, b) {
		t.Errorf("NVIDIA packages differ:\npacker %v\nmkosi  %v", a, b)
	} else {
		t.Logf("NVIDIA packages: %d, same names and versions", len(a))
	}
	// This run's module cache was empty: the Packer build compiled the
	// modules and the mkosi build restored them. DKMS's tree must come out
	// the same either way, or a cold cache and a warm one would give
	// different images from the same inputs.
	if pk == mk {
		a, b := treeListing(t, filepath.Join(packerRoot, "var/lib/dkms")), treeListing(t, filepath.Join(mkosiRoot, "var/lib/dkms"))
		if !slices.Equal(a, b) {
			t.Errorf("/var/lib/dkms of the compiled build (packer) and the restored one (mkosi) differ:\npacker %s\nmkosi  %s", strings.Join(a, "\n       "), strings.Join(b, "\n       "))
		} else {
			t.Logf("/var/lib/dkms: %d entries, the same compiled (packer) and restored (mkosi)", len(a))
		}
	}
	same := gpuOwnedFiles(t, packerRoot, mkosiRoot)
	t.Logf("comparing %d files byte for byte", len(same))
	for _, f := range same {
		a, errA := os.ReadFile(filepath.Join(packerRoot, f))
		b, errB := os.ReadFile(filepath.Join(mkosiRoot, f))
		if errA != nil || errB != nil || !bytes.Equal(a, b) {
			t.Errorf("%s differs (packer %v, mkosi %v)", f, errA, errB)
		}
	}
	if a, b := nvidiaUnits(t, packerRoot), nvidiaUnits(t, mkosiRoot); !slices.Equal(a, b) {
		t.Errorf("enabled NVIDIA units differ: packer %v, mkosi %v", a, b)
	}
	held := func(root string) []string {
		b, err := os.ReadFile(filepath.Join(root, "var/lib/dpkg/status"))
		must(t, err)
		var out []string
		for _, para := range strings.Split(string(b), "\n\n") {
			if strings.TrimSpace(para) == "" {
				continue
			}
			p, err := aptrepo.ParseControl([]byte(para))
			must(t, err)
			if p.Value("Status") == "hold ok installed" {
				out = append(out, p.Value("Package"))
			}
		}
		slices.Sort(out)
		return out
	}
	// mkosi installs the kernel meta packages (Plan.KernelPackages: the
	// kernel comes from the archive at build time); the Packer base image
	// has the kernel it has. A package either image has alone must be one
	// of those, and the holds compare on what both have (docs/mkosi.md).
	pInst, mInst := dpkgInstalled(t, packerRoot), dpkgInstalled(t, mkosiRoot)
	explained := []string{"linux-image-amd64", "linux-headers-amd64"}
	both := func(names []string) []string {
		var out []string
		for _, n := range names {
			_, inP := pInst[n]
			_, inM := mInst[n]
			switch {
			case inP && inM:
				out = append(out, n)
			case !slices.Contains(explained, n):
				t.Errorf("%s is held in one image only, and it is not a kernel meta package", n)
			}
		}
		return out
	}
	if a, b := both(held(packerRoot)), both(held(mkosiRoot)); !slices.Equal(a, b) || len(a) == 0 {
		t.Errorf("held packages differ or none: packer %v, mkosi %v", a, b)
	} else {
		t.Logf("held packages: %d, the same", len(a))
	}
	a, b := normalManifest(t, packerRoot, pk, pk != mk), normalManifest(t, mkosiRoot, mk, pk != mk)
	a.Held, b.Held = both(a.Held), both(b.Held)
	if !reflect.DeepEqual(a, b) {
		ja, _ := json.MarshalIndent(a, "", " ")
		jb, _ := json.MarshalIndent(b, "", " ")
		t.Errorf("manifests differ beyond generator, created and keys:\npacker %s\nmkosi  %s", ja, jb)
	} else {
		t.Logf("manifests equal beyond generator, created and keys (%d GPU packages, %d held, %d in the repository)", len(a.GPU.Packages), len(a.Held), len(a.Repo.Packages))
	}
	// The same signer policy: both sign with an ephemeral key of the same
	// subject (each build its own key, so the certificates differ).
	signing := func(root string) bake.ModuleSigning {
		m := readManifest(t, root)
		if m.GPU == nil || m.GPU.ModuleSigning == nil {
			t.Fatalf("%s: no module_signing in the manifest", root)
		}
		ms := *m.GPU.ModuleSigning
		ms.CertSHA256, ms.Modules = "", nil // each build its own key; the modules by the manifests above
		return ms
	}
	if a, b := signing(packerRoot), signing(mkosiRoot); !reflect.DeepEqual(a, b) {
		t.Errorf("module signing differs: packer %+v, mkosi %+v", a, b)
	}
	repoSet := func(root, kver string) []string {
		m := readManifest(t, root)
		var out []string
		// Shared kernel packages carry the ABI without the flavour
		// (linux-kbuild-6.12.117+deb13): normalise that too.
		abi := kver[:max(strings.LastIndex(kver, "-"), 0)]
		for _, p := range m.Repo.Packages {
			name := strings.ReplaceAll(p.Name, kver, "{kernel}")
			if abi != "" {
				name = strings.ReplaceAll(name, abi, "{abi}")
			}
			out = append(out, name)
		}
		slices.Sort(out)
		return out
	}
	if a, b := repoSet(packerRoot, pk), repoSet(mkosiRoot, mk); !slices.Equal(a, b) {
		t.Errorf("repository package sets differ:\npacker %v\nmkosi  %v", a, b)
	}
}

// nvidiaPackages keeps the NVIDIA packages of an installed set.
func nvidiaPackages(installed map[string]string) map[string]string {
	out := map[string]string{}
	for name, ver := range installed {
		if strings.Contains(name, "nvidia") || strings.HasPrefix(name, "libcuda") {
			out[name] = ver
		}
	}
	return out
}

// gpuOwnedFiles lists the files the plan writes, and the apt sources,
// pins and keyrings it adds to any of roots (the image's own archive
// entries and the local repository's keyring differ by design:
// docs/mkosi.md), as paths relative to a root.
func gpuOwnedFiles(t *testing.T, roots ...string) []string {
	t.Helper()
	same := []string{
		gpustack.HookPath,
		"etc/nvidia-container-runtime/config.toml",
		"etc/modprobe.d/podvm-blacklist-nouveau.conf",
		"etc/initramfs-tools/hooks/podvm-no-nouveau",
		"etc/nvidia/current/nvidia-load.conf",
		"etc/dkms/framework.conf.d/podvm-gpu.conf",
		"usr/libexec/podvm-gpu/has-nvidia-gpu",
		"usr/libexec/podvm-gpu/nvidia-cdi-generate",
		"etc/systemd/system/nvidia-cdi-generate.service",
		"etc/systemd/system/nvidia-cdi-generate.service.d/podvm-gpu-gate.conf",
		"etc/systemd/system/nvidia-persistenced.service.d/podvm-gpu-gate.conf",
		"etc/systemd/system/" + gpustack.ExposeUnit,
	}
	for _, root := range roots {
		for _, glob := range []string{"etc/apt/sources.list.d/podvm-nvidia-*", "etc/apt/preferences.d/podvm-*", "usr/share/keyrings/podvm-nvidia-*"} {
			ms, err := filepath.Glob(filepath.Join(root, glob))
			must(t, err)
			for _, m := range ms {
				rel, _ := filepath.Rel(root, m)
				if !slices.Contains(same, rel) {
					same = append(same, rel)
				}
			}
		}
	}
	return same
}

// nvidiaUnits lists the enabled units of root with nvidia in the name.
func nvidiaUnits(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	for u := range enabledUnits(t, root) {
		if strings.Contains(u, "nvidia") {
			out = append(out, u)
		}
	}
	slices.Sort(out)
	return out
}

// readManifest reads the manifest the layer keeps in an image's root.
func readManifest(t *testing.T, root string) bake.Manifest {
	t.Helper()
	var m bake.Manifest
	b, err := os.ReadFile(filepath.Join(root, "opt/local-packages/manifest.json"))
	must(t, err)
	must(t, json.Unmarshal(b, &m))
	return m
}

// normalManifest is the manifest in root without what each build has of
// its own: generator, creation time, the repository's and the modules'
// ephemeral keys. With twoKernels (two images of two kernel point
// releases), the kernel's version is normalised and the kernel packages'
// versions and hashes are left out.
func normalManifest(t *testing.T, root, kver string, twoKernels bool) bake.Manifest {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "opt/local-packages/manifest.json"))
	must(t, err)
	if twoKernels {
		b = bytes.ReplaceAll(b, []byte(kver), []byte("{kernel}"))
		if abi := kver[:max(strings.LastIndex(kver, "-"), 0)]; abi != "" {
			b = bytes.ReplaceAll(b, []byte(abi), []byte("{abi}"))
		}
	}
	var m bake.Manifest
	must(t, json.Unmarshal(b, &m))
	m.Generator, m.Created = "", ""
	if m.Repo != nil {
		m.Repo.Fingerprint = ""
		if twoKernels {
			for i, p := range m.Repo.Packages {
				if strings.HasPrefix(p.Name, "linux-") {
					m.Repo.Packages[i] = bake.Package{Name: p.Name, Arch: p.Arch}
				}
			}
		}
	}
	if m.GPU != nil && m.GPU.ModuleSigning != nil {
		m.GPU.ModuleSigning.CertSHA256 = ""
		for i := range m.GPU.ModuleSigning.Modules {
			m.GPU.ModuleSigning.Modules[i].SigKey = "" // each build its own key
		}
	}
	return m
}

// dpkgInstalled reads the installed packages and versions from an image's
// dpkg status, one aptrepo.ParseControl paragraph per package.
func dpkgInstalled(t *testing.T, root string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "var/lib/dpkg/status"))
	must(t, err)
	out := map[string]string{}
	for _, para := range strings.Split(string(b), "\n\n") {
		if strings.TrimSpace(para) == "" {
			continue
		}
		p, err := aptrepo.ParseControl([]byte(para))
		must(t, err)
		// Held (hold_packages) or not.
		if st := p.Value("Status"); st == "install ok installed" || st == "hold ok installed" {
			out[p.Value("Package")] = p.Value("Version")
		}
	}
	return out
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// offlineDriverContainer installs the kernel headers the way the GPU
// Operator's driver container does, with the ConfigMap's sources entry as
// the only apt source and no network.
func offlineDriverContainer(t *testing.T, env *builderEnv, arts, repo, kver string) {
	ctr := filepath.Join(t.TempDir(), "driver-container")
	r := env.build(t, builderTemplate(ctr, "", ""))
	if r.err != nil {
		r.dump(t)
		t.Fatalf("build the stand-in driver container: %v", r.err)
	}
	sources := configMapSources(t, arts)
	// The ConfigMap's entry is the only source, as in the driver container.
	must(t, os.RemoveAll(filepath.Join(ctr, "etc/apt/sources.list")))
	must(t, os.RemoveAll(filepath.Join(ctr, "etc/apt/sources.list.d")))
	must(t, os.MkdirAll(filepath.Join(ctr, "etc/apt/sources.list.d"), 0o755))
	must(t, os.WriteFile(filepath.Join(ctr, "etc/apt/sources.list.d", bake.SourcesFile), []byte(sources), 0o644))

	// The repository appears where the ConfigMap's entry says: below the
	// host's /run/nvidia, which the driver DaemonSet mounts at the same path.
	uri := ""
	for _, line := range strings.Split(sources, "\n") {
		if u, ok := strings.CutPrefix(line, "URIs: file://"); ok {
			uri = u
		}
	}
	if uri == "" {
		t.Fatalf("no file: URI in the ConfigMap's sources:\n%s", sources)
	}
	mnt := filepath.Join(ctr, uri)
	must(t, os.MkdirAll(mnt, 0o755))
	run(t, ctr, "mount", "--bind", repo, mnt)
	t.Cleanup(func() { exec.Command("umount", mnt).Run() })
	run(t, ctr, "mount", "-o", "remount,bind,ro", mnt)
	proc := filepath.Join(ctr, "proc")
	run(t, ctr, "mount", "-t", "proc", "proc", proc)
	t.Cleanup(func() { exec.Command("umount", proc).Run() })

	offline := func(script string) string {
		t.Helper()
		cmd := exec.Command("unshare", "-n", "chroot", ctr, "/bin/sh", "-c", "set -e; cd /tmp; "+script)
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C", "DEBIAN_FRONTEND=noninteractive"}
		out, err := cmd.CombinedOutput()
		t.Logf("driver container (no network): %s\n%s", script, tail(string(out), 12))
		if err != nil {
			t.Fatalf("offline: %s: %v", script, err)
		}
		return string(out)
	}
	// apt must read our repository without a single warning; the install's
	// own chatter (dpkg, initramfs) is not ours to judge.
	for _, line := range strings.Split(offline("apt-get update"), "\n") {
		if strings.HasPrefix(line, "W:") || strings.HasPrefix(line, "E:") || strings.HasPrefix(line, "N:") {
			t.Errorf("apt-get update: %s", line)
		}
	}
	offline("apt-cache show linux-headers-" + kver + " >/dev/null")
	offline("apt-get install -y --no-install-recommends linux-headers-" + kver)
	offline("apt-get download linux-image-" + kver + " && ls -l /tmp/*.deb")
	if _, err := os.Stat(filepath.Join(ctr, "usr/src/linux-headers-"+kver)); err != nil {
		t.Errorf("headers not installed: %v", err)
	}
	// Read-only really means read-only.
	if err := os.WriteFile(filepath.Join(mnt, "x"), nil, 0o644); err == nil {
		t.Error("the repository mount is writable")
	}
}

// checkModuleSigning: every NVIDIA module of the kernel carries a sha256
// (or stronger) signature from the build's certificate, which is in the
// image and among the host artefacts (DER and PEM, the same certificate,
// recorded in the manifest); DKMS left no key or certificate of its own.
func checkModuleSigning(t *testing.T, rootfs, arts, kver string) {
	der, err := os.ReadFile(filepath.Join(arts, bake.ModuleCertDERFile))
	must(t, err)
	cert, err := x509.ParseCertificate(der)
	must(t, err)
	inImage, err := os.ReadFile(filepath.Join(rootfs, "usr/share/podvm-gpu/module-signing.der"))
	must(t, err)
	if !bytes.Equal(inImage, der) {
		t.Error("the certificate in the image differs from the host artefact")
	}
	pemData, err := os.ReadFile(filepath.Join(arts, bake.ModuleCertPEMFile))
	must(t, err)
	if blk, _ := pem.Decode(pemData); blk == nil || !bytes.Equal(blk.Bytes, der) {
		t.Error("the PEM certificate is not the DER one")
	}
	var m bake.Manifest
	b, err := os.ReadFile(filepath.Join(arts, bake.ManifestFile))
	must(t, err)
	must(t, json.Unmarshal(b, &m))
	if m.GPU == nil || m.GPU.ModuleSigning == nil || m.GPU.ModuleSigning.Mode != "ephemeral" ||
		m.GPU.ModuleSigning.Signer != cert.Subject.CommonName || m.GPU.ModuleSigning.CertSHA256 != bake.CertSHA256(der) {
		t.Errorf("manifest module_signing %+v, certificate %q %s", m.GPU.ModuleSigning, cert.Subject.CommonName, bake.CertSHA256(der))
	}
	var mods []string
	// What DKMS built (updates/); the kernel's own nvidia-wmi and nvidiafb
	// keep the distribution's signature, checked below.
	filepath.WalkDir(filepath.Join(rootfs, "usr/lib/modules", kver, "updates"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), "nvidia") && strings.Contains(d.Name(), ".ko") {
			mods = append(mods, strings.TrimPrefix(p, rootfs))
		}
		return nil
	})
	if len(mods) == 0 {
		t.Fatal("no NVIDIA module found")
	}
	for _, mod := range mods {
		signer := strings.TrimSpace(run(t, rootfs, "chroot", rootfs, "modinfo", "-F", "signer", mod))
		algo := strings.TrimSpace(run(t, rootfs, "chroot", rootfs, "modinfo", "-F", "sig_hashalgo", mod))
		if signer != cert.Subject.CommonName || !slices.Contains([]string{"sha256", "sha384", "sha512"}, algo) {
			t.Errorf("%s: signer %q (%s), want %q with sha256 or stronger", mod, signer, algo, cert.Subject.CommonName)
		}
	}
	t.Logf("%d NVIDIA modules signed by %q, certificate sha256 %s", len(mods), cert.Subject.CommonName, bake.CertSHA256(der))
	// The manifest lists every one of them, with this certificate's key.
	var listed []string
	for _, ms := range m.GPU.ModuleSigning.Modules {
		listed = append(listed, ms.File)
		if ms.Kernel != kver || ms.Signer != cert.Subject.CommonName || ms.SigKey == "" || ms.HashAlgo != "sha256" {
			t.Errorf("manifest module %+v", ms)
		}
	}
	slices.Sort(listed)
	slices.Sort(mods)
	if !slices.Equal(listed, mods) {
		t.Errorf("manifest lists modules %v, the image has %v", listed, mods)
	}
	// The distribution's modules are untouched: still what dpkg installed.
	pristine, err := keyscan.DpkgPristine(rootfs)
	must(t, err)
	var own []string
	filepath.WalkDir(filepath.Join(rootfs, "usr/lib/modules", kver, "kernel"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), "nvidia") && strings.Contains(d.Name(), ".ko") {
			own = append(own, p)
		}
		return nil
	})
	for _, p := range own {
		b, err := os.ReadFile(p)
		must(t, err)
		rel := strings.TrimPrefix(p, rootfs)
		if !pristine(rel, func() string { sum := md5.Sum(b); return hex.EncodeToString(sum[:]) }) {
			t.Errorf("%s, a module of the kernel package, was changed", rel)
		}
	}
	for _, f := range []string{"var/lib/dkms/mok.key", "var/lib/dkms/mok.pub"} {
		if _, err := os.Stat(filepath.Join(rootfs, f)); err == nil {
			t.Errorf("DKMS left /%s in the image", f)
		}
	}
}

// scanNoPrivateKey runs the project's one private-key scan (keyscan: PEM of
// every kind, OpenSSH, OpenPGP armored and binary, DER) over every file
// below dir, passing over only files a package shipped and nobody changed.
func scanNoPrivateKey(t *testing.T, dir string) {
	t.Helper()
	pristine, err := keyscan.DpkgPristine(dir)
	must(t, err)
	found, files, err := keyscan.Tree(dir, []string{"proc", "sys", "dev"}, pristine)
	must(t, err)
	for _, f := range found {
		t.Errorf("private key material in %s%s", dir, f)
	}
	t.Logf("scanned %d files under %s: no private key material", files, dir)
}

func assertOwnerMode(t *testing.T, p string, want fs.FileMode) {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Error(err)
		return
	}
	if fi.Mode().Perm() != want {
		t.Errorf("%s: mode %04o, want %04o", p, fi.Mode().Perm(), want)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && (st.Uid != 0 || st.Gid != 0) {
		t.Errorf("%s: owner %d:%d, want root:root", p, st.Uid, st.Gid)
	}
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	must(t, err)
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	return names
}

func utsString(a [65]int8) string {
	var b []byte
	for _, c := range a {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return string(b)
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// treeListing lists every path below dir with its type, mode and, for a
// file, its content's SHA-256 (for a link, its target), sorted.
func treeListing(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		line := rel + " " + fi.Mode().String()
		switch {
		case fi.Mode().IsRegular():
			line += " " + fileSHA256(t, p)
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			line += " -> " + target
		}
		out = append(out, line)
		return nil
	})
	must(t, err)
	slices.Sort(out)
	return out
}
