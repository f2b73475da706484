package gpu

import (
	"fmt"
	"testing"

	"github.com/podvm-gpu/packer-plugin-podvm/internal/shellcheck"
)

// TestCommandsShellcheck holds every command that the golden builds send
// through the communicator to sh -n and shellcheck: they are built by
// concatenation and run only in an image. The scripts they embed (sh -c
// SCRIPT) are gpustack's and modcache's, which their own tests check.
func TestCommandsShellcheck(t *testing.T) {
	shellcheck.Require(t)
	seen := map[string]bool{}
	for _, tc := range goldenCases(t) {
		p := newTestProvisioner(t, tc.settings)
		comm := newFakeComm(tc.img())
		if err := provision(t, p, comm); err != nil {
			t.Fatalf("%s: Provision: %v", tc.name, err)
		}
		for i, cmd := range comm.cmds {
			if seen[cmd] {
				continue
			}
			seen[cmd] = true
			shellcheck.Check(t, fmt.Sprintf("%s: command %d", tc.name, i+1), cmd)
		}
	}
	if len(seen) == 0 {
		t.Fatal("no command ran")
	}
}
