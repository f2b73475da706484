//go:build e2e

package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podvm-gpu/packer-plugin-podvm/agenttree/agenttreetest"
)

// hostileCase is one template body and what packer must say of it.
type hostileCase struct {
	name, body string
	env        []string // extra environment for packer
	want       string   // "" for success; else a substring of the failure
}

// TestPackerValidateProvisioner runs the real packer against the plugin:
// settings reach podvm-gpu's Prepare through Packer's HCL decoding (which
// consumes its own arguments, max_retries among them), and bad ones fail
// packer validate with the plugin's message. The hostile values are those
// of the hardening rounds: each must be refused before a build starts,
// naming the setting, and nothing may hang (a FIFO, /dev/zero).
func TestPackerValidateProvisioner(t *testing.T) {
	env := setupBuilderEnv(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "a-file")
	must(t, os.WriteFile(file, nil, 0o644))
	dangling := filepath.Join(dir, "dangling")
	must(t, os.Symlink(filepath.Join(dir, "absent"), dangling))
	loop := filepath.Join(dir, "loop")
	must(t, os.Symlink(loop, loop))
	fifo := filepath.Join(dir, "fifo")
	must(t, syscall.Mkfifo(fifo, 0o600))
	long := "/opt/" + strings.Repeat("a", 5000)
	// Pod VM binaries trees: the stand-in, and broken copies of it.
	tree := agenttreetest.StandIn(t)
	// A hard link to a file of the host: the image would get the host's
	// file. (A symbolic link is carried as a link, never read on the host.)
	escaping := agenttreetest.StandIn(t)
	must(t, os.Link(file, filepath.Join(escaping, "etc/host-file")))
	noAgent := agenttreetest.StandIn(t)
	must(t, os.Remove(filepath.Join(noAgent, "usr/local/bin/kata-agent")))
	emptyDir := filepath.Join(dir, "empty")
	must(t, os.Mkdir(emptyDir, 0o755))

	tests := []hostileCase{
		{"transfer_retries reaches the plugin", `transfer_retries = -1`, nil, "transfer_retries: -1 is negative"},
		{"transfer_retries = 0 is accepted", `transfer_retries = 0`, nil, ""},
		{"transfer_retries absurd", `transfer_retries = 1000000000`, nil, "transfer_retries"},
		{"output_dir is an existing file", `output_dir = "` + file + `"`, nil, "output_dir: invalid value"},
		{"output_dir dangling link", `output_dir = "` + dangling + `"`, nil, "output_dir: invalid value"},
		{"output_dir link loop", `output_dir = "` + loop + `"`, nil, "output_dir: invalid value"},
		{"output_dir below a file", `output_dir = "` + file + `/sub"`, nil, "output_dir: invalid value"},
		{"output_dir in /proc", `output_dir = "/proc/self"`, nil, "output_dir: invalid value"},
		{"far-future SOURCE_DATE_EPOCH", `source_date_epoch = "99999999999"`, nil, "source_date_epoch (SOURCE_DATE_EPOCH): 99999999999"},
		{"local_repo_path /etc", `local_repo_path = "/etc"`, nil, "local_repo_path: invalid value"},
		{"local_repo_path /", `local_repo_path = "/"`, nil, "local_repo_path: invalid value"},
		{"local_repo_path below /tmp", `local_repo_path = "/tmp/repo"`, nil, "local_repo_path: invalid value"},
		{"local_repo_path below /proc", `local_repo_path = "/proc/repo"`, nil, "local_repo_path: invalid value"},
		{"local_repo_path with CR", `local_repo_path = "/opt/x\rWhat=/srv"`, nil, "local_repo_path: invalid value"},
		{"LOCAL_REPO_PATH=/usr from the environment", ``, []string{"LOCAL_REPO_PATH=/usr"}, "LOCAL_REPO_PATH: invalid value"},
		{"local_repo_path of 5,000 bytes", `local_repo_path = "` + long + `"`, nil, "local_repo_path: invalid value"},
		{"local_repo_keyring /etc/passwd", `local_repo_keyring = "/etc/passwd"`, nil, "local_repo_keyring: invalid value"},
		{"local_repo_keyring in the repository", `local_repo_keyring = "/opt/local-packages/keyring.gpg"`, nil, "local_repo_keyring"},
		{"local_repo_expose_path /run/systemd", `local_repo_expose_path = "/run/systemd"`, nil, "local_repo_expose_path: invalid value"},
		{"local_repo_expose_path /run/nvidia/driver", `local_repo_expose_path = "/run/nvidia/driver"`, nil, "local_repo_expose_path: invalid value"},
		{"local_repo_expose_path with CR", `local_repo_expose_path = "/run/x\rWhat=/srv"`, nil, "local_repo_expose_path: invalid value"},
		{"empty package list", `local_repo_packages = []`, nil, "local_repo_packages"},
		{"{kernel} alone", `local_repo_packages = ["{kernel}"]`, nil, "local_repo_packages: invalid value"},
		{"module key /dev/zero", `
    nvidia_module_signing      = "key"
    nvidia_module_signing_key  = "/dev/zero"
    nvidia_module_signing_cert = "/dev/zero"`, nil, "is a character device, not a regular"},
		{"module key a FIFO", `
    nvidia_module_signing      = "key"
    nvidia_module_signing_key  = "` + fifo + `"
    nvidia_module_signing_cert = "` + fifo + `"`, nil, "is a FIFO, not a regular"},
		{"repository key /dev/zero", `local_repo_signing_key = "/dev/zero"`, nil, "local_repo_signing_key"},
		{"repository key a FIFO", `local_repo_signing_key = "` + fifo + `"`, nil, "local_repo_signing_key"},
		{"toolkit keyring /dev/zero", `nvidia_container_toolkit_repo_keyring = "/dev/zero"`, nil, "nvidia_container_toolkit_repo_keyring"},
		{"podvm_binaries the stand-in tree", `podvm_binaries = "` + tree + `"`, nil, ""},
		{"PODVM_BINARIES the stand-in tree", ``, []string{"PODVM_BINARIES=" + tree}, ""},
		{"podvm_binaries missing", `podvm_binaries = "` + dir + `/absent"`, nil, "podvm_binaries: invalid value"},
		{"PODVM_BINARIES missing", ``, []string{"PODVM_BINARIES=" + dir + "/absent"}, "PODVM_BINARIES: invalid value"},
		{"podvm_binaries a file", `podvm_binaries = "` + file + `"`, nil, "a regular file, not a directory"},
		{"podvm_binaries empty", `podvm_binaries = "` + emptyDir + `"`, nil, "an empty directory"},
		{"podvm_binaries a hard link out of the tree", `podvm_binaries = "` + escaping + `"`, nil, "hard links, 1 of them outside the tree"},
		{"podvm_binaries without kata-agent", `podvm_binaries = "` + noAgent + `"`, nil, "no /usr/local/bin/kata-agent"},
		{"module key not demanded with the GPU stack off", `
    enable_nvidia_gpu     = false
    nvidia_module_signing = "key"`, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
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
			packerValidate(t, env, tmpl, tt)
		})
	}
}

// packerValidate runs packer validate on tmpl, bounded in time: a
// setting that makes the plugin hang fails the case instead of the run.
func packerValidate(t *testing.T, env *builderEnv, tmpl string, tt hostileCase) {
	t.Helper()
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "t.pkr.hcl"), []byte(tmpl), 0o644))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, env.packer, "validate", ".")
	cmd.Dir = dir
	cmd.Env = env.environ(tt.env)
	out, err := cmd.CombinedOutput()
	switch {
	case ctx.Err() != nil:
		t.Errorf("packer validate did not finish within 2 minutes:\n%s", out)
	case tt.want == "" && err != nil:
		t.Errorf("packer validate: %v\n%s", err, out)
	// packer wraps long messages: compared with the line breaks undone.
	case tt.want != "" && (err == nil || !strings.Contains(strings.Join(strings.Fields(string(out)), " "), tt.want)):
		t.Errorf("packer validate: %v, want a failure with %q:\n%s", err, tt.want, out)
	}
	if len(out) > 64<<10 {
		t.Errorf("packer validate printed %d bytes: a refused value must be quoted, not echoed whole", len(out))
	}
}

// TestPackerValidateBuilder: the podvm-rootfs builder's hostile settings,
// refused by packer validate before anything is built or removed.
func TestPackerValidateBuilder(t *testing.T) {
	env := setupBuilderEnv(t)
	dir := t.TempDir()
	open := filepath.Join(dir, "open-cache")
	must(t, os.Mkdir(open, 0o777))
	must(t, os.Chmod(open, 0o777))
	must(t, os.Chown(open, 65534, 65534)) // nobody
	out := filepath.Join(dir, "out")
	tests := []hostileCase{
		{"a plain build validates", ``, nil, ""},
		{"output_image a device", `output_image = "/dev/sda"`, nil, "output_image"},
		{"output_image in /proc", `output_image = "/proc/self/mem"`, nil, "output_image"},
		{"output_tarball in /sys", `output_tarball = "/sys/podvm.tar.zst"`, nil, "output_tarball"},
		{"disk_size too small", `disk_size = "1M"`, nil, "disk_size"},
		{"cache_dir anyone may write", `cache_dir = "` + open + `"`, nil, "cache_dir"},
		{"suite with CR", `suite = "trixie\rx"`, nil, "suite"},
		{"kernel_cmdline with LF", `kernel_cmdline = "quiet\ninit=/bin/sh"`, nil, "kernel_cmdline"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmpl := builderTemplate(out, "  format = \"qcow2\"\n  "+tt.body, "")
			packerValidate(t, env, tmpl, tt)
		})
	}
	// output_directory is the template's own argument: /var/lib would be
	// removed, with every process rooted below it killed, by -force.
	t.Run("output_directory /var/lib", func(t *testing.T) {
		packerValidate(t, env, builderTemplate("/var/lib", "", ""), hostileCase{want: "output_directory"})
	})
}
