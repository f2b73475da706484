package gpustack

import (
	"strings"
	"testing"

	"github.com/podvm-gpu/packer-plugin-podvm/settings"
)

// TestOperatorWarnings checks what the node profile's build says about
// the GPU Operator objects and the target: a missing version, and a
// distribution NVIDIA publishes no driver container for.
func TestOperatorWarnings(t *testing.T) {
	node := map[string]string{"ENABLE_NVIDIA_GPU": "no", "LOCAL_REPO": "yes"}
	with := func(m map[string]string, k, v string) map[string]string {
		out := map[string]string{k: v}
		for k, v := range m {
			out[k] = v
		}
		return out
	}
	tests := []struct {
		name   string
		env    map[string]string
		distro string
		want   []string // each in the warnings; none: no warning
	}{
		{"debian node, no version", node, "debian", []string{"gpu_operator_driver_repository and gpu_operator_driver_version not set", "NVIDIA publishes no GPU Operator driver container for debian", "Ubuntu and RHEL"}},
		{"debian node", with(with(node, "GPU_OPERATOR_DRIVER_VERSION", "595.91.07"), "GPU_OPERATOR_DRIVER_REPOSITORY", "registry.example/nvidia"), "debian", []string{"debian 13", "registry.example/nvidia/driver:<version>-debian13"}},
		{"debian node, no repository", with(node, "GPU_OPERATOR_DRIVER_VERSION", "595.91.07"), "debian", []string{"gpu_operator_driver_repository not set", "<driver.repository>/driver:<version>-debian13"}},
		{"ubuntu node", with(with(node, "GPU_OPERATOR_DRIVER_VERSION", "595.91.07"), "GPU_OPERATOR_DRIVER_REPOSITORY", "registry.example/nvidia"), "ubuntu", nil},
		{"ubuntu node, no version", node, "ubuntu", []string{"no gpu-operator-nvidiadriver.yaml is written"}},
		{"debian pod VM", map[string]string{}, "debian", nil},
		{"operator settings without a repository", map[string]string{"ENABLE_NVIDIA_GPU": "no", "LOCAL_REPO": "no", "GPU_OPERATOR_NAMESPACE": "x"}, "debian",
			[]string{"GPU_OPERATOR_NAMESPACE is ignored: local_repo is off"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := settings.Resolve(settings.Input{LookupEnv: func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok }})
			if err != nil {
				t.Fatal(err)
			}
			tgt := Target{Distro: tt.distro, Version: "13", Codename: "trixie", Arch: "amd64"}
			if tt.distro == "ubuntu" {
				tgt = Target{Distro: "ubuntu", Version: "24.04", Codename: "noble", Arch: "amd64"}
			}
			got := strings.Join(append(res.Warnings, TargetWarnings(res.Options, tgt)...), "\n")
			if len(tt.want) == 0 && got != "" {
				t.Errorf("warnings %q, want none", got)
			}
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("warnings %q lack %q", got, w)
				}
			}
		})
	}
}
