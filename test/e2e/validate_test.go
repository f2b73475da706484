//go:build e2e

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestPackerValidateProvisioner runs the real packer against the plugin:
// settings reach podvm-gpu's Prepare through Packer's HCL decoding (which
// consumes its own arguments, max_retries among them), and bad ones fail
// packer validate with the plugin's message.
func TestPackerValidateProvisioner(t *testing.T) {
	env := setupBuilderEnv(t)
	file := filepath.Join(t.TempDir(), "a-file")
	must(t, os.WriteFile(file, nil, 0o644))
	tests := []struct {
		name, body string
		want       string // "" for success
	}{
		{"transfer_retries reaches the plugin", `transfer_retries = -1`, "transfer_retries: -1 is negative"},
		{"transfer_retries = 0 is accepted", `transfer_retries = 0`, ""},
		{"output_dir is an existing file", `output_dir = "` + file + `"`, "output_dir: invalid value"},
		{"far-future SOURCE_DATE_EPOCH", `source_date_epoch = "99999999999"`, "source_date_epoch (SOURCE_DATE_EPOCH): 99999999999"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			tmpl := `source "null" "x" {
  communicator = "none"
}

build {
  sources = ["source.null.x"]
  provisioner "podvm-gpu" {
    ` + tt.body + `
  }
}
`
			must(t, os.WriteFile(filepath.Join(dir, "t.pkr.hcl"), []byte(tmpl), 0o644))
			cmd := exec.Command(env.packer, "validate", ".")
			cmd.Dir = dir
			cmd.Env = env.environ(nil)
			out, err := cmd.CombinedOutput()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("packer validate: %v\n%s", err, out)
			case tt.want != "" && (err == nil || !strings.Contains(string(out), tt.want)):
				t.Errorf("packer validate: %v, want a failure with %q:\n%s", err, tt.want, out)
			}
		})
	}
}
