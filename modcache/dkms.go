package modcache

import (
	"bufio"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/podvm-gpu/packer-plugin-podvm/shellquote"
)

// NoAutoinstall, present while the driver package installs, keeps DKMS's
// package scripts from building: Build adds, builds or restores, and
// installs the modules itself, then removes it.
const NoAutoinstall = "/etc/dkms/no-autoinstall"

// restoreTar is where a cached archive is put in the image, and packTar
// where a fresh build's is made; both on the image's disk, both removed.
const (
	restoreTar = "/var/lib/dkms/podvm-restore.tar"
	packTar    = "/var/lib/dkms/podvm-pack.tar"
)

// exitRejected is the script's exit status for a cached archive that
// failed its checks in the image, and exitSkipped for a module DKMS does
// not build for a kernel (BUILD_EXCLUSIVE, DKMS's 77); neither is a
// status dkms itself exits with.
const (
	exitRejected = 86
	exitSkipped  = 87
)

// script is the image side, run as sh -c script podvm-dkms CMD ARGS. dkms
// itself is bash, so bash is there to read dkms.conf the way dkms does.
var script = strings.NewReplacer(
	"@RESTORE_TAR@", restoreTar,
	"@PACK_TAR@", packTar,
	"@NO_AUTOINSTALL@", NoAutoinstall,
).Replace(scriptText)

// scriptText is script with the paths it shares with this package's Go
// code as @NAME@ placeholders, so that each path is written once.
//
//go:embed scripts/dkms.sh
var scriptText string

// Command is the image-side command for one step of the module build.
func Command(args ...string) string {
	var b strings.Builder
	b.WriteString("sh -c " + shellquote.Quote(script) + " podvm-dkms")
	for _, a := range args {
		b.WriteString(" " + shellquote.Quote(a))
	}
	return b.String()
}

// Target is the image being built, reached through a Packer communicator
// or mkosi-chroot.
type Target interface {
	// Run runs a command in the image, its output shown to the user. A
	// command that ran and failed returns an error with an ExitStatus.
	Run(ctx context.Context, command string) error
	// Output runs a command in the image and returns its standard output.
	Output(ctx context.Context, command string) (string, error)
	// Upload writes the image's file path from f.
	Upload(ctx context.Context, path string, f *os.File) error
	// Download copies the image's file path to a writer from open, which
	// it may call again to start over.
	Download(ctx context.Context, path string, open func() (io.WriteCloser, error)) error
}

// exitStatuser is a failed command's error that knows its exit status.
type exitStatuser interface{ ExitCode() int }

// Pending is one DKMS module to build for one kernel.
type Pending struct {
	Name, Version, Kernel, Arch string
	// Inputs is what the build reads, one "what value" per line: the
	// cache key's text.
	Inputs string
}

func (p Pending) String() string {
	return fmt.Sprintf("%s/%s for %s (%s)", p.Name, p.Version, p.Kernel, p.Arch)
}

// ParsePending reads the script's pending report.
func ParsePending(out string) ([]Pending, error) {
	var ps []Pending
	var cur *Pending
	var inputs strings.Builder
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case cur == nil && strings.HasPrefix(line, "entry "):
			f := strings.Fields(line)
			if len(f) != 5 {
				return nil, fmt.Errorf("dkms pending report: bad line %q", line)
			}
			cur = &Pending{Name: f[1], Version: f[2], Kernel: f[3], Arch: f[4]}
			inputs.Reset()
		case cur != nil && line == "end":
			cur.Inputs = inputs.String()
			ps = append(ps, *cur)
			cur = nil
		case cur != nil:
			inputs.WriteString(line + "\n")
		case strings.TrimSpace(line) == "":
		default:
			return nil, fmt.Errorf("dkms pending report: unexpected line %q", line)
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("dkms pending report: entry %s has no end", cur)
	}
	return ps, nil
}

// Build builds the DKMS modules of the given kernels in t, restoring them
// from c where it holds a build of the same inputs and storing fresh
// builds in it. c nil: no cache, every module is built. say reports
// progress. Modules are left unsigned, for the signing step.
func Build(ctx context.Context, t Target, c *Cache, kernels []string, say func(string)) error {
	out, err := t.Output(ctx, Command(append([]string{"pending"}, kernels...)...))
	if err != nil {
		return fmt.Errorf("listing the DKMS modules to build (podvm-dkms pending): %w", err)
	}
	pending, err := ParsePending(out)
	if err != nil {
		return fmt.Errorf("listing the DKMS modules to build: %w", err)
	}
	if len(pending) == 0 {
		say("no DKMS module left to build for kernels " + strings.Join(kernels, " "))
	}
	for _, p := range pending {
		if err := buildOne(ctx, t, c, p, say); err != nil {
			return err
		}
	}
	if err := t.Run(ctx, Command("finish")); err != nil {
		return fmt.Errorf("removing %s (podvm-dkms finish): %w", NoAutoinstall, err)
	}
	return nil
}

func exitCode(err error) int {
	var es exitStatuser
	if errors.As(err, &es) {
		return es.ExitCode()
	}
	return -1
}

func buildOne(ctx context.Context, t Target, c *Cache, p Pending, say func(string)) error {
	args := []string{p.Name, p.Version, p.Kernel, p.Arch}
	if c != nil {
		got, err := restore(ctx, t, c, p, args, say)
		if err != nil || got == restored {
			return err
		}
		// Another build of the same modules (a second image built at the
		// same time) may be compiling them now: wait for it and take its
		// entry rather than compile them twice. The cache is read again
		// under the lock, waited or not: one that stored its entry
		// between the read above and the lock must be taken too, or this
		// build would install modules of its own compile while every later
		// build restores the other's, and two builds from the same inputs
		// would differ wherever the compiles do.
		unlock, err := c.Lock(ctx, p.Inputs, func() {
			say(fmt.Sprintf("module cache: another build is building %s; waiting for it", p))
		})
		if err == nil {
			defer unlock()
		}
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil:
			say(fmt.Sprintf("module cache: %v; building without it", err))
		case got == missing:
			if got, err := restore(ctx, t, c, p, args, say); err != nil || got == restored {
				return err
			}
		}
	}
	start := time.Now()
	say(fmt.Sprintf("building %s with DKMS", p))
	err := t.Run(ctx, Command(append([]string{"build"}, args...)...))
	if exitCode(err) == exitSkipped {
		say(fmt.Sprintf("skipped %s: DKMS does not build it for this kernel", p))
		return nil
	}
	if err != nil {
		return fmt.Errorf("building %s (podvm-dkms build): %w", p, err)
	}
	say(fmt.Sprintf("built %s in %s", p, time.Since(start).Round(100*time.Millisecond)))
	if c == nil {
		return nil
	}
	return store(ctx, t, c, p, args, say)
}

// restoreResult is what restore did: put the cached build in place, found
// none, or found one it could not use (the cache failed, or the entry
// failed a check).
type restoreResult int

const (
	restored restoreResult = iota
	missing
	unusable
)

// restore puts a cached build of p in place and installs it. It reports
// missing or unusable, and no error, when the cache has none, the one it
// has failed a check, or the cache failed: the caller builds then. A cache
// is only ever a shortcut.
func restore(ctx context.Context, t Target, c *Cache, p Pending, args []string, say func(string)) (restoreResult, error) {
	start := time.Now()
	key := Key(p.Inputs)
	f, err := c.Get(p.Inputs)
	if errors.Is(err, ErrCorrupt) {
		say(fmt.Sprintf("module cache: %v; removed it, building instead", err))
		return unusable, nil
	}
	if err != nil {
		say(fmt.Sprintf("module cache: reading the build of %s (key %s): %v; building instead", p, key[:16], err))
		return unusable, nil
	}
	if f == nil {
		say(fmt.Sprintf("module cache: no build of %s (key %s) in %s", p, key[:16], c.Dir))
		return missing, nil
	}
	defer f.Close()
	if err := t.Upload(ctx, restoreTar, f); err != nil {
		if ctx.Err() != nil {
			return unusable, ctx.Err()
		}
		say(fmt.Sprintf("module cache: copying the build of %s (key %s) into the image: %v; building instead", p, key[:16], err))
		clean(ctx, t, say)
		return unusable, nil
	}
	err = t.Run(ctx, Command(append([]string{"restore"}, args...)...))
	if exitCode(err) == exitRejected {
		say(fmt.Sprintf("module cache: the build of %s (key %s) in %s failed its checks in the image (see above); removed it, building instead", p, key[:16], c.Dir))
		_ = c.evict(key, nil)
		return unusable, nil
	}
	if err != nil {
		return unusable, fmt.Errorf("installing the cached build of %s (key %s in %s; podvm-dkms restore): %w", p, key[:16], c.Dir, err)
	}
	say(fmt.Sprintf("module cache: restored %s (key %s) in %s", p, key[:16], time.Since(start).Round(100*time.Millisecond)))
	return restored, nil
}

// clean removes the transfer archives from the image, best effort.
func clean(ctx context.Context, t Target, say func(string)) {
	if err := t.Run(ctx, Command("clean")); err != nil {
		say(fmt.Sprintf("module cache: removing %s and %s from the image: %v", restoreTar, packTar, err))
	}
}

// store packs a fresh build and keeps it. A failure to store costs the
// next build time, not this one: it is reported and the build goes on.
func store(ctx context.Context, t Target, c *Cache, p Pending, args []string, say func(string)) error {
	err := t.Run(ctx, Command(append([]string{"pack"}, args...)...))
	if err == nil {
		err = c.receive(func(f *os.File) error {
			err := t.Download(ctx, packTar, func() (io.WriteCloser, error) {
				if err := f.Truncate(0); err != nil {
					return nil, err
				}
				if _, err := f.Seek(0, io.SeekStart); err != nil {
					return nil, err
				}
				return nopCloser{f}, nil
			})
			if err != nil {
				return fmt.Errorf("copying it out of the image: %w", err)
			}
			if _, err := f.Seek(0, io.SeekStart); err != nil {
				return err
			}
			return c.Put(p.Inputs, f)
		})
	}
	clean(ctx, t, say)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		say(fmt.Sprintf("module cache: %s not stored: %v", p, err))
		return nil
	}
	say(fmt.Sprintf("module cache: stored %s (key %s)", p, Key(p.Inputs)[:16]))
	return nil
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }
