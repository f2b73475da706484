package gpu

import (
	"strings"
	"testing"
)

// What the cloud path's communicator (SSH, a non-root user, sudo in
// execute_command) does differently from the chroot one, each found by the
// e2e rehearsal (test/e2e/cloud_e2e_test.go) and held here without a VM.

// TestDebsReadableBeforeDownload: the .debs apt wrote as root are made
// readable before any is downloaded, since the SSH user downloads them and
// root's umask may be 0077 (sudo's umask option, a hardened image).
func TestDebsReadableBeforeDownload(t *testing.T) {
	p := newTestProvisioner(t, map[string]interface{}{"enable_nvidia_gpu": "no", "local_repo": "yes"})
	comm := newFakeComm(debian13())
	if err := provision(t, p, comm); err != nil {
		t.Fatal(err)
	}
	const dir = "/opt/local-packages.podvm-new"
	readable, downloads := -1, 0
	for i, l := range comm.log {
		if strings.HasPrefix(l, "run: ") && strings.Contains(l, "chmod -R u=rwX,go=rX "+dir+" ") {
			readable = i
		}
		if strings.HasPrefix(l, "download: "+dir+"/") {
			downloads++
			if readable < 0 || readable > i {
				t.Fatalf("%s before the directory was made readable", l)
			}
		}
	}
	if downloads == 0 {
		t.Fatal("no .deb downloaded")
	}
}
