package rootfs

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"
)

// termGrace is how long a cancelled host command gets after SIGTERM before
// SIGKILL: debootstrap unmounts what it mounted in the target from an exit
// trap, which SIGKILL would skip.
var termGrace = 5 * time.Second

// runHost runs cmd in a process group of its own, logging its output line
// by line (PACKER_LOG shows it) and quoting the last lines in the error
// when it fails. When ctx is done the group gets SIGTERM, then SIGKILL.
// Stdout is left alone if the caller set it (a pipe into a compressor).
func runHost(ctx context.Context, cmd *exec.Cmd) error {
	name := cmd.Args[0]
	out := &lineLog{prefix: name}
	if cmd.Stdout == nil {
		cmd.Stdout = out
	}
	cmd.Stderr = out
	cmd.SysProcAttr = hostProcAttr()
	// Output pipes a leftover grandchild still holds are closed this long
	// after the command exits, so Wait cannot hang on them.
	cmd.WaitDelay = termGrace
	log.Printf("running %s", strings.Join(cmd.Args, " "))
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("%s: %w%s", name, err, out.tail())
		}
		return nil
	case <-ctx.Done():
	}
	pgid := cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(termGrace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-done
	}
	return fmt.Errorf("%s: %w", name, ctx.Err())
}

// lineLog logs complete lines and keeps the last few for error messages.
type lineLog struct {
	prefix string
	// echo, if set, gets each line instead of the log (ui.Say, which
	// logs it too).
	echo func(string)

	mu      sync.Mutex
	partial []byte
	last    []string
}

const keptLines = 15

func (l *lineLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		line := strings.TrimRight(string(l.partial[:i]), "\r")
		// A progress counter redraws its line after each \r; its last
		// state is the line.
		line = line[strings.LastIndexByte(line, '\r')+1:]
		l.partial = l.partial[i+1:]
		if l.echo != nil {
			l.echo(line)
		} else {
			log.Printf("[%s] %s", l.prefix, line)
		}
		l.last = append(l.last, line)
		if len(l.last) > keptLines {
			l.last = l.last[1:]
		}
	}
	return len(p), nil
}

// tail returns the last lines, formatted to follow an error message.
func (l *lineLog) tail() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	lines := l.last
	if len(l.partial) > 0 {
		lines = append(lines, string(l.partial))
	}
	if len(lines) == 0 {
		return ""
	}
	return "; last output:\n    " + strings.Join(lines, "\n    ")
}

// timed says what a long step does, runs it, and says how long it took.
func timed(ui packersdk.Ui, what string, fn func() error) error {
	ui.Say(what + "...")
	start := time.Now()
	err := fn()
	took := time.Since(start).Round(100 * time.Millisecond)
	if err != nil {
		ui.Error(fmt.Sprintf("%s failed after %s", what, took))
		return err
	}
	ui.Say(fmt.Sprintf("%s: done in %s", what, took))
	return nil
}
