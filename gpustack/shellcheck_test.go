package gpustack

import (
	"testing"

	"github.com/podvm-gpu/packer-plugin-podvm/internal/shellcheck"
)

// TestConstantsShellcheck holds the short scripts this package keeps in
// string constants (files it writes into the image) to sh -n and
// shellcheck. TestScriptsShellcheck checks scripts/; the provisioner's and
// the generator's tests check the commands and scripts built around both.
func TestConstantsShellcheck(t *testing.T) {
	shellcheck.Require(t)
	for name, script := range map[string]string{
		"hookScript":      hookScript,
		"gateScriptText":  gateScriptText,
		"nouveauHookText": nouveauHookText,
	} {
		shellcheck.Check(t, name, script)
	}
}
