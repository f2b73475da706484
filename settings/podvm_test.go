package settings

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// agentTreeSamples are two good binaries trees for samples; TestPrecedence
// makes them.
var agentTreeSamples [2]string

// agentTree writes a minimal good pod VM binaries tree: the agent
// programs and their units, kata-agent enabled by a wants link.
func agentTree(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tree")
	files := map[string]string{
		"usr/local/bin/kata-agent":                            "#!/bin/sh\n",
		"usr/local/bin/agent-protocol-forwarder":              "#!/bin/sh\n",
		"usr/local/bin/process-user-data":                     "#!/bin/sh\n",
		"etc/systemd/system/kata-agent.service":               "[Service]\nExecStart=/usr/local/bin/kata-agent\n",
		"etc/systemd/system/agent-protocol-forwarder.service": "[Service]\nExecStart=/usr/local/bin/agent-protocol-forwarder\n",
		"etc/systemd/system/process-user-data.service":        "[Service]\nType=oneshot\nExecStart=/usr/local/bin/process-user-data\n",
	}
	for p, c := range files {
		full := filepath.Join(dir, p)
		for d := filepath.Dir(full); ; d = filepath.Dir(d) {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
			if d == dir {
				break
			}
		}
		mode := os.FileMode(0o644)
		if strings.HasPrefix(p, "usr/local/bin/") {
			mode = 0o755
		}
		if err := os.WriteFile(full, []byte(c), mode); err != nil {
			t.Fatal(err)
		}
	}
	wants := filepath.Join(dir, "etc/systemd/system/multi-user.target.wants")
	if err := os.MkdirAll(wants, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../kata-agent.service", filepath.Join(wants, "kata-agent.service")); err != nil {
		t.Fatal(err)
	}
	// MkdirAll's modes pass through the umask; the tree's must be 0755.
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.IsDir() {
			err = os.Chmod(p, 0o755)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestPodVMBinaries: a good tree reaches Options; a bad one is refused up
// front with the setting's name as the user wrote it, the value, what is
// wrong and what is allowed.
func TestPodVMBinaries(t *testing.T) {
	good := agentTree(t)
	r, err := Resolve(Input{LookupEnv: env(map[string]string{"PODVM_BINARIES": good})})
	if err != nil {
		t.Fatal(err)
	}
	if r.Options.PodVMBinaries != good {
		t.Errorf("PodVMBinaries %q, want %q", r.Options.PodVMBinaries, good)
	}
	if r, err := Resolve(Input{LookupEnv: env(nil)}); err != nil || r.Options.PodVMBinaries != "" {
		t.Errorf("default: %q, %v; want none", r.Options.PodVMBinaries, err)
	}
	scratch := t.TempDir()
	file := filepath.Join(scratch, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(scratch, "absent")
	for _, tt := range []struct {
		name  string
		in    Input
		wants []string
	}{
		{"missing, from HCL", Input{Explicit: map[string]Raw{"podvm_binaries": Scalar(missing)}, ExplicitFrom: FromHCL, LookupEnv: env(nil)},
			[]string{"podvm_binaries: invalid value", missing, "no such directory", "allowed: a directory on the build host"}},
		{"a file, from the environment", Input{LookupEnv: env(map[string]string{"PODVM_BINARIES": file})},
			[]string{"PODVM_BINARIES: invalid value", "a regular file, not a directory"}},
		{"empty, from a flag", Input{Explicit: map[string]Raw{"podvm_binaries": Scalar(t.TempDir())}, ExplicitFrom: FromFlag, LookupEnv: env(nil)},
			[]string{"--podvm-binaries: invalid value", "an empty directory"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Resolve(tt.in)
			var ve *ValueError
			if !errors.As(err, &ve) {
				t.Fatalf("Resolve: %v, want a ValueError", err)
			}
			for _, w := range tt.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}
