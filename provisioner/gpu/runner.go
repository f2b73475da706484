package gpu

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"
	"github.com/hashicorp/packer-plugin-sdk/template/interpolate"

	"github.com/podvm-gpu/packer-plugin-podvm/imagestep"
	"github.com/podvm-gpu/packer-plugin-podvm/shellquote"
)

// tailLines is how much of a failed command's output its error carries.
const tailLines = 20

// ExecuteCommandTemplate is the data execute_command is rendered with.
type ExecuteCommandTemplate struct {
	// Command is the command line, quoted as a single shell word.
	Command string
	// Vars are the env settings as quoted NAME=value words.
	Vars string
}

// CommandError is a remote command that failed (imagestep's: the executor
// and this runner report commands alike).
type CommandError = imagestep.CommandError

// runner runs commands and moves files through the communicator.
type runner struct {
	comm     packersdk.Communicator
	ui       packersdk.Ui
	tmpl     string
	ictx     interpolate.Context
	env      map[string]string
	retries  int
	backoff  func(attempt int) time.Duration
	runID    string
	now      func() time.Time
	stageDir string
	staged   int
}

func defaultBackoff(attempt int) time.Duration {
	return time.Duration(attempt*attempt) * 5 * time.Second
}

func newRunID() string {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		return fmt.Sprint(os.Getpid())
	}
	return hex.EncodeToString(b)
}

// wrap renders execute_command for one command line.
func (r *runner) wrap(command string) (string, error) {
	names := make([]string, 0, len(r.env))
	for n := range r.env {
		names = append(names, n)
	}
	slices.Sort(names)
	var vars []string
	for _, n := range names {
		vars = append(vars, n+"="+shellquote.Word(r.env[n]))
	}
	script := command
	if len(vars) > 0 {
		script = "export " + strings.Join(vars, " ") + "; " + command
	}
	ictx := r.ictx
	ictx.Data = &ExecuteCommandTemplate{Command: shellquote.Word(script), Vars: strings.Join(vars, " ")}
	out, err := interpolate.Render(r.tmpl, &ictx)
	if err != nil {
		return "", fmt.Errorf("rendering execute_command: %w", err)
	}
	return out, nil
}

// result is what a finished command produced.
type result struct {
	stdout string
	tail   []string
	status int
}

// exec runs command once. With quiet, its output is not shown in the build
// log (detection commands whose output the provisioner parses). A non-zero
// exit is not an error here; callers decide.
func (r *runner) exec(ctx context.Context, command string, quiet bool) (result, error) {
	return r.execInput(ctx, command, quiet, nil)
}

// execInput is exec with stdin fed to the command: secrets go this way,
// never through a file or the command line.
func (r *runner) execInput(ctx context.Context, command string, quiet bool, stdin io.Reader) (result, error) {
	full, err := r.wrap(command)
	if err != nil {
		return result{}, err
	}
	var stdout bytes.Buffer
	lw := &lineWriter{}
	if !quiet {
		lw.ui = r.ui
	}
	cmd := &packersdk.RemoteCmd{
		Command: full,
		Stdout:  io.MultiWriter(&stdout, lw.stream()),
		Stderr:  lw.stream(),
		Stdin:   stdin,
	}
	if err := ctx.Err(); err != nil {
		return result{}, err
	}
	if err := r.comm.Start(ctx, cmd); err != nil {
		return result{}, fmt.Errorf("starting %s: %w", command, err)
	}
	done := make(chan int, 1)
	go func() { done <- cmd.Wait() }()
	// Not every communicator honours ctx (the SDK's chroot one does not),
	// so the provisioner stops waiting on its own when the build is
	// cancelled; the communicator's cleanup ends the process.
	select {
	case status := <-done:
		lw.flush()
		return result{stdout: stdout.String(), tail: lw.tail(), status: status}, nil
	case <-ctx.Done():
		// The command may still write output after Provision returned;
		// by then the ui is no longer ours to write to.
		lw.mu.Lock()
		lw.ui = nil
		lw.mu.Unlock()
		return result{}, ctx.Err()
	}
}

// check is nil for a zero exit, else the CommandError of command.
func (res result) check(command string) error {
	if res.status == 0 {
		return nil
	}
	return &CommandError{Command: command, ExitStatus: res.status, Output: res.tail}
}

// run runs command and fails on a non-zero exit.
func (r *runner) run(ctx context.Context, command string) (string, error) {
	return r.mustExec(ctx, command, false)
}

// query runs a quiet command and returns its stdout.
func (r *runner) query(ctx context.Context, command string) (string, error) {
	return r.mustExec(ctx, command, true)
}

func (r *runner) mustExec(ctx context.Context, command string, quiet bool) (string, error) {
	res, err := r.exec(ctx, command, quiet)
	if err != nil {
		return "", err
	}
	if err := res.check(command); err != nil {
		return "", err
	}
	return res.stdout, nil
}

// transientMarkers are apt's words for network trouble worth another try.
// apt-get update exits 0 on some of them, so the output is checked too.
var transientMarkers = []string{
	"Temporary failure resolving",
	"Could not resolve",
	"Could not connect to",
	"Connection timed out",
	"Connection failed",
	"Unable to connect to",
	"Failed to fetch",
	"Hash Sum mismatch",
	"Some index files failed to download",
	"Unable to fetch some archives",
	"Undetermined Error",
	"Network is unreachable",
}

func transient(tail []string) bool {
	for _, l := range tail {
		for _, m := range transientMarkers {
			if strings.Contains(l, m) {
				return true
			}
		}
	}
	return false
}

// runApt runs an apt command, retrying a bounded number of times with
// backoff when it failed on what looks like a transient network error.
// apt-get update reports unreachable sources as warnings and exits 0; those
// count as failures here, so a build never proceeds on stale lists.
func (r *runner) runApt(ctx context.Context, command string) (string, error) {
	for attempt := 0; ; attempt++ {
		res, err := r.exec(ctx, command, false)
		if err != nil {
			return "", err
		}
		isTransient := transient(res.tail)
		if res.status == 0 && !isTransient {
			return res.stdout, nil
		}
		status := res.status
		if status == 0 {
			status = 100 // what apt-get uses for its own failures
		}
		cerr := &CommandError{Command: command, ExitStatus: status, Output: res.tail}
		if !isTransient || attempt >= r.retries {
			return "", cerr
		}
		wait := r.backoff(attempt + 1)
		r.ui.Say(fmt.Sprintf("transient network error (attempt %d of %d); retrying in %s", attempt+1, r.retries+1, wait))
		if err := sleep(ctx, wait); err != nil {
			return "", err
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// retry runs fn up to retries+1 times for file transfers.
func (r *runner) retry(ctx context.Context, what string, fn func() error) error {
	for attempt := 0; ; attempt++ {
		err := fn()
		if err == nil {
			return nil
		}
		if attempt >= r.retries {
			return fmt.Errorf("%s: %w", what, err)
		}
		wait := r.backoff(attempt + 1)
		r.ui.Say(fmt.Sprintf("%s failed (%v); retrying in %s", what, err, wait))
		if err := sleep(ctx, wait); err != nil {
			return err
		}
	}
}

// stage uploads data to a fresh path under the staging folder and returns
// it. Uploads run as the communicator's user, so files go to a folder that
// user can write and a command moves them into place.
func (r *runner) stage(ctx context.Context, name string, data []byte) (string, error) {
	return r.stageFrom(ctx, name, bytes.NewReader(data), int64(len(data)))
}

// stageFrom is stage of size bytes read from src, from its start on
// every try.
func (r *runner) stageFrom(ctx context.Context, name string, src io.ReadSeeker, size int64) (string, error) {
	path := r.stagePath(name)
	err := r.retry(ctx, "uploading "+path, func() error {
		if _, err := src.Seek(0, io.SeekStart); err != nil {
			return err
		}
		fi := os.FileInfo(stagedInfo{name: path[strings.LastIndexByte(path, '/')+1:], size: size})
		return transfer(ctx, func() error { return r.comm.Upload(path, io.LimitReader(src, size), &fi) })
	})
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		// A failed or interrupted upload may have left part of the file.
		r.removeStaged(path)
		return "", err
	}
	return path, nil
}

// stagePath is a fresh path for an upload under the staging folder.
func (r *runner) stagePath(name string) string {
	r.staged++
	return fmt.Sprintf("%s/podvm-gpu.%s.%d.%s", r.stageDir, r.runID, r.staged, name)
}

// stagedInfo describes a staged upload. With it Packer's SSH communicator
// streams the data; without it, it first copies the data into a temporary
// file of its own on the build host to learn the length, and an
// interrupted build (whose plugins packer kills) leaves that file behind.
// Staged files are the communicator user's alone until installed.
type stagedInfo struct {
	name string
	size int64
}

func (s stagedInfo) Name() string     { return s.name }
func (s stagedInfo) Size() int64      { return s.size }
func (stagedInfo) Mode() fs.FileMode  { return 0o600 }
func (stagedInfo) ModTime() time.Time { return time.Time{} }
func (stagedInfo) IsDir() bool        { return false }
func (stagedInfo) Sys() any           { return nil }

// stagedCleanupTimeout bounds the best-effort removal of staged files.
const stagedCleanupTimeout = 30 * time.Second

// removeStaged removes staged files, best effort, after a failure. The
// build's context may be cancelled already, so it gets a short one of its
// own.
func (r *runner) removeStaged(paths ...string) {
	if len(paths) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), stagedCleanupTimeout)
	defer cancel()
	if _, err := r.query(ctx, "rm -f "+shellquote.JoinWords(paths...)); err != nil {
		r.ui.Error(fmt.Sprintf("could not remove staged files %s: %v", strings.Join(paths, " "), err))
	}
}

// download fetches a remote file into w, retrying on failure.
func (r *runner) download(ctx context.Context, path string, open func() (io.WriteCloser, error)) error {
	return r.retry(ctx, "downloading "+path, func() error {
		w, err := open()
		if err != nil {
			return err
		}
		err = transfer(ctx, func() error { return r.comm.Download(path, w) })
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		return err
	})
}

// transfer runs one upload or download and stops waiting for it when ctx
// ends. No communicator's Upload or Download takes a context, so one held
// up by a slow or stalled link would keep an interrupted build from ending
// until the transfer did. Whatever it still writes goes to a path the
// caller removes (a staged file, a host temporary directory).
func transfer(ctx context.Context, fn func() error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// lineWriter splits command output into lines for the build log and keeps
// the last tailLines of them. Stdout and stderr write concurrently.
type lineWriter struct {
	ui      packersdk.Ui
	mu      sync.Mutex
	lines   []string
	streams []*lineStream
}

// lineStream is one output stream of a command; each keeps its own partial
// line so stdout and stderr never splice.
type lineStream struct {
	lw  *lineWriter
	buf []byte
}

func (lw *lineWriter) stream() *lineStream {
	s := &lineStream{lw: lw}
	lw.mu.Lock()
	defer lw.mu.Unlock()
	lw.streams = append(lw.streams, s)
	return s
}

func (s *lineStream) Write(p []byte) (int, error) {
	s.lw.mu.Lock()
	defer s.lw.mu.Unlock()
	s.buf = append(s.buf, p...)
	for {
		i := bytes.IndexByte(s.buf, '\n')
		if i < 0 {
			break
		}
		s.lw.line(string(s.buf[:i]))
		s.buf = s.buf[i+1:]
	}
	return len(p), nil
}

// line records one line; lw.mu is held.
func (lw *lineWriter) line(l string) {
	l = strings.TrimRight(l, "\r")
	// apt and dkms redraw progress with carriage returns; keep the last.
	if i := strings.LastIndexByte(l, '\r'); i >= 0 {
		l = l[i+1:]
	}
	if lw.ui != nil {
		// Remote output is detail under the step heading, as in packer's shell provisioner.
		lw.ui.Say(l)
	}
	lw.lines = append(lw.lines, l)
	if len(lw.lines) > tailLines {
		lw.lines = lw.lines[len(lw.lines)-tailLines:]
	}
}

// flush records what is left of unterminated last lines.
func (lw *lineWriter) flush() {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	for _, s := range lw.streams {
		if len(s.buf) > 0 {
			lw.line(string(s.buf))
			s.buf = nil
		}
	}
}

func (lw *lineWriter) tail() []string {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return slices.Clone(lw.lines)
}
