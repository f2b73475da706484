package mkosi

import (
	"bytes"
	"encoding/json"
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
)

// mkosiCommand returns the command that runs mkosi 25 as
// scripts/install-mkosi.sh installs it (from Debian trixie, into
// $PODVM_CACHE/mkosi or .cache/mkosi). Without network or apt the tests
// that need it skip, unless PODVM_REQUIRE_MKOSI=1 makes that a failure.
var mkosiCommand = sync.OnceValues(func() ([]string, error) {
	root, err := filepath.Abs("..")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(filepath.Join(root, "scripts", "install-mkosi.sh"), "--print-env")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, &exec.ExitError{ProcessState: cmd.ProcessState, Stderr: stderr.Bytes()}
	}
	// "PYTHONPATH=... python3 -m mkosi"
	return strings.Fields(strings.TrimSpace(string(out))), nil
})

func needMkosi(t *testing.T) []string {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("mkosi runs on Linux only")
	}
	argv, err := mkosiCommand()
	if err != nil {
		msg := "mkosi unavailable: scripts/install-mkosi.sh failed: " + err.Error()
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

// runMkosi runs mkosi in dir and returns stdout and stderr.
func runMkosi(t *testing.T, argv []string, dir string, args ...string) ([]byte, string) {
	t.Helper()
	env, prog := argv[0], argv[1:]
	cmd := exec.Command(prog[0], append(prog[1:], args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("mkosi %s in %s: %v\n%s", strings.Join(args, " "), dir, err, stderr.String())
	}
	return stdout.Bytes(), stderr.String()
}

// summary is the part of `mkosi --json summary` the tests read.
type summary struct {
	Images []struct {
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
}

// TestMkosiSummary has real mkosi parse every generated tree, with the
// GPU profile selected by default and with it turned off: the key values
// must come through and mkosi must not warn (an unknown or misplaced
// setting is a warning or an error in mkosi 25).
func TestMkosiSummary(t *testing.T) {
	argv := needMkosi(t)
	for _, c := range treeCases {
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
		if c.gpu == "yes" {
			profiles = append(profiles, "off")
		}
		for _, prof := range profiles {
			t.Run(c.name()+"-profile-"+prof, func(t *testing.T) {
				args := []string{"--json", "summary"}
				if prof == "off" {
					args = []string{"--profile=", "--json", "summary"}
				}
				out, stderr := runMkosi(t, argv, dir, args...)
				if strings.TrimSpace(stderr) != "" {
					t.Errorf("mkosi printed on stderr (warnings count as failures):\n%s", stderr)
				}
				var s summary
				if err := json.Unmarshal(out, &s); err != nil || len(s.Images) != 1 {
					t.Fatalf("summary: %v (%d images)\n%s", err, len(s.Images), out)
				}
				img := s.Images[0]
				codename := map[string]string{"13": "trixie", "24.04": "noble"}[c.release]
				if img.Distribution != c.distro || img.Release != codename || img.Architecture != "x86-64" {
					t.Errorf("distribution %s release %s arch %s, want %s %s x86-64", img.Distribution, img.Release, img.Architecture, c.distro, codename)
				}
				if img.MinimumVersion != MinimumVersion {
					t.Errorf("MinimumVersion %q, want %q", img.MinimumVersion, MinimumVersion)
				}
				gpuOn := c.gpu == "yes" && prof == "default"
				if got := slices.Contains(img.Profiles, Profile); got != gpuOn {
					t.Errorf("profiles %v: %s selected = %v, want %v", img.Profiles, Profile, got, gpuOn)
				}
				p := plan(t, c.distro, c.release, map[string]string{"enable_nvidia_gpu": c.gpu})
				// A bootable disk with the builder's command line, GPU or not.
				if img.Format != "disk" || img.Bootable != "enabled" || img.Bootloader != "systemd-boot" ||
					!strings.Contains(strings.Join(img.KernelCommandLine, " "), p.KernelCmdline) {
					t.Errorf("format %q bootable %q bootloader %q cmdline %q: want a bootable disk with %q",
						img.Format, img.Bootable, img.Bootloader, img.KernelCommandLine, p.KernelCmdline)
				}
				want := append(slices.Clone(p.KernelPackages), p.BootPackages...)
				if gpuOn {
					want = append(want, "nvidia-container-toolkit="+gpustack.DefaultToolkitVersion)
					// Debian 13's open modules do not build against its
					// kernels; Ubuntu's driver source is chosen at build
					// time, so the post-installation script installs it.
					if c.distro == "debian" {
						want = append(want, "nvidia-kernel-dkms")
					}
					if c.distro == "ubuntu" && slices.ContainsFunc(img.Packages, func(p string) bool { return strings.HasPrefix(p, "nvidia-headless") }) {
						t.Errorf("Packages %v: the driver is chosen at build time, not in Packages=", img.Packages)
					}
				}
				for _, w := range want {
					if !slices.Contains(img.Packages, w) {
						t.Errorf("Packages %v lack %s", img.Packages, w)
					}
				}
				if !gpuOn && slices.ContainsFunc(img.Packages, func(p string) bool { return strings.Contains(p, "nvidia") }) {
					t.Errorf("GPU off, yet Packages = %v", img.Packages)
				}
				// The top level's extra tree (firstboot masked) and the
				// profile's; the profile's skeleton (DKMS's configuration,
				// before packages).
				if gpuOn && (len(img.PostInstallationScripts) != 1 || len(img.FinalizeScripts) != 1 || len(img.SandboxTrees) != 2 ||
					len(img.ExtraTrees) != 2 || len(img.SkeletonTrees) != 1) {
					t.Errorf("scripts/trees not picked up: postinst %v finalize %v sandbox %v extra %v skeleton %v",
						img.PostInstallationScripts, img.FinalizeScripts, img.SandboxTrees, img.ExtraTrees, img.SkeletonTrees)
				}
			})
		}
	}
}
