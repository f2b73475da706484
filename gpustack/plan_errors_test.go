package gpustack

import (
	"strings"
	"testing"

	"github.com/podvm-gpu/packer-plugin-podvm/distro"
)

func TestPlanErrors(t *testing.T) {
	trixie := Target{Distro: "debian", Version: "13", Codename: "trixie", Arch: "amd64", Kernels: []string{"6.12.57+deb13-amd64"}}
	noble := Target{Distro: "ubuntu", Version: "24.04", Codename: "noble", Arch: "amd64", Kernels: []string{"6.8.0-1028-azure"}}
	tests := []struct {
		name   string
		env    map[string]string
		target Target
		want   string
	}{
		{"precompiled on debian", map[string]string{"NVIDIA_DRIVER_SOURCE": "precompiled"}, trixie, "Debian has no precompiled NVIDIA modules"},
		{"open on old branch", map[string]string{"NVIDIA_DRIVER_VERSION": "470", "NVIDIA_KERNEL_MODULES": "open"}, noble, "branch 470 on ubuntu 24.04 has no open kernel modules"},
		{"cc on old branch", map[string]string{"NVIDIA_DRIVER_VERSION": "470", "NVIDIA_CONFIDENTIAL_COMPUTE": "yes"}, noble, "confidential_compute=yes: needs open kernel modules"},
		{"debian other branch", map[string]string{"NVIDIA_DRIVER_VERSION": "570"}, trixie, "ships driver branch 550 only"},
		{"fabric manager from debian archive", map[string]string{"NVIDIA_FABRIC_MANAGER": "yes"}, trixie, "Debian's archive has no fabric manager"},
		{"kernel not in image", map[string]string{"PODVM_KERNELS": "6.1.0-9-amd64"}, trixie, `kernels: "6.1.0-9-amd64" is not installed in the image; installed: 6.12.57+deb13-amd64`},
		{"no kernel", nil, Target{Distro: "debian", Version: "13", Arch: "amd64"}, "no kernel in the image"},
		{"unsupported release", nil, Target{Distro: "ubuntu", Version: "20.04", Arch: "amd64", Kernels: []string{"5.4.0-1-generic"}}, "unsupported target ubuntu 20.04"},
		{"unsupported arch", nil, Target{Distro: "debian", Version: "13", Arch: "riscv64", Kernels: []string{"6.12.1"}}, `unsupported architecture "riscv64"`},
		{"ancient branch", map[string]string{"NVIDIA_DRIVER_VERSION": "390", "NVIDIA_DRIVER_SOURCE": "cuda-repo"}, noble, "branch 390 is too old"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := resolve(t, tt.env)
			_, err := NewPlan(o, tt.target)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestPlanEverythingOff(t *testing.T) {
	o := resolve(t, map[string]string{"ENABLE_NVIDIA_GPU": "no"})
	p, err := NewPlan(o, Target{Distro: "debian", Version: "13", Arch: "amd64"}) // no kernel needed
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Steps) != 0 || len(p.Notes) != 1 || !strings.Contains(p.Notes[0], "nothing to do") {
		t.Errorf("plan: %s", p.Text())
	}
}

func TestSelectKernels(t *testing.T) {
	have := []string{"6.12.9-amd64", "6.12.10-amd64", "6.1.0-37-amd64"}
	for spec, want := range map[string]string{
		"newest":                      "6.12.10-amd64",
		"all":                         "6.1.0-37-amd64 6.12.9-amd64 6.12.10-amd64",
		"6.12.9-amd64,6.1.0-37-amd64": "6.1.0-37-amd64 6.12.9-amd64",
	} {
		got, err := SelectKernels(spec, have)
		if err != nil || strings.Join(got, " ") != want {
			t.Errorf("%s: got %v %v, want %s", spec, got, err, want)
		}
	}
}

func TestParseOSRelease(t *testing.T) {
	tg, err := ParseOSRelease("PRETTY_NAME=\"Debian GNU/Linux 13 (trixie)\"\nID=debian\nVERSION_ID=\"13\"\nVERSION_CODENAME=trixie\n")
	if err != nil || tg.Distro != "debian" || tg.Version != "13" || tg.Codename != "trixie" {
		t.Errorf("got %+v %v", tg, err)
	}
	if _, err := ParseOSRelease("NAME=x\n"); err == nil {
		t.Error("want an error without ID")
	}
}

// TestReleasesKnown: every release the plan has GPU facts for is one of
// package distro's, and every one of those has GPU facts.
func TestReleasesKnown(t *testing.T) {
	for key, r := range releases {
		if r.ID == "" || key != r.ID+"-"+r.Version {
			t.Errorf("releases[%q] is not a release of package distro: %+v", key, r.Release)
		}
	}
	for _, r := range distro.Releases {
		if _, ok := releases[r.ID+"-"+r.Version]; !ok {
			t.Errorf("%s: no GPU facts", r.Name())
		}
	}
}
