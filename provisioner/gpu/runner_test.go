package gpu

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"
)

// holdComm starts commands that never exit on their own; the test writes
// their output and exits them later.
type holdComm struct {
	*fakeComm
	mu   sync.Mutex
	held []*packersdk.RemoteCmd
}

func (c *holdComm) Start(ctx context.Context, rc *packersdk.RemoteCmd) error {
	inner := unwrap(rc.Command)
	if strings.HasPrefix(inner, "rm -f ") {
		return c.fakeComm.Start(ctx, rc)
	}
	c.fakeComm.record("run: " + rc.Command)
	c.mu.Lock()
	c.held = append(c.held, rc)
	c.mu.Unlock()
	return nil
}

type countingUi struct {
	packersdk.Ui
	mu       sync.Mutex
	messages []string
}

func (u *countingUi) Message(s string) {
	u.mu.Lock()
	u.messages = append(u.messages, s)
	u.mu.Unlock()
}
func (u *countingUi) Say(s string)   { u.Message(s) }
func (u *countingUi) Error(s string) { u.Message(s) }

func testRunner(comm packersdk.Communicator, ui packersdk.Ui) *runner {
	return &runner{comm: comm, ui: ui, tmpl: "sh -c {{.Command}}", backoff: func(int) time.Duration { return 0 },
		runID: "test", now: time.Now, stageDir: "/tmp"}
}

// TestNoOutputAfterCancellation: a command still running when the build
// is cancelled must not write to the ui once exec has returned.
func TestNoOutputAfterCancellation(t *testing.T) {
	comm := &holdComm{fakeComm: newFakeComm(debian13())}
	ui := &countingUi{}
	r := testRunner(comm, ui)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := r.run(ctx, "sleep 600"); errc <- err }()
	for {
		comm.mu.Lock()
		n := len(comm.held)
		comm.mu.Unlock()
		if n > 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	comm.held[0].Stdout.Write([]byte("before\n"))
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("no error after cancellation")
	}
	ui.mu.Lock()
	before := len(ui.messages)
	ui.mu.Unlock()
	io.WriteString(comm.held[0].Stdout, "late output\n")
	io.WriteString(comm.held[0].Stderr, "late error\n")
	comm.held[0].SetExited(0)
	ui.mu.Lock()
	defer ui.mu.Unlock()
	if len(ui.messages) != before || before != 1 {
		t.Errorf("ui messages %q: want only the one before cancellation", ui.messages)
	}
}

// TestStagedRemovedOnFailure: a staged upload is removed when the command
// that would install it does not run to its end, and when its upload fails.
func TestStagedRemovedOnFailure(t *testing.T) {
	t.Run("cancelled install", func(t *testing.T) {
		comm := &holdComm{fakeComm: newFakeComm(debian13())}
		r := testRunner(comm, &countingUi{})
		e := &executor{r: r, ui: r.ui}
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- e.writeFile(ctx, "/etc/x.conf", []byte("x"), 0o644, "root:root") }()
		for {
			comm.mu.Lock()
			n := len(comm.held)
			comm.mu.Unlock()
			if n > 0 {
				break
			}
			time.Sleep(time.Millisecond)
		}
		cancel()
		if err := <-errc; err == nil {
			t.Fatal("no error")
		}
		last := comm.fakeComm.cmds[len(comm.fakeComm.cmds)-1]
		if last != "rm -f /tmp/podvm-gpu.test.1.x.conf" {
			t.Errorf("last command %q, want the staged file removed", last)
		}
	})
	t.Run("failed upload", func(t *testing.T) {
		comm := newFakeComm(debian13())
		comm.uploadFailures = 1
		r := testRunner(comm, &countingUi{})
		if _, err := r.stage(context.Background(), "x.conf", []byte("x")); err == nil {
			t.Fatal("no error")
		}
		if len(comm.cmds) != 1 || comm.cmds[0] != "rm -f /tmp/podvm-gpu.test.1.x.conf" {
			t.Errorf("commands %q, want the staged path removed", comm.cmds)
		}
	})
}
