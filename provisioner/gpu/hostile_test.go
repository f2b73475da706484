package gpu

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podvm-gpu/packer-plugin-podvm/gpustack"
)

// A kernel directory named like a command substitution is refused at
// detection: nothing after it runs.
func TestHostileKernelNameRefused(t *testing.T) {
	img := debian13()
	img.kernels = append(img.kernels, "6.1$(touch${IFS}INJECTED)")
	p := newTestProvisioner(t, map[string]interface{}{"enable_nvidia_gpu": "no", "local_repo": "yes"})
	comm := newFakeComm(img)
	err := provision(t, p, comm)
	if err == nil || !strings.Contains(err.Error(), "is not a kernel release") || !strings.Contains(err.Error(), `"6.1$(touch${IFS}INJECTED)"`) {
		t.Fatalf("error %v, want the kernel name refused", err)
	}
	for _, c := range comm.cmds {
		if strings.Contains(c, "INJECTED") {
			t.Errorf("a command carried the hostile name: %s", c)
		}
	}
}

// The initramfs command keeps a kernel name one shell word wherever it
// appears: run for real, a name holding $(...) executes nothing.
func TestInitramfsCommandQuoting(t *testing.T) {
	dir := t.TempDir()
	hostile := "6.1$(touch INJECTED)"
	cmd := gpustack.UpdateInitramfs{Kernels: []string{hostile}}.Command()
	sh := exec.Command("/bin/sh", "-c", cmd)
	sh.Dir = dir
	// sh and touch, so that a broken quoting would really create the
	// file; no update-initramfs, so the else branch runs.
	bin := t.TempDir()
	for _, tool := range []string{"sh", "touch"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(p, filepath.Join(bin, tool)); err != nil {
			t.Fatal(err)
		}
	}
	sh.Env = []string{"PATH=" + bin}
	out, err := sh.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "INJECTED")); err == nil {
		t.Fatalf("the kernel name ran as a command: %s", cmd)
	}
	if !strings.Contains(string(out), "no initramfs for "+hostile) {
		t.Errorf("output %q does not name the kernel as it is", out)
	}
}
