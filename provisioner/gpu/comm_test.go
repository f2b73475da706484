package gpu

import (
	"context"
	"errors"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
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
	chmod := regexp.MustCompile(`chmod -R u=rwX,go=rX ` + regexp.QuoteMeta(dir) + `(['\s]|$)`)
	for i, l := range comm.log {
		if strings.HasPrefix(l, "run: ") && chmod.MatchString(l) {
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

// blockingComm is a communicator whose transfers hang, as they do on a
// stalled link: no Upload or Download takes a context.
type blockingComm struct {
	*fakeComm
	started chan string
	release chan struct{}
}

func (c *blockingComm) Upload(path string, r io.Reader, fi *os.FileInfo) error {
	c.started <- "upload " + path
	<-c.release
	return c.fakeComm.Upload(path, r, fi)
}

func (c *blockingComm) Download(path string, w io.Writer) error {
	c.started <- "download " + path
	<-c.release
	return c.fakeComm.Download(path, w)
}

// TestTransfersStopOnCancel: a SIGINT (a cancelled context) ends a hung
// upload or download at once, and a staged upload's path is removed.
func TestTransfersStopOnCancel(t *testing.T) {
	tests := []struct {
		name     string
		run      func(ctx context.Context, r *runner) error
		wantCmds []string // what runs in the guest after the cancel
	}{
		{"upload", func(ctx context.Context, r *runner) error {
			_, err := r.stage(ctx, "InRelease", []byte("x"))
			return err
		}, []string{"rm -f /tmp/podvm-gpu.test.1.InRelease"}},
		{"download", func(ctx context.Context, r *runner) error {
			return r.download(ctx, "/opt/x.deb", func() (io.WriteCloser, error) { return nopCloser{io.Discard}, nil })
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			comm := &blockingComm{fakeComm: newFakeComm(debian13()), started: make(chan string, 1), release: make(chan struct{})}
			defer close(comm.release)
			r := testRunner(comm, &countingUi{})
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() { errc <- tt.run(ctx, r) }()
			<-comm.started
			cancel()
			select {
			case err := <-errc:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("error %v, want context.Canceled", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("still waiting for the hung transfer 10s after the cancel")
			}
			if strings.Join(comm.cmds, "\n") != strings.Join(tt.wantCmds, "\n") {
				t.Errorf("guest commands %q, want %q", comm.cmds, tt.wantCmds)
			}
		})
	}
}

// TestHostTempGoesWithTheProcess: the host's copy of the .debs goes away
// when the plugin process ends without removing it (packer SIGKILLs its
// plugins after an interrupt), which closing the watcher's pipe stands in
// for here; and Remove removes it at once.
func TestHostTempGoesWithTheProcess(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	tests := []struct {
		name string
		end  func(h *hostTemp)
	}{
		{"process gone", func(h *hostTemp) { h.hold.Close() }},
		{"Remove", func(h *hostTemp) { h.Remove() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := newHostTemp("podvm-gpu-repo-")
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(h.Dir+"/x.deb", []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
			if _, err := os.Stat(h.Dir); err != nil {
				t.Fatalf("removed while still in use: %v", err)
			}
			tt.end(h)
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				if _, err := os.Stat(h.Dir); errors.Is(err, os.ErrNotExist) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s still there 10s later", h.Dir)
				}
			}
			h.watcher.Wait()
		})
	}
}

// infoComm records the FileInfo each upload came with.
type infoComm struct {
	*fakeComm
	infos []os.FileInfo
}

func (c *infoComm) Upload(path string, r io.Reader, fi *os.FileInfo) error {
	var info os.FileInfo
	if fi != nil {
		info = *fi
	}
	c.infos = append(c.infos, info)
	return c.fakeComm.Upload(path, r, fi)
}

// TestStagedUploadHasFileInfo: every staged upload says its size, so that
// Packer's SSH communicator need not copy it into a temporary file on the
// build host first (which an interrupted build leaves behind), and it is
// the communicator user's alone.
func TestStagedUploadHasFileInfo(t *testing.T) {
	comm := &infoComm{fakeComm: newFakeComm(debian13())}
	r := testRunner(comm, &countingUi{})
	data := []byte("Types: deb\n")
	path, err := r.stage(context.Background(), "x.sources", data)
	if err != nil {
		t.Fatal(err)
	}
	if len(comm.infos) != 1 || comm.infos[0] == nil {
		t.Fatalf("upload FileInfo %v, want one", comm.infos)
	}
	fi := comm.infos[0]
	if !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 || fi.Size() != int64(len(data)) || fi.Name() != path[strings.LastIndexByte(path, '/')+1:] {
		t.Errorf("FileInfo name %q size %d mode %v, want %q, %d, a regular file 0600", fi.Name(), fi.Size(), fi.Mode(), path, len(data))
	}
}
