package modcache

import (
	"regexp"
	"testing"

	"github.com/podvm-gpu/packer-plugin-podvm/internal/shellcheck"
)

// TestScriptShellcheck holds the image side of the DKMS cache to sh -n and
// shellcheck: it runs only in an image build.
func TestScriptShellcheck(t *testing.T) {
	shellcheck.Require(t)
	shellcheck.Check(t, "script", script)
	if left := regexp.MustCompile(`@[A-Z_]+@`).FindString(script); left != "" {
		t.Errorf("scripts/dkms.sh: placeholder %s is not replaced", left)
	}
}
