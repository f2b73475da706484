package rootfs

import (
	"context"
	"fmt"
	"log"
	"os/exec"
	"strings"
	"syscall"
	"time"

	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"

	"github.com/podvm-gpu/packer-plugin-podvm/linetail"
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
	out := lineLog(name, nil)
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
			return fmt.Errorf("%s: %w%s", name, err, tail(out))
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

// lineLog logs a command's output line by line, PACKER_LOG shows it, or
// gives each line to echo (ui.Say, which logs it too); it keeps the last
// lines for the error message.
func lineLog(prefix string, echo func(string)) *linetail.Writer {
	if echo == nil {
		echo = func(line string) { log.Printf("[%s] %s", prefix, line) }
	}
	return &linetail.Writer{Each: echo}
}

// tail formats the last lines to follow an error message.
func tail(w *linetail.Writer) string {
	lines := w.Lines()
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
