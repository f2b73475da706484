package mkosi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/podvm-gpu/packer-plugin-podvm/gpustack"
	"github.com/podvm-gpu/packer-plugin-podvm/modcache"
	"github.com/podvm-gpu/packer-plugin-podvm/settings"
)

// mkosiVersion is a mkosi release the tests run, as
// scripts/install-mkosi.sh fetches it from a Debian suite into
// $PODVM_CACHE/mkosi/<version>. GNUmakefile's mkosi-tool installs the same.
type mkosiVersion struct{ version, suite string }

var (
	// mkosiBuild is the mkosi the tests build images with: trixie's.
	mkosiBuild = mkosiVersion{"25.3-7", "trixie"}
	// mkosiVersions parse every generated tree: trixie's and forky's, the
	// oldest mkosi the trees support and the newest Debian has (CAA pins
	// v26, between them).
	mkosiVersions = []mkosiVersion{mkosiBuild, {"27.1-1", "forky"}}
)

// mkosiCommands holds, per version, a func() ([]string, error) that installs
// it once and returns the command that runs it.
var mkosiCommands sync.Map

// command installs v (once per test binary) and returns its command line:
// "PYTHONPATH=... python3 -m mkosi".
func (v mkosiVersion) command() ([]string, error) {
	f, _ := mkosiCommands.LoadOrStore(v.version, sync.OnceValues(func() ([]string, error) {
		root, err := filepath.Abs("..")
		if err != nil {
			return nil, err
		}
		cmd := exec.Command(filepath.Join(root, "scripts", "install-mkosi.sh"), "--print-env")
		cmd.Env = append(os.Environ(), "MKOSI_VERSION="+v.version, "MKOSI_SUITE="+v.suite)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, &exec.ExitError{ProcessState: cmd.ProcessState, Stderr: stderr.Bytes()}
		}
		return strings.Fields(strings.TrimSpace(string(out))), nil
	}))
	return f.(func() ([]string, error))()
}

// needMkosi returns the command of the mkosi that builds (mkosiBuild).
func needMkosi(t *testing.T) []string {
	t.Helper()
	return needMkosiOf(t, mkosiBuild)
}

// needMkosiOf returns the command that runs mkosi v. Without network
// or apt the tests that need it skip, unless PODVM_REQUIRE_MKOSI=1 makes
// that a failure.
func needMkosiOf(t *testing.T, v mkosiVersion) []string {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("mkosi runs on Linux only")
	}
	argv, err := v.command()
	if err != nil {
		msg := fmt.Sprintf("mkosi %s unavailable: MKOSI_VERSION=%s MKOSI_SUITE=%s scripts/install-mkosi.sh failed: %v", v.version, v.version, v.suite, err)
		if ee, ok := err.(*exec.ExitError); ok {
			msg += "\n" + string(ee.Stderr)
		}
		if os.Getenv("PODVM_REQUIRE_MKOSI") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return argv
}

// runMkosi runs mkosi in dir and returns stdout and stderr; a failure
// fails the test.
func runMkosi(t *testing.T, argv []string, dir string, args ...string) ([]byte, string) {
	t.Helper()
	stdout, stderr, err := tryMkosi(argv, dir, args...)
	if err != nil {
		t.Fatalf("mkosi %s in %s: %v\n%s", strings.Join(args, " "), dir, err, stderr)
	}
	return stdout, stderr
}

// tryMkosi runs mkosi in dir and returns stdout, stderr and its error.
func tryMkosi(argv []string, dir string, args ...string) ([]byte, string, error) {
	env, prog := argv[0], argv[1:]
	cmd := exec.Command(prog[0], append(prog[1:], args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.Bytes(), stderr.String(), err
}

// summary is the part of `mkosi --json summary` the tests read.
type summary struct {
	Images []summaryImage
}

// summaryImage is one image of the summary.
type summaryImage struct {
	Image                   string // a subimage's name; 26 and later name the main image "main", 25.3 leaves it empty
	Distribution            string
	Release                 string
	Architecture            string
	Profiles                []string
	Packages                []string
	MinimumVersion          string
	SandboxTrees            []struct{ Source string }
	ExtraTrees              []struct{ Source string }
	SkeletonTrees           []struct{ Source string }
	PostInstallationScripts []string
	FinalizeScripts         []string
	Format                  string
	Bootable                string
	Bootloader              string
	KernelCommandLine       []string
}

// mkosiRunner is one mkosi the tests parse trees with.
type mkosiRunner struct {
	name string   // its version, or source-<dir> for a source checkout
	argv []string // "PYTHONPATH=... python3 -m mkosi"
}

// parsingMkosis are the mkosis that parse every tree: mkosiVersions, and
// mkosi source checkouts named by PODVM_MKOSI_SOURCES=DIR[:DIR...] (v26,
// which CAA pins, is in no Debian suite).
func parsingMkosis(t *testing.T) []mkosiRunner {
	t.Helper()
	var rs []mkosiRunner
	for _, v := range mkosiVersions {
		rs = append(rs, mkosiRunner{v.version, needMkosiOf(t, v)})
	}
	if dirs := os.Getenv("PODVM_MKOSI_SOURCES"); dirs != "" {
		for _, d := range filepath.SplitList(dirs) {
			rs = append(rs, mkosiRunner{"source-" + filepath.Base(d), []string{"PYTHONPATH=" + d, "python3", "-m", "mkosi"}})
		}
	}
	return rs
}

// summaryCases are the trees every mkosi version parses: each supported
// release with the GPU stack off, and on with every driver source the
// release accepts ("" is the default, auto).
func summaryCases() []treeCase {
	var cs []treeCase
	for _, r := range []struct{ distro, release string }{
		{"debian", "12"}, {"debian", "13"}, {"ubuntu", "22.04"}, {"ubuntu", "24.04"}, {"ubuntu", "26.04"},
	} {
		cs = append(cs, treeCase{distro: r.distro, release: r.release, gpu: "no"})
		for _, src := range []string{"", "distro", "cuda-repo", "precompiled"} {
			if (r.distro == "debian" && src == "precompiled") || (r.release == "26.04" && src == "cuda-repo") {
				continue // refused by the plan (gpustack's TestPlanGolden checks that)
			}
			cs = append(cs, treeCase{distro: r.distro, release: r.release, gpu: "yes", source: src})
		}
	}
	return cs
}

// TestMkosiSummary has each mkosi version of mkosiVersions parse every
// generated tree, with the GPU profile selected by default and, for the
// default driver source, with it turned off: the key values must come
// through, the profile's scripts must be picked up and mkosi must not warn
// (an unknown or misplaced setting is a warning or an error).
func TestMkosiSummary(t *testing.T) {
	mkosis := parsingMkosis(t)
	for _, c := range summaryCases() {
		dir := t.TempDir()
		// mkosi checks that ExtraSearchPaths= exist.
		bin := filepath.Join(t.TempDir(), "packer-plugin-podvm")
		// And that BuildSources= do: the module cache's among them.
		cache := t.TempDir()
		if err := os.MkdirAll(modcache.Dir(cache), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := Write(dir, c.render(t, bin, cache), false); err != nil {
			t.Fatal(err)
		}
		profiles := []string{"default"}
		if c.gpu == "yes" && c.source == "" {
			profiles = append(profiles, "off")
		}
		for _, m := range mkosis {
			for _, prof := range profiles {
				t.Run(c.name()+"/mkosi-"+m.name+"/profile-"+prof, func(t *testing.T) {
					t.Parallel() // each run is a Python start-up, mostly
					args := []string{"--json", "summary"}
					if prof == "off" {
						args = []string{"--profile=", "--json", "summary"}
					}
					out, stderr := runMkosi(t, m.argv, dir, args...)
					if strings.TrimSpace(stderr) != "" {
						t.Errorf("mkosi printed on stderr (warnings count as failures):\n%s", stderr)
					}
					checkSummary(t, out, dir, c, c.gpu == "yes" && prof == "default")
				})
			}
		}
	}
}

// mainImage returns the image the tree describes. mkosi 27 lists its own
// default initrd image ("default-initrd") before it; nothing else may.
func mainImage(t *testing.T, out []byte) summaryImage {
	t.Helper()
	var s summary
	if err := json.Unmarshal(out, &s); err != nil || len(s.Images) == 0 {
		t.Fatalf("summary: %v (%d images)\n%s", err, len(s.Images), out)
	}
	for _, img := range s.Images[:len(s.Images)-1] {
		if img.Image != "default-initrd" {
			t.Errorf("summary lists image %q besides the tree's; want only mkosi's default-initrd", img.Image)
		}
	}
	return s.Images[len(s.Images)-1]
}

// checkSummary checks one `mkosi --json summary` of case c's tree in dir.
func checkSummary(t *testing.T, out []byte, dir string, c treeCase, gpuOn bool) {
	t.Helper()
	img := mainImage(t, out)
	tg, err := gpustack.LookupRelease(c.distro, c.release, "amd64")
	if err != nil {
		t.Fatal(err)
	}
	if img.Distribution != c.distro || img.Release != tg.Codename || img.Architecture != "x86-64" {
		t.Errorf("distribution %s release %s arch %s, want %s %s x86-64", img.Distribution, img.Release, img.Architecture, c.distro, tg.Codename)
	}
	if img.MinimumVersion != MinimumVersion {
		t.Errorf("MinimumVersion %q, want %q", img.MinimumVersion, MinimumVersion)
	}
	if got := slices.Contains(img.Profiles, Profile); got != gpuOn {
		t.Errorf("profiles %v: %s selected = %v, want %v", img.Profiles, Profile, got, gpuOn)
	}
	p := plan(t, c.distro, c.release, c.settings())
	// A bootable disk with the builder's command line, GPU or not.
	if img.Format != "disk" || img.Bootable != "enabled" || img.Bootloader != "systemd-boot" ||
		!strings.Contains(strings.Join(img.KernelCommandLine, " "), p.KernelCmdline) {
		t.Errorf("format %q bootable %q bootloader %q cmdline %q: want a bootable disk with %q",
			img.Format, img.Bootable, img.Bootloader, img.KernelCommandLine, p.KernelCmdline)
	}
	want := append(slices.Clone(p.KernelPackages), p.BootPackages...)
	if gpuOn {
		want = append(want, "nvidia-container-toolkit="+settings.DefaultToolkitVersion)
	}
	for _, w := range want {
		if !slices.Contains(img.Packages, w) {
			t.Errorf("Packages %v lack %s", img.Packages, w)
		}
	}
	if !gpuOn {
		if slices.ContainsFunc(img.Packages, func(p string) bool { return strings.Contains(p, "nvidia") }) {
			t.Errorf("GPU off, yet Packages = %v", img.Packages)
		}
		return
	}
	// The profile's scripts, by path; the top level's extra tree (firstboot
	// masked) and the profile's; the profile's skeleton where DKMS may
	// build (its configuration, before packages).
	profile := filepath.Join(dir, "mkosi.profiles", Profile)
	skeletons := 0
	if slices.ContainsFunc(p.Steps, func(s gpustack.Step) bool { return s.ID == "dkms-config" }) {
		skeletons = 1
	}
	if !slices.Equal(img.PostInstallationScripts, []string{filepath.Join(profile, "mkosi.postinst.d", "50-podvm.sh")}) ||
		!slices.Equal(img.FinalizeScripts, []string{filepath.Join(profile, "mkosi.finalize.d", "50-podvm-check.sh")}) ||
		len(img.SandboxTrees) != 2 || len(img.ExtraTrees) != 2 || len(img.SkeletonTrees) != skeletons {
		t.Errorf("scripts/trees not picked up: postinst %v finalize %v sandbox %v extra %v skeleton %v",
			img.PostInstallationScripts, img.FinalizeScripts, img.SandboxTrees, img.ExtraTrees, img.SkeletonTrees)
	}
	checkDriverPackage(t, img, profile, p)
}

// checkDriverPackage: the driver the plan records comes in through
// Packages= or the steps of the profile's post-installation script; auto's choice is
// made at build time, so its driver is never in Packages=.
func checkDriverPackage(t *testing.T, img summaryImage, profile string, p *gpustack.Plan) {
	t.Helper()
	// The plan file is what run-steps, which the script calls, runs.
	steps, err := os.ReadFile(filepath.Join(profile, planFileName))
	if err != nil {
		t.Fatal(err)
	}
	pkg := p.Driver.Package
	if !slices.Contains(img.Packages, pkg) && !strings.Contains(string(steps), `"`+pkg+`"`) {
		t.Errorf("driver package %s neither in Packages %v nor in the steps run-steps runs", pkg, img.Packages)
	}
	if p.Driver.Source == settings.SourceAuto && slices.ContainsFunc(img.Packages, func(q string) bool { return strings.HasPrefix(q, "nvidia-headless") }) {
		t.Errorf("Packages %v: the driver is chosen at build time, not in Packages=", img.Packages)
	}
}
