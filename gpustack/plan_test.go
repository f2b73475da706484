package gpustack

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podvm-gpu/packer-plugin-podvm/settings"
)

var update = flag.Bool("update", false, "rewrite golden files")

var goldenTargets = []Target{
	{Distro: "debian", Version: "12", Codename: "bookworm", Arch: "amd64", Kernels: []string{"6.1.0-37-amd64", "6.1.0-41-amd64"}},
	{Distro: "debian", Version: "13", Codename: "trixie", Arch: "amd64", Kernels: []string{"6.12.57+deb13-amd64"}},
	{Distro: "ubuntu", Version: "22.04", Codename: "jammy", Arch: "amd64", Kernels: []string{"5.15.0-1089-aws", "6.8.0-1021-aws"}},
	{Distro: "ubuntu", Version: "24.04", Codename: "noble", Arch: "amd64", Kernels: []string{"6.8.0-1028-azure"}},
	// The kernel NVIDIA's 26.04 precompiled driver container targets.
	{Distro: "ubuntu", Version: "26.04", Codename: "resolute", Arch: "amd64", Kernels: []string{"7.0.0-12-generic"}},
}

func TestPlanKernelsAtBuildTime(t *testing.T) {
	for _, tg := range []Target{
		{Distro: "debian", Version: "13", Codename: "trixie", Arch: "amd64", KernelsAtBuildTime: true},
		{Distro: "ubuntu", Version: "24.04", Codename: "noble", Arch: "amd64", KernelsAtBuildTime: true},
		{Distro: "ubuntu", Version: "26.04", Codename: "resolute", Arch: "amd64", KernelsAtBuildTime: true},
	} {
		for _, gpu := range []string{"yes", "no"} {
			name := fmt.Sprintf("%s-%s-gpu-%s-deferred", tg.Distro, tg.Version, gpu)
			t.Run(name, func(t *testing.T) {
				p, err := NewPlan(resolve(t, map[string]string{"ENABLE_NVIDIA_GPU": gpu}), tg)
				if err != nil {
					t.Fatal(err)
				}
				golden(t, filepath.Join("testdata", "plan", name+".txt"), p.Text())
			})
		}
	}
}

func resolve(t *testing.T, env map[string]string) settings.Options {
	t.Helper()
	r, err := settings.Resolve(settings.Input{LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if err != nil {
		t.Fatalf("resolve %v: %v", env, err)
	}
	return r.Options
}

// TestPlanGolden renders the plan for every supported release, GPU on and
// off, both module flavours and every driver source the release accepts.
func TestPlanGolden(t *testing.T) {
	for _, tg := range goldenTargets {
		for _, gpu := range []string{"yes", "no"} {
			for _, flavour := range []string{"open", "proprietary"} {
				for _, src := range []string{"auto", "distro", "cuda-repo", "precompiled"} {
					if gpu == "no" && (flavour != "open" || src != "distro") {
						continue // the GPU options do not matter when the stack is off
					}
					name := fmt.Sprintf("%s-%s-gpu-%s", tg.Distro, tg.Version, gpu)
					if gpu == "yes" {
						name += "-" + flavour + "-" + src
					}
					t.Run(name, func(t *testing.T) {
						o := resolve(t, map[string]string{
							"ENABLE_NVIDIA_GPU": gpu, "NVIDIA_KERNEL_MODULES": flavour,
							"NVIDIA_DRIVER_SOURCE": src, "SOURCE_DATE_EPOCH": "1700000000",
						})
						p, err := NewPlan(o, tg)
						if src == "precompiled" && tg.Distro == "debian" {
							if err == nil || !strings.Contains(err.Error(), "nvidia_driver_source=precompiled") {
								t.Fatalf("want precompiled refused on Debian, got %v", err)
							}
							return
						}
						if src == "cuda-repo" && tg.Codename == "resolute" {
							if err == nil || !strings.Contains(err.Error(), "nvidia_driver_source=cuda-repo: not supported on ubuntu 26.04") {
								t.Fatalf("want cuda-repo refused on Ubuntu 26.04, got %v", err)
							}
							return
						}
						if err != nil {
							t.Fatal(err)
						}
						golden(t, filepath.Join("testdata", "plan", name+".txt"), p.Text())
					})
				}
			}
		}
	}
}

// TestPlanModuleKey: with the user's key, the plan signs with it, piped
// in, and verifies against the certificate's issuer.
func TestPlanModuleKey(t *testing.T) {
	o := resolve(t, map[string]string{
		"NVIDIA_MODULE_SIGNING": "key", "NVIDIA_MODULE_SIGNING_KEY": "/keys/m.key", "NVIDIA_MODULE_SIGNING_CERT": "/keys/m.pem",
		"NVIDIA_MODULE_SIGNING_PASSPHRASE_ENV": "MODPASS", "SOURCE_DATE_EPOCH": "1700000000",
	})
	p, err := NewPlan(o, goldenTargets[1])
	if err != nil {
		t.Fatal(err)
	}
	golden(t, filepath.Join("testdata", "plan", "module-signing-key.txt"), p.Text())
	if p.ModuleSigning.Mode != "key" || p.ModuleSigning.Signer != "" || p.ModuleSigning.CertDER == "" {
		t.Errorf("module signing %+v", p.ModuleSigning)
	}
	var sign, verify *SignModules
	for _, s := range p.Steps {
		for _, a := range s.Actions {
			if sm, ok := a.(SignModules); ok && sm.Verify {
				verify = &sm
			} else if ok {
				sign = &sm
			}
		}
	}
	if sign == nil || sign.Key == nil || sign.Key.File != "/keys/m.key" || sign.Key.PassphraseEnv != "MODPASS" || !strings.Contains(sign.Command(), "'sign-key'") {
		t.Errorf("sign: %+v", sign)
	}
	if verify == nil || verify.Subject != "" || !strings.Contains(verify.Command(), "'verify' ''") {
		t.Errorf("verify: %+v", verify)
	}
}

func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs from the plan; run go test ./gpustack -update and review the diff\n--- got:\n%s", path, got)
	}
}

// TestDriverContainerPackages: the Ubuntu driver container (gpu-driver-
// container, ubuntu22.04 and ubuntu24.04) installs linux-headers-$KVER and
// runs apt-get download of linux-image-$KVER and linux-modules-$KVER under
// set -eu; every one of them must be in the default repository of the
// Ubuntu plan, for every kernel it targets. Debian has no driver container;
// its repository serves the same sequence with headers and image.
func TestDriverContainerPackages(t *testing.T) {
	sequence := map[string][]string{
		"ubuntu": {"linux-headers-%s", "linux-image-%s", "linux-modules-%s"},
		"debian": {"linux-headers-%s", "linux-image-%s"},
	}
	for _, tg := range goldenTargets {
		p, err := NewPlan(resolve(t, map[string]string{"ENABLE_NVIDIA_GPU": "no", "LOCAL_REPO": "yes", "PODVM_KERNELS": "all"}), tg)
		if err != nil {
			t.Fatal(err)
		}
		var repo []string
		for _, s := range p.Steps {
			for _, a := range s.Actions {
				if b, ok := a.(BakeRepo); ok {
					repo = b.Packages
				}
			}
		}
		var lines []string
		for _, k := range tg.Kernels {
			for _, f := range sequence[tg.Distro] {
				pkg := fmt.Sprintf(f, k)
				found := false
				for _, r := range repo {
					found = found || r == pkg
				}
				if !found {
					t.Errorf("%s %s: the driver container needs %s; the repository has %v", tg.Distro, tg.Version, pkg, repo)
				}
				lines = append(lines, pkg)
			}
		}
		golden(t, filepath.Join("testdata", "driver-container", tg.Distro+"-"+tg.Version+".txt"), strings.Join(lines, "\n")+"\n")
	}
}
