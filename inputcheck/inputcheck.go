// Package inputcheck owns the checks of paths and strings that users hand
// to the build: every String and List setting of package settings' table
// and the podvm-rootfs builder's own settings pass through it.
//
// Those values reach systemd units, shell scripts, apt and mkosi
// configuration files and the build host's file system. A control
// character ends a unit line and starts another (Environment=, What=), a
// quote or $ escapes a script's quoting, % is a systemd specifier, and a
// path such as /etc or /run/systemd names a directory that the image needs
// and a build step would replace. The checks here refuse these before
// anything runs, with an error that says what is wrong and what is allowed.
//
// The checks are pure except HostDir, which looks at the build host's file
// system (it never changes it).
package inputcheck

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"unicode"
	"unicode/utf8"
)

// Length caps. Linux's PATH_MAX is 4096 bytes, the longest path a system
// call takes; an image path reaches units and scripts as one line, and
// 1024 bytes is far above any real one. MaxText bounds the other strings
// (versions, names, URLs), which are short.
const (
	MaxHostPath  = 4096
	MaxImagePath = 1024
	MaxText      = 4096
)

// Error is a refused value: what is wrong with it and what is allowed
// instead. Callers that name the setting themselves (settings.ValueError)
// read the two parts with errors.As.
type Error struct {
	Problem string // what is wrong, e.g. "a system directory of the image"
	Allowed string // what would be accepted
}

func (e *Error) Error() string {
	if e.Allowed == "" {
		return e.Problem
	}
	return e.Problem + "; allowed: " + e.Allowed
}

func refuse(allowed, format string, args ...any) error {
	return &Error{Problem: fmt.Sprintf(format, args...), Allowed: allowed}
}

// Text checks a string that may reach a unit, a script or a config file:
// valid UTF-8, no control character (C0 including tab, CR and LF, DEL, or
// C1), at most max bytes (MaxText when max <= 0).
func Text(s string, max int) error {
	if max <= 0 {
		max = MaxText
	}
	const allowed = "printable text on one line"
	if len(s) > max {
		return refuse(allowed, "%d bytes long, more than the %d allowed", len(s), max)
	}
	if !utf8.ValidString(s) {
		return refuse(allowed+", in UTF-8", "not valid UTF-8")
	}
	for i, r := range s {
		// unicode.IsControl covers C0, DEL and C1. Line and paragraph
		// separators end a line for some readers too.
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			return refuse(allowed, "control character %U at byte %d", r, i)
		}
	}
	return nil
}

// HostPath checks a path on the build host: Text with a cap of
// MaxHostPath bytes, and not empty. Any other character is allowed, as the
// build passes host paths to system calls, never to a shell.
func HostPath(p string) error {
	if p == "" {
		return refuse("a file path on the machine running the build", "empty")
	}
	return Text(p, MaxHostPath)
}

// imagePathChars are refused in image paths: they reach systemd units (%
// is a specifier, a space separates words, a backslash escapes) and shell
// scripts (quotes, $, backtick) that name the path.
const imagePathChars = " '\"\\$`%"

// ImagePath checks an absolute path inside the image: Text with a cap of
// MaxImagePath bytes, absolute and clean (no //, . or .. elements, no
// trailing /), not / itself, and none of the characters that units or
// scripts would read as syntax: space, quotes, backslash, $, backtick, %.
func ImagePath(p string) error {
	const allowed = "an absolute, clean path other than / without spaces, quotes, backslashes, $, ` or %"
	if err := Text(p, MaxImagePath); err != nil {
		return err
	}
	switch {
	case p == "":
		return refuse(allowed, "empty")
	case !path.IsAbs(p):
		return refuse(allowed, "not an absolute path")
	case p == "/":
		return refuse(allowed, "the image's root directory")
	case path.Clean(p) != p:
		return refuse(allowed, "not clean (it would read as %s)", path.Clean(p))
	}
	if i := strings.IndexAny(p, imagePathChars); i >= 0 {
		return refuse(allowed, "character %q at byte %d", p[i], i)
	}
	return nil
}

// DataRoots are the directories below which ImageDataDir accepts a data
// directory of the build's own: the FHS places for add-on packages and
// site or state data that no distribution package owns as a whole.
var DataRoots = []string{"/opt", "/srv", "/var/lib", "/var/opt", "/var/local", "/usr/local/share"}

// systemDirs are the image's FHS and distribution directories. None of
// them may be a build's own directory: a step that replaces that
// directory (the repository's swap removes the previous one) would remove
// the system's. Each of DataRoots is among them.
var systemDirs = []string{
	"/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32",
	"/lost+found", "/media", "/mnt", "/opt", "/proc", "/root", "/run", "/sbin", "/srv",
	"/sys", "/tmp", "/usr", "/var",
	"/usr/bin", "/usr/games", "/usr/include", "/usr/lib", "/usr/lib32", "/usr/lib64",
	"/usr/libexec", "/usr/libx32", "/usr/local", "/usr/sbin", "/usr/share", "/usr/src",
	"/usr/local/bin", "/usr/local/etc", "/usr/local/games", "/usr/local/include",
	"/usr/local/lib", "/usr/local/sbin", "/usr/local/share", "/usr/local/src",
	"/var/backups", "/var/cache", "/var/lib", "/var/local", "/var/lock", "/var/log",
	"/var/mail", "/var/opt", "/var/run", "/var/spool", "/var/tmp",
	// Directories of packages that live below the data roots.
	"/var/lib/apt", "/var/lib/dpkg", "/var/lib/systemd", "/var/lib/dkms", "/var/lib/kubelet",
	"/var/lib/containerd", "/var/lib/docker", "/var/cache/apt", "/var/cache/debconf",
	"/usr/local/lib/python3", "/usr/local/share/ca-certificates",
}

// volatileRoots hold kernel interfaces, runtime state or temporary files:
// nothing below them outlives a boot (or the build), so a data directory
// there is lost or shadowed.
var volatileRoots = []string{"/proc", "/sys", "/dev", "/run", "/var/run", "/var/lock", "/tmp", "/var/tmp"}

// Below reports whether p is root or lies below it. Both are clean
// absolute paths.
func Below(p, root string) bool {
	return p == root || strings.HasPrefix(p, strings.TrimSuffix(root, "/")+"/")
}

// belowAny returns the first of roots that p is or lies below, or "".
func belowAny(p string, roots []string) string {
	for _, r := range roots {
		if Below(p, r) {
			return r
		}
	}
	return ""
}

// IsSystemDir reports whether p (a clean absolute path) is / or one of the
// image's FHS or distribution directories.
func IsSystemDir(p string) bool {
	if p == "/" {
		return true
	}
	for _, d := range systemDirs {
		if p == d {
			return true
		}
	}
	return false
}

// ImageDataDir checks a directory the build creates and owns in the image,
// one it may remove and replace whole: ImagePath, and a directory of its
// own below one of DataRoots (such as /opt/local-packages), never a system
// directory and never below /proc, /sys, /dev, /run, /tmp or /var/tmp.
func ImageDataDir(p string) error {
	allowed := "a directory of its own below " + strings.Join(DataRoots, ", ") + ", such as /opt/local-packages"
	if err := ImagePath(p); err != nil {
		return err
	}
	if r := belowAny(p, volatileRoots); r != "" {
		return refuse(allowed, "below %s, which does not keep files", r)
	}
	if IsSystemDir(p) {
		return refuse(allowed, "a system directory of the image")
	}
	if belowAny(p, DataRoots) == "" {
		return refuse(allowed, "not below an allowed root")
	}
	for _, d := range systemDirs {
		if Below(p, d) && p != d && belowAny(d, DataRoots) != "" && !IsDataRoot(d) {
			return refuse(allowed, "inside %s, which a system package owns", d)
		}
	}
	return nil
}

// IsDataRoot reports whether p is one of DataRoots.
func IsDataRoot(p string) bool {
	for _, r := range DataRoots {
		if p == r {
			return true
		}
	}
	return false
}

// ImageFileIn checks a file the build writes in the image: ImagePath, a
// file directly in one of dirs (not in a subdirectory of it), with a base
// name ending in ext (when ext is not empty) that is more than ext.
func ImageFileIn(p, ext string, dirs ...string) error {
	allowed := "a file in " + strings.Join(dirs, " or ")
	if ext != "" {
		allowed = "a file named *" + ext + " in " + strings.Join(dirs, " or ")
	}
	if err := ImagePath(p); err != nil {
		return err
	}
	in := false
	for _, d := range dirs {
		in = in || path.Dir(p) == d
	}
	if !in {
		return refuse(allowed, "not directly in %s", strings.Join(dirs, " or "))
	}
	if ext != "" && (!strings.HasSuffix(p, ext) || path.Base(p) == ext) {
		return refuse(allowed, "its name does not end in %s", ext)
	}
	return nil
}

// RunOwned are the directories below /run that systemd, D-Bus, the
// container runtimes, kata and the NVIDIA GPU Operator create and use at
// run time. A mount over one of them, or over a directory above one,
// hides live sockets and state from the services that own them.
var RunOwned = []string{
	"/run/systemd", "/run/dbus", "/run/lock", "/run/user", "/run/udev", "/run/mount",
	"/run/log", "/run/shm", "/run/credentials", "/run/initramfs", "/run/sshd", "/run/netns",
	"/run/containerd", "/run/crio", "/run/docker", "/run/runc", "/run/kubernetes", "/run/flannel",
	"/run/cloud-init", "/run/kata-containers", "/run/kata-agent", "/run/peerpod",
	"/run/nvidia/driver", "/run/nvidia/validations", "/run/nvidia/toolkit", "/run/nvidia/mps",
	"/run/nvidia/mig-manager", "/run/nvidia-persistenced", "/run/nvidia-fabricmanager",
	"/run/nvidia-container-toolkit",
}

// ImageRunDir checks a directory of the build's own below /run, a tmpfs
// that holds only what services create at boot, such as a mount point:
// ImagePath, strictly below /run, not /run/nvidia (the GPU Operator's
// root), and neither one of RunOwned, inside one, nor above one.
func ImageRunDir(p string) error {
	const allowed = "a new directory of its own below /run or /run/nvidia, such as /run/nvidia/local-packages, not one that systemd, a container runtime, kata or the GPU Operator uses"
	if err := ImagePath(p); err != nil {
		return err
	}
	if !Below(p, "/run") || p == "/run" {
		return refuse(allowed, "not below /run")
	}
	if p == "/run/nvidia" {
		return refuse(allowed, "the GPU Operator's own directory")
	}
	for _, d := range RunOwned {
		if Below(p, d) {
			return refuse(allowed, "inside %s, which a service of the image uses", d)
		}
		if Below(d, p) {
			return refuse(allowed, "above %s, which a service of the image uses", d)
		}
	}
	return nil
}

// HostDir checks a directory on the build host that the build writes into
// at its end, creating it where missing: HostPath, then what the file
// system says now. It exists and is a directory (links followed), or it is
// missing and its nearest existing ancestor is a directory. Refused up
// front, so that a long build does not fail at its last step: a dangling
// symlink, a symlink loop, a path below a regular file, and anything that
// is or resolves below /proc, /sys or /dev. HostDir only looks.
func HostDir(p string) error {
	const allowed = "a directory on the machine running the build (created if missing; not an existing file, a dangling link or a path in /proc, /sys or /dev)"
	if err := HostPath(p); err != nil {
		return err
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return refuse(allowed, "cannot make it absolute: %v", err)
	}
	// Walk up to the nearest ancestor that exists; what lies below it is
	// created by the build.
	existing := abs
	for {
		fi, err := os.Stat(existing)
		if err == nil {
			if !fi.IsDir() {
				if existing == abs {
					return refuse(allowed, "an existing %s, not a directory", FileKind(fi.Mode()))
				}
				return refuse(allowed, "below %s, which is a %s, not a directory", existing, FileKind(fi.Mode()))
			}
			break
		}
		switch {
		case errors.Is(err, syscall.ELOOP):
			return refuse(allowed, "%s is a symlink loop", existing)
		case errors.Is(err, syscall.ENOTDIR):
			// A later element of the walk finds the file.
		case errors.Is(err, fs.ErrNotExist):
			if _, lerr := os.Lstat(existing); lerr == nil {
				return refuse(allowed, "%s is a symlink to nothing", existing)
			}
		default:
			return refuse(allowed, "cannot look at %s: %v", existing, err)
		}
		parent := filepath.Dir(existing)
		if parent == existing {
			return refuse(allowed, "no part of it exists")
		}
		existing = parent
	}
	real, err := filepath.EvalSymlinks(existing)
	if err != nil {
		return refuse(allowed, "cannot resolve %s: %v", existing, err)
	}
	for _, r := range []string{"/proc", "/sys", "/dev"} {
		if Below(real, r) || Below(abs, r) {
			return refuse(allowed, "in %s, a kernel file system", r)
		}
	}
	return nil
}

// FileKind names the type of a file for a message: "regular file",
// "directory", "character device", "FIFO"...
func FileKind(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "regular file"
	case m.IsDir():
		return "directory"
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	case m&fs.ModeNamedPipe != 0:
		return "FIFO"
	case m&fs.ModeSocket != 0:
		return "socket"
	}
	return "special file"
}
