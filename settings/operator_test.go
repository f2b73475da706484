package settings

import (
	"strings"
	"testing"
)

// TestOperatorSettingsRefused checks that values the operator or
// Kubernetes would refuse are refused before the build.
func TestOperatorSettingsRefused(t *testing.T) {
	tests := []struct {
		env, value string
	}{
		{"GPU_OPERATOR_NAMESPACE", "GPU-Operator"},
		{"GPU_OPERATOR_NAMESPACE", "-gpu"},
		{"GPU_OPERATOR_NAMESPACE", strings.Repeat("a", 64)},
		{"GPU_OPERATOR_DRIVER_REPOSITORY", "https://registry.example/nvidia"},
		{"GPU_OPERATOR_DRIVER_REPOSITORY", "Mirror.example/nvidia"},
		{"GPU_OPERATOR_DRIVER_IMAGE", "driver:580"},
		// The driver containers carry whole versions: a branch names no tag.
		{"GPU_OPERATOR_DRIVER_VERSION", "580"},
		{"GPU_OPERATOR_DRIVER_VERSION", "595.91.07-ubuntu24.04"},
	}
	for _, tt := range tests {
		_, err := resolveWith(t, map[string]string{tt.env: tt.value}, "", nil)
		if err == nil || !strings.Contains(err.Error(), tt.env) {
			t.Errorf("%s=%s: error %v, want one naming %s", tt.env, tt.value, err, tt.env)
		}
	}
	for _, tt := range []struct{ env, value string }{
		{"GPU_OPERATOR_NAMESPACE", "nvidia-gpu-operator"},
		{"GPU_OPERATOR_DRIVER_REPOSITORY", "mirror.example:5000/nvidia/drivers"},
		{"GPU_OPERATOR_DRIVER_VERSION", "595.91.07"},
	} {
		if _, err := resolveWith(t, map[string]string{tt.env: tt.value}, "", nil); err != nil {
			t.Errorf("%s=%s: %v", tt.env, tt.value, err)
		}
	}
}

// TestSectionsContiguous checks that each section of the table is one run
// of rows, so the docs show each heading once.
func TestSectionsContiguous(t *testing.T) {
	seen := map[string]bool{}
	prev := ""
	for _, s := range Table {
		if s.Section == prev {
			continue
		}
		if seen[s.Section] {
			t.Errorf("%s: section %q again after %q", s.Key, s.Section, prev)
		}
		if sectionTitles[s.Section] == "" {
			t.Errorf("%s: section %q has no title", s.Key, s.Section)
		}
		seen[s.Section], prev = true, s.Section
	}
}
