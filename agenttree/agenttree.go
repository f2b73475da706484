// Package agenttree checks a pod VM binaries tree on the build host before
// a build copies it into an image: a directory laid out as the image's
// root, as cloud-api-adaptor's `make podvm-binaries` exports it to
// resources/binaries-tree (its podvm/files plus the agent binaries), with
// kata-agent, agent-protocol-forwarder and process-user-data in
// /usr/local/bin and their systemd units in /etc/systemd/system, enabled by
// relative symlinks in multi-user.target.wants.
//
// The tree lands on the image's root as it is: the chroot upload keeps its
// modes and links, the SSH upload follows links on the build host. So a
// directory's mode replaces the image's own (/etc, /usr), a link that
// points outside the tree would copy a file of the build host, and a
// unit that does not parse fails only at boot. Check refuses all of these
// up front, saying what is wrong and what is allowed.
package agenttree

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/podvm-gpu/packer-plugin-podvm/inputcheck"
)

// Allowed says what a binaries tree must be, for errors and the docs.
const Allowed = "a directory on the build host laid out as the image's root, as cloud-api-adaptor's `make podvm-binaries` exports to resources/binaries-tree: " +
	"executable /usr/local/bin/kata-agent, agent-protocol-forwarder and process-user-data; their units in etc/systemd/system or usr/lib/systemd/system, " +
	"kata-agent enabled by a *.wants link; directories mode 0755; nothing writable by group or others, nor setuid; links relative and inside the tree"

// Executables are the agent stack's programs that every tree must hold.
var Executables = []string{
	"/usr/local/bin/kata-agent",
	"/usr/local/bin/agent-protocol-forwarder",
	"/usr/local/bin/process-user-data",
}

// RequiredUnits are the units of those programs.
var RequiredUnits = []string{
	"kata-agent.service",
	"agent-protocol-forwarder.service",
	"process-user-data.service",
}

// UnitDirs are where a tree's units live, as image paths.
var UnitDirs = []string{"/etc/systemd/system", "/usr/lib/systemd/system"}

// refusedTop are top-level names a tree must not have: merged-/usr links
// in the image (a directory here would replace them) and the kernel's and
// systemd's runtime file systems, which nothing may carry into an image.
var refusedTop = []string{"bin", "sbin", "lib", "lib32", "lib64", "libx32", "boot", "dev", "proc", "sys", "run", "tmp"}

// sectionOf is the section each unit type must have.
var sectionOf = map[string]string{
	".service": "Service", ".path": "Path", ".socket": "Socket", ".mount": "Mount",
	".timer": "Timer", ".target": "", ".automount": "Automount", ".swap": "Swap", ".slice": "",
}

// maxUnitBytes bounds a unit file: real ones are a few hundred bytes.
const maxUnitBytes = 1 << 20

// Link is an enabling symlink of the tree, such as
// /etc/systemd/system/multi-user.target.wants/kata-agent.path -> ../kata-agent.path.
type Link struct {
	Path   string // image path of the link
	Target string // its target, as written (relative)
}

// Tree is what Check found in a good tree.
type Tree struct {
	Dir         string   // the directory on the build host
	Executables []string // image paths of the agent programs, sorted
	Units       []string // image paths of the unit files, sorted
	Links       []Link   // enabling links in *.wants and *.requires, sorted
}

// Enabled names the units the tree's links enable, sorted: the link names.
func (t *Tree) Enabled() []string {
	var out []string
	for _, l := range t.Links {
		out = append(out, path.Base(l.Path))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func refuse(format string, args ...any) error {
	return &inputcheck.Error{Problem: fmt.Sprintf(format, args...), Allowed: Allowed}
}

// Check looks at dir and returns what it holds, or an *inputcheck.Error
// that says what is wrong. It only reads.
func Check(dir string) (*Tree, error) {
	if err := inputcheck.HostPath(dir); err != nil {
		return nil, err
	}
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, refuse("no such directory")
	case err != nil:
		return nil, refuse("cannot look at it: %v", err)
	case !fi.IsDir():
		return nil, refuse("a %s, not a directory", inputcheck.FileKind(fi.Mode()))
	}
	top, err := os.ReadDir(dir)
	if err != nil {
		return nil, refuse("cannot read it: %v", err)
	}
	if len(top) == 0 {
		return nil, refuse("an empty directory")
	}
	if err := checkTop(top); err != nil {
		return nil, err
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, refuse("cannot resolve it: %v", err)
	}
	t := &Tree{Dir: dir}
	if err := t.walk(real); err != nil {
		return nil, err
	}
	if err := t.checkAgent(real); err != nil {
		return nil, err
	}
	slices.Sort(t.Units)
	slices.SortFunc(t.Links, func(a, b Link) int { return strings.Compare(a.Path, b.Path) })
	return t, nil
}

// checkTop refuses what a root tree cannot have at its top.
func checkTop(top []fs.DirEntry) error {
	for _, e := range top {
		name := e.Name()
		if slices.Contains(refusedTop, name) {
			return refuse("it has /%s at its top, which the image keeps as its own (a merged-/usr link or a runtime file system); put files below /usr, /etc or /opt", name)
		}
		// CAA's tree carries a hidden placeholder file at its top.
		if !e.IsDir() && !strings.HasPrefix(name, ".") {
			return refuse("%s at its top is a %s: a root tree holds directories there (etc, usr, opt, ...)", name, inputcheck.FileKind(e.Type()))
		}
	}
	return nil
}

// walk checks every entry's type, mode and name, follows nothing, and
// collects the units and enabling links.
func (t *Tree) walk(root string) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return refuse("cannot read %s: %v", p, err)
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return refuse("%s: %v", p, err)
		}
		img := path.Clean("/" + filepath.ToSlash(rel))
		if err := inputcheck.Text(img, inputcheck.MaxImagePath); err != nil {
			return refuse("a file name %s: %v", strings.ToValidUTF8(img, "?"), err)
		}
		info, err := d.Info()
		if err != nil {
			return refuse("cannot look at %s: %v", img, err)
		}
		m := info.Mode()
		switch {
		case m.IsDir():
			if m.Perm() != 0o755 || m&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != 0 {
				return refuse("directory %s has mode %04o: the upload gives its mode to the image's directory of that name (/etc, /usr, ...), so every directory must be 0755", img, uint32(m.Perm()))
			}
		case m&fs.ModeSymlink != 0:
			return t.link(root, p, img)
		case m.IsRegular():
			if m.Perm()&0o022 != 0 || m&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
				return refuse("%s has mode %04o: no file may be writable by group or others, nor setuid or setgid", img, uint32(m.Perm()|m&(fs.ModeSetuid|fs.ModeSetgid)))
			}
			if isUnitPath(img) {
				if err := checkUnit(p, img, info.Size()); err != nil {
					return err
				}
				t.Units = append(t.Units, img)
			}
		default:
			return refuse("%s is a %s: a tree holds directories, regular files and symlinks only", img, inputcheck.FileKind(m))
		}
		return nil
	})
}

// link checks a symlink: relative, inside the tree and to something there,
// as the SSH upload reads its target on the build host. Links in a *.wants
// or *.requires directory of a unit directory enable units.
func (t *Tree) link(root, p, img string) error {
	target, err := os.Readlink(p)
	if err != nil {
		return refuse("cannot read the link %s: %v", img, err)
	}
	if err := inputcheck.Text(target, inputcheck.MaxImagePath); err != nil {
		return refuse("the link %s has a target that is not a clean name: %v", img, err)
	}
	if path.IsAbs(target) {
		return refuse("the link %s points to %s, an absolute path: an SSH upload would copy that file of the build host; make it relative, such as ../kata-agent.path", img, target)
	}
	// Joined relative to the tree's top, so that ".." above it shows.
	dest := path.Join(path.Dir(strings.TrimPrefix(img, "/")), target)
	if strings.HasPrefix(dest, "../") || dest == ".." {
		return refuse("the link %s points to %s, outside the tree", img, target)
	}
	st, err := os.Stat(filepath.Join(root, filepath.FromSlash(dest)))
	if err != nil {
		return refuse("the link %s points to %s, which is not in the tree", img, target)
	}
	dir := path.Dir(img)
	if isUnitDir(path.Dir(dir)) && (strings.HasSuffix(dir, ".wants") || strings.HasSuffix(dir, ".requires")) {
		if !st.Mode().IsRegular() || !isUnitPath("/"+dest) {
			return refuse("the link %s enables %s, which is not a unit file of the tree", img, target)
		}
		t.Links = append(t.Links, Link{Path: img, Target: target})
	}
	return nil
}

func isUnitDir(dir string) bool { return slices.Contains(UnitDirs, dir) }

// isUnitPath says whether img is a unit file: a known suffix, directly in
// a unit directory.
func isUnitPath(img string) bool {
	_, ok := sectionOf[path.Ext(img)]
	return ok && isUnitDir(path.Dir(img))
}

// checkUnit reads a unit file as systemd's parser would: every line empty,
// a comment, a [Section] header or a Key=value inside a section, with the
// section its type needs.
func checkUnit(p, img string, size int64) error {
	if size > maxUnitBytes {
		return refuse("unit %s is %d bytes, more than a unit file's %d", img, size, maxUnitBytes)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return refuse("cannot read unit %s: %v", img, err)
	}
	if bytes.IndexByte(b, 0) >= 0 {
		return refuse("unit %s is not text", img)
	}
	sections := map[string]bool{}
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), maxUnitBytes)
	continued := false
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		wasContinued := continued
		continued = strings.HasSuffix(line, "\\")
		switch {
		case wasContinued, line == "", line[0] == '#', line[0] == ';':
		case line[0] == '[':
			if !strings.HasSuffix(line, "]") || len(line) < 3 {
				return refuse("unit %s, line %d: a broken section header %q", img, n, line)
			}
			section = line[1 : len(line)-1]
			sections[section] = true
		case section == "":
			return refuse("unit %s, line %d: %q comes before any [Section]", img, n, line)
		case !strings.Contains(line, "=") || strings.HasPrefix(line, "="):
			return refuse("unit %s, line %d: %q is not Key=value", img, n, line)
		}
	}
	if err := sc.Err(); err != nil {
		return refuse("unit %s: %v", img, err)
	}
	if want := sectionOf[path.Ext(img)]; want != "" && !sections[want] {
		return refuse("unit %s has no [%s] section", img, want)
	}
	if len(sections) == 0 {
		return refuse("unit %s has no sections", img)
	}
	return nil
}

// checkAgent requires the agent stack: its programs, executable, and its
// units, with kata-agent enabled.
func (t *Tree) checkAgent(root string) error {
	for _, e := range Executables {
		fi, err := os.Lstat(filepath.Join(root, filepath.FromSlash(e)))
		switch {
		case err != nil:
			return refuse("it has no %s", e)
		case !fi.Mode().IsRegular():
			return refuse("%s is a %s, not a regular file", e, inputcheck.FileKind(fi.Mode()))
		case fi.Mode().Perm()&0o111 != 0o111:
			return refuse("%s has mode %04o: it must be executable (0755)", e, uint32(fi.Mode().Perm()))
		}
		t.Executables = append(t.Executables, e)
	}
	for _, u := range RequiredUnits {
		if !slices.ContainsFunc(t.Units, func(p string) bool { return path.Base(p) == u }) {
			return refuse("it has no unit %s in %s", u, strings.Join(UnitDirs, " or "))
		}
	}
	enabled := t.Enabled()
	if !slices.Contains(enabled, "kata-agent.service") && !slices.Contains(enabled, "kata-agent.path") {
		return refuse("nothing enables kata-agent: no *.wants link to kata-agent.path or kata-agent.service")
	}
	return nil
}
