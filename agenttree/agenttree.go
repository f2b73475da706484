// Package agenttree checks a pod VM binaries tree on the build host before
// a build carries it into an image: a directory laid out as the image's
// root, as cloud-api-adaptor's `make podvm-binaries` exports it to
// resources/binaries-tree (its podvm/files plus the agent binaries), with
// kata-agent, agent-protocol-forwarder and process-user-data in
// /usr/local/bin and their systemd units in /etc/systemd/system, enabled by
// symlinks in multi-user.target.wants.
//
// The tree lands on the image's root as it is, links as links: the
// provisioner streams it as an archive (WriteTar), mkosi copies it as a
// skeleton tree. A link is never followed or read through on the build
// host: its target names a path in the image, which the image or its boot
// may make (CAA's /etc/kata-opa/default-policy.rego points into /run; its
// run-kata\x2dcontainers.mount wants link names a unit of CAA's mkosi
// skeleton). What stays refused, because the image would get it as it is
// or the host would leak into it: device nodes and other special files,
// setuid and setgid files, anything group- or world-writable, directories
// not 0755, a file with hard links outside the tree, and names with
// control characters. A unit that does not parse fails only at boot, so
// units are read up front too.
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
	"kata-agent enabled by a *.wants link; directories mode 0755; nothing writable by group or others, nor setuid or setgid; no device nodes, FIFOs or sockets; no file with hard links outside the tree; " +
	"links are carried as links (absolute or relative, to paths the image or its boot makes)"

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

// volatileVar are the image's links into /run: what a tree puts below
// them would land in the build's /run and be lost.
var volatileVar = []string{"/var/run", "/var/lock"}

// sectionOf is the section each unit type must have.
var sectionOf = map[string]string{
	".service": "Service", ".path": "Path", ".socket": "Socket", ".mount": "Mount",
	".timer": "Timer", ".target": "", ".automount": "Automount", ".swap": "Swap", ".slice": "",
}

// maxUnitBytes bounds a unit file: real ones are a few hundred bytes.
const maxUnitBytes = 1 << 20

// Link is a symlink of the tree, such as
// /etc/systemd/system/multi-user.target.wants/kata-agent.path -> ../kata-agent.path.
type Link struct {
	Path   string // image path of the link
	Target string // its target, as written
	// Dest is the image path the target names, joined lexically from the
	// link's directory (".." stops at the image's root, as it does in
	// the image); links on the way are not resolved, here or on the host.
	Dest string
	// InTree says that the tree has Dest, as a file or directory of its
	// own. A link without is carried all the same: the image, its
	// skeleton or its boot provides the target.
	InTree bool
}

// Tree is what Check found in a good tree.
type Tree struct {
	Dir         string   // the directory on the build host
	Executables []string // image paths of the agent programs, sorted
	Units       []string // image paths of the unit files, sorted
	Links       []Link   // enabling links in *.wants and *.requires, sorted
	Carried     []Link   // every link of the tree, sorted

	// root is Dir resolved when it was checked, and checked what Check
	// saw there, in walk order: WriteTar packs exactly these, or refuses.
	root    string
	checked []entry
}

// entry is one path of the tree as Check saw it.
type entry struct {
	img  string
	mode fs.FileMode
	id   fileID
	size int64
}

// MadeAtBoot says that the link's target is below /run: a tmpfs the
// image's boot fills (tmpfiles.d, units), never in the image itself.
func (l Link) MadeAtBoot() bool { return l.Dest == "/run" || strings.HasPrefix(l.Dest, "/run/") }

// Elsewhere are the tree's links whose targets are not in the tree:
// what the image or its boot must provide.
func (t *Tree) Elsewhere() []Link {
	var out []Link
	for _, l := range t.Carried {
		if !l.InTree {
			out = append(out, l)
		}
	}
	return out
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
	t := &Tree{Dir: dir, root: real}
	w := &walker{entries: map[string]fs.FileMode{}, inodes: map[fileID]*hardLinks{}}
	if err := t.walk(real, w); err != nil {
		return nil, err
	}
	if err := w.hardLinksInside(); err != nil {
		return nil, err
	}
	if err := t.resolveLinks(w); err != nil {
		return nil, err
	}
	if err := t.checkAgent(real); err != nil {
		return nil, err
	}
	slices.Sort(t.Units)
	byPath := func(a, b Link) int { return strings.Compare(a.Path, b.Path) }
	slices.SortFunc(t.Links, byPath)
	slices.SortFunc(t.Carried, byPath)
	return t, nil
}

// walker is what one walk of the tree has seen: every entry's type by
// image path, and the names of each file with more than one.
type walker struct {
	entries map[string]fs.FileMode
	inodes  map[fileID]*hardLinks
}

type fileID struct{ dev, ino uint64 }

type hardLinks struct {
	names []string
	nlink uint64
}

// hardLinksInside refuses a file whose hard links are not all in the
// tree: the image would get the content of a file the tree does not show,
// and the host could change it after the check.
func (w *walker) hardLinksInside() error {
	for _, h := range w.inodes {
		if uint64(len(h.names)) < h.nlink {
			slices.Sort(h.names)
			return refuse("%s has %d hard links, %d of them outside the tree: copy the file instead of linking it", h.names[0], h.nlink, h.nlink-uint64(len(h.names)))
		}
	}
	return nil
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
// collects the units and links.
func (t *Tree) walk(root string, w *walker) error {
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
		for _, v := range volatileVar {
			if img == v || strings.HasPrefix(img, v+"/") {
				return refuse("it has %s: in the image %s is a link into /run, a tmpfs made anew at boot, so nothing below it lasts; put it below /etc or /usr, or make it at boot (tmpfiles.d)", img, v)
			}
		}
		info, err := d.Info()
		if err != nil {
			return refuse("cannot look at %s: %v", img, err)
		}
		m := info.Mode()
		w.entries[img] = m.Type()
		id, _, _ := fileIdentity(info)
		t.checked = append(t.checked, entry{img: img, mode: m, id: id, size: info.Size()})
		switch {
		case m.IsDir():
			if m.Perm() != 0o755 || m&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != 0 {
				return refuse("directory %s has mode %04o: the upload gives its mode to the image's directory of that name (/etc, /usr, ...), so every directory must be 0755", img, uint32(m.Perm()))
			}
		case m&fs.ModeSymlink != 0:
			return t.link(p, img)
		case m.IsRegular():
			if m.Perm()&0o022 != 0 || m&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
				return refuse("%s has mode %04o: no file may be writable by group or others, nor setuid or setgid", img, uint32(m.Perm()|m&(fs.ModeSetuid|fs.ModeSetgid)))
			}
			if id, nlink, ok := fileIdentity(info); ok && nlink > 1 {
				h := w.inodes[id]
				if h == nil {
					h = &hardLinks{nlink: nlink}
					w.inodes[id] = h
				}
				h.names = append(h.names, img)
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

// link records a symlink: its target must be a clean name; where it
// points is settled once the whole tree is known (resolveLinks).
func (t *Tree) link(p, img string) error {
	target, err := os.Readlink(p)
	if err != nil {
		return refuse("cannot read the link %s: %v", img, err)
	}
	if err := inputcheck.Text(target, inputcheck.MaxImagePath); err != nil {
		return refuse("the link %s has a target that is not a clean name: %v", img, err)
	}
	dest := path.Clean(target)
	if !path.IsAbs(target) {
		dest = path.Join(path.Dir(img), target)
	}
	t.Carried = append(t.Carried, Link{Path: img, Target: target, Dest: dest})
	return nil
}

// resolveLinks marks the links whose targets the tree has, and collects
// the enabling links: in a *.wants or *.requires directory of a unit
// directory, named as a unit. An enabling link to something of the tree
// must name one of its unit files; one to a path the tree lacks enables
// a unit of the image's own or its skeleton's.
func (t *Tree) resolveLinks(w *walker) error {
	for i := range t.Carried {
		l := &t.Carried[i]
		kind, ok := w.entries[l.Dest]
		l.InTree = ok && kind&fs.ModeSymlink == 0
		dir := path.Dir(l.Path)
		if !isUnitDir(path.Dir(dir)) || !(strings.HasSuffix(dir, ".wants") || strings.HasSuffix(dir, ".requires")) {
			continue
		}
		if _, unit := sectionOf[path.Ext(l.Path)]; !unit {
			return refuse("the link %s in %s is not named as a unit (.service, .path, .mount, ...)", l.Path, dir)
		}
		if ok && (!kind.IsRegular() || !isUnitPath(l.Dest)) {
			return refuse("the link %s enables %s, which is not a unit file of the tree", l.Path, l.Target)
		}
		t.Links = append(t.Links, *l)
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
