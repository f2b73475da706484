// Package shellcheck lets tests hold the shell that runs in the image to
// sh -n and shellcheck: the scripts embedded in Go, the commands the
// provisioner sends and the scripts the mkosi generator renders. They run
// nowhere else but in an image build, so a mistake in them would
// otherwise surface only in the end-to-end tests.
package shellcheck

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/podvm-gpu/packer-plugin-podvm/chroot/chroottest"
)

// Require skips the test when sh or shellcheck is missing; with
// PODVM_REQUIRE_ROOT=1 (make check sets it) it fails instead, so a runner
// without shellcheck cannot pass the check by skipping it.
func Require(t testing.TB) {
	t.Helper()
	chroottest.RequireTools(t, "sh", "shellcheck")
}

// Check fails the test if script does not parse (sh -n, or bash -n under a
// bash #! line) or shellcheck warns about it. Scripts are POSIX sh unless
// a #! line or a "# shellcheck shell=" directive says otherwise. A warning that is
// intended is disabled in the script itself, with its reason:
//
//	# shellcheck disable=SC2086 # $opts holds several words on purpose.
func Check(t testing.TB, name, script string) {
	t.Helper()
	parser := "sh"
	if first, _, _ := strings.Cut(script, "\n"); strings.HasPrefix(first, "#!") && strings.Contains(first, "bash") {
		parser = "bash"
	}
	if out, err := run(script, parser, "-n"); err != nil {
		t.Errorf("%s: %s -n: %v\n%s\n%s", name, parser, err, out, numbered(script))
		return
	}
	args := []string{"--format=gcc"}
	if !strings.HasPrefix(script, "#!") && !strings.Contains(script, "# shellcheck shell=") {
		args = append(args, "--shell=sh")
	}
	if out, err := run(script, "shellcheck", append(args, "-")...); err != nil {
		t.Errorf("%s: shellcheck: %v\n%s\n%s", name, err, out, numbered(script))
	}
}

func run(script, name string, args ...string) ([]byte, error) {
	cmd := exec.Command(name, args...)
	cmd.Stdin = strings.NewReader(script)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

// numbered prefixes each line with its number, as the findings cite them.
func numbered(script string) string {
	var b strings.Builder
	for i, l := range strings.Split(strings.TrimSuffix(script, "\n"), "\n") {
		fmt.Fprintf(&b, "%4d  %s\n", i+1, l)
	}
	return b.String()
}
