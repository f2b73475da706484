package main

import (
	"strings"
	"testing"
)

// TestPlanWarnsNodeDistro checks that plan warns about a node image for a
// distribution NVIDIA publishes no GPU Operator driver container for, and
// only then.
func TestPlanWarnsNodeDistro(t *testing.T) {
	node := []string{"--enable-nvidia-gpu=no", "--local-repo=yes", "--gpu-operator-driver-version=595.91.07", "--gpu-operator-driver-repository=registry.example/nvidia"}
	tests := []struct {
		name string
		args []string
		warn bool
	}{
		{"debian 13 node", append([]string{"--distribution=debian", "--release=13"}, node...), true},
		{"debian 12 node", append([]string{"--distribution=debian", "--release=12"}, node...), true},
		{"ubuntu 24.04 node", append([]string{"--distribution=ubuntu", "--release=24.04"}, node...), false},
		{"ubuntu 22.04 node", append([]string{"--distribution=ubuntu", "--release=22.04"}, node...), false},
		{"debian 13 pod VM", []string{"--distribution=debian", "--release=13"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var code int
			var stderr string
			captureStdout(t, func() { stderr = captureStderr(t, func() { code = runPlan(tt.args) }) })
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			warned := strings.Contains(stderr, "plan: warning:") &&
				strings.Contains(stderr, "NVIDIA publishes no GPU Operator driver container") &&
				strings.Contains(stderr, "Ubuntu and RHEL")
			if warned != tt.warn {
				t.Errorf("stderr %q: warned %v, want %v", stderr, warned, tt.warn)
			}
			if !tt.warn && strings.Contains(stderr, "warning") {
				t.Errorf("unexpected warning: %q", stderr)
			}
		})
	}
}
