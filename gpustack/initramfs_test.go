package gpustack

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDeferInitramfsRoundTrip runs the deferral and its end with sh on a
// copy of initramfs-tools' configuration: off while deferred, a second
// deferral (a rerun) keeps the saved original, and the end puts it back
// byte for byte, as dpkg wants its conffile.
func TestDeferInitramfsRoundTrip(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "update-initramfs.conf")
	orig := "# Configuration file for update-initramfs(8)\nupdate_initramfs=yes\nbackup_initramfs=no\n"
	if err := os.WriteFile(conf, []byte(orig), 0o644); err != nil {
		t.Fatal(err)
	}
	r := strings.NewReplacer(initramfsConf, conf)
	sh := func(cmd string) string {
		t.Helper()
		out, err := exec.Command("sh", "-c", r.Replace(cmd)).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", cmd, err, out)
		}
		return string(out)
	}
	read := func() string {
		data, err := os.ReadFile(conf)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	sh(DeferInitramfs{}.Command())
	if got := read(); !strings.HasSuffix(got, "\nupdate_initramfs=no\n") || strings.Contains(got, "=yes") || !strings.Contains(got, "backup_initramfs=no") {
		t.Errorf("deferred configuration:\n%s", got)
	}
	if out := sh(DeferInitramfs{}.Command()); !strings.Contains(out, "deferred already") {
		t.Errorf("second deferral: %q", out)
	}
	sh(UpdateInitramfs{}.Command())
	if got := read(); got != orig {
		t.Errorf("restored configuration:\n%q\nwant\n%q", got, orig)
	}
	if _, err := os.Stat(conf + ".podvm-saved"); !os.IsNotExist(err) {
		t.Errorf("the saved copy stayed: %v", err)
	}
	if out := sh(UpdateInitramfs{}.Command()); out != "" {
		t.Errorf("resume without a deferral: %q", out)
	}
}
