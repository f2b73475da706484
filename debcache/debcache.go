// Package debcache keeps downloaded .deb files on the build host, named by
// their SHA256, so that builds which install the same packages into a
// chroot fetch each one once. Before apt runs, the files it is about to
// download are placed in its archive directory, each checked against the
// hash the archive's signed index gives for it; after apt has run, what it
// downloaded is kept.
//
// apt takes a file already in its archive directory on its size alone,
// which is why nothing goes there unverified. Files are written to a
// temporary name and renamed into place and never changed after that, so
// builds running at the same time share the store without locks.
//
// Everything apt in the image reports (file names, sizes, versions,
// hashes) is the image's word and may be hostile: each is checked before
// it becomes part of a host path, files in the image are reached relative
// to its archive directory without following links, and the store obeys
// the build cache's trust rules (package cachedir).
package debcache

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podvm-gpu/packer-plugin-podvm/cachedir"
	"github.com/podvm-gpu/packer-plugin-podvm/shellquote"
)

// layout names the on-disk format; a new one starts an empty directory.
const layout = "v1"

const (
	tmpPrefix = ".tmp-"
	staleTmp  = time.Hour
)

// maxDeb bounds one package: the largest in Debian's archive are a few
// hundred MiB, so a size above this from the image is a lie.
const maxDeb = 8 << 30

// Store is a directory of .deb files named <sha256>.deb.
type Store struct {
	Dir string
	// MaxSize bounds the files' total size; the least recently used go
	// first. 0: no bound.
	MaxSize int64
	// root is the build cache directory Dir is below: every level from
	// it down is checked (cachedir.OpenDir) before the store is used.
	root string
}

// New returns the store below root, the build cache directory
// (cachedir.Root).
func New(root string, maxSize int64) *Store {
	return &Store{Dir: filepath.Join(root, "debs", layout), MaxSize: maxSize, root: root}
}

// open opens the store's directory after checking every level from the
// cache root down; with create, missing levels are made.
func (s *Store) open(create bool) (*os.File, error) {
	root := s.root
	if root == "" {
		root = s.Dir
	}
	d, err := cachedir.OpenDir(root, s.Dir, create)
	if err != nil {
		return nil, fmt.Errorf("deb cache: %w", err)
	}
	return d, nil
}

// Want is one file apt is about to download, as apt-get --print-uris
// reports it, with the SHA256 the archive's index gives for it.
type Want struct {
	URI    string
	File   string // the name in apt's archive directory
	Size   int64
	SHA256 string
	// Name and Version, read from File, find its index record.
	Name, Version string
}

var printURIRe = regexp.MustCompile(`^'([^']+)' (\S+) ([0-9]+) ?(.*)$`)

// Everything a Want holds comes from apt in the image, which may be
// hostile: these say what a real apt prints. The file name is
// <name>_<version>_<arch>.deb with the version's ':' written %3a; names
// and versions use the characters Debian policy 5.6.1 and 5.6.12 allow
// (a one-character name is let through: it names nothing outside).
var (
	debFileRe = regexp.MustCompile(`^([a-z0-9][a-z0-9+.-]*)_([0-9A-Za-z][0-9A-Za-z.+~%-]*)_([a-z0-9-]+)\.deb$`)
	versionRe = regexp.MustCompile(`^[0-9A-Za-z][0-9A-Za-z.+~:-]*$`)
)

// maxFileName is the longest file name most Linux file systems take.
const maxFileName = 255

// validSHA256 reports whether s is a SHA256 as hex.EncodeToString writes
// it: 64 lower-case hex digits, so "<s>.deb" names a file in the store and
// nothing else.
func validSHA256(s string) bool {
	if len(s) != sha256.Size*2 {
		return false
	}
	for _, r := range s {
		if (r < '0' || r > '9') && (r < 'a' || r > 'f') {
			return false
		}
	}
	return true
}

// check says why w, read from the image, may not be stored or placed, or
// nil: its file name becomes a name in apt's archive directory, its hash
// a name in the store, and its size bounds what is copied.
func (w Want) check() error {
	switch {
	case len(w.File) > maxFileName || !debFileRe.MatchString(w.File):
		return fmt.Errorf("file name %q is not a package file name", w.File)
	case !validSHA256(w.SHA256):
		return fmt.Errorf("%s: %q is not a SHA256", w.File, w.SHA256)
	case w.Size <= 0 || w.Size > maxDeb:
		return fmt.Errorf("%s: size %d out of range", w.File, w.Size)
	}
	return nil
}

// ParsePrintURIs reads apt-get -qq --print-uris output. apt prints at most
// an MD5 sum there, so the SHA256 comes from the index (ShowArgs,
// AddHashes).
func ParsePrintURIs(out string) ([]Want, error) {
	var ws []Want
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		m := printURIRe.FindStringSubmatch(line)
		if m == nil {
			return nil, fmt.Errorf("apt-get --print-uris: unexpected line %q", line)
		}
		// A file this cannot cache (not a package file name, a size out
		// of range) is left to apt, which downloads and checks it.
		f := debFileRe.FindStringSubmatch(m[2])
		if f == nil {
			continue
		}
		size, err := strconv.ParseInt(m[3], 10, 64)
		if err != nil {
			continue
		}
		w := Want{URI: m[1], File: m[2], Size: size, Name: f[1], Version: strings.ReplaceAll(f[2], "%3a", ":")}
		if len(w.File) > maxFileName || size <= 0 || size > maxDeb || !versionRe.MatchString(w.Version) {
			continue
		}
		ws = append(ws, w)
	}
	return ws, sc.Err()
}

// ShowArgs are the arguments of the apt-cache show that gives the index
// records of ws.
func ShowArgs(ws []Want) []string {
	var args []string
	for _, w := range ws {
		args = append(args, w.Name+"="+w.Version)
	}
	return args
}

// AddHashes fills each want's SHA256 from apt-cache show's records, the
// one whose Filename its URI ends with and whose Size it has; wants with
// no such record are left out: they cannot be checked, so they are not
// cached.
func AddHashes(ws []Want, show string) []Want {
	type rec struct{ file, size, sha string }
	var recs []rec
	for _, para := range strings.Split(show, "\n\n") {
		var r rec
		for _, l := range strings.Split(para, "\n") {
			k, v, ok := strings.Cut(l, ": ")
			if !ok {
				continue
			}
			switch k {
			case "Filename":
				r.file = v
			case "Size":
				r.size = v
			case "SHA256":
				// apt prints lower case; any case is the same hash.
				r.sha = strings.ToLower(strings.TrimSpace(v))
			}
		}
		// The hash names a file in the store: anything but a SHA256
		// (such as "../../victim") leaves the package uncached.
		if r.file != "" && validSHA256(r.sha) {
			recs = append(recs, r)
		}
	}
	var out []Want
	for _, w := range ws {
		// apt escapes the URI ('+' as %2b, ':' as %3a) but not Filename:
		// most of Debian's updates have a '+' in their version.
		uri, err := url.PathUnescape(w.URI)
		if err != nil {
			continue
		}
		for _, r := range recs {
			if strings.HasSuffix(uri, "/"+r.file) && r.size == strconv.FormatInt(w.Size, 10) {
				w.SHA256 = r.sha
				out = append(out, w)
				break
			}
		}
	}
	return out
}

func (s *Store) path(sum string) string { return filepath.Join(s.Dir, sum+".deb") }

// openImageDir opens dir, apt's archive directory in the image, resolved
// on this host. Files in it are then reached relative to the descriptor,
// without following links, so code in the image that moves things around
// cannot turn a name into a host path.
func openImageDir(dir string) (*os.File, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("deb cache: apt's archive directory: %w", &fs.PathError{Op: "open", Path: dir, Err: err})
	}
	return os.NewFile(uintptr(fd), dir), nil
}

// Seed places every wanted file the store holds in dir, apt's archive
// directory, after checking its hash; a stored file that fails the check
// is removed. It returns how many files and bytes it placed. Wants that
// fail their checks are skipped.
func (s *Store) Seed(wants []Want, dir string) (n int, bytes int64, err error) {
	top, err := s.open(false)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	defer top.Close()
	img, err := openImageDir(dir)
	if err != nil {
		return 0, 0, err
	}
	defer img.Close()
	for _, w := range wants {
		if w.check() != nil {
			continue
		}
		var st unix.Stat_t
		if unix.Fstatat(int(img.Fd()), w.File, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			continue // apt has it already
		}
		ok, err := s.place(top, img, w)
		if err != nil {
			return n, bytes, err
		}
		if ok {
			n++
			bytes += w.Size
		}
	}
	return n, bytes, nil
}

// place copies the stored file of w from top, the store's directory, to
// img, apt's archive directory, verified as it is copied.
func (s *Store) place(top, img *os.File, w Want) (bool, error) {
	name := w.SHA256 + ".deb"
	src, err := cachedir.OpenFileAt(top, name, maxDeb)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if errors.Is(err, cachedir.ErrUntrusted) {
		// A link, a FIFO or a file another user may write: gone from the
		// store (a link is removed, never its target), and apt downloads.
		_ = unix.Unlinkat(int(top.Fd()), name, 0)
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("deb cache: %w", err)
	}
	defer src.Close()
	// img is the image's: O_EXCL|O_NOFOLLOW, so a link planted there is
	// never followed out of the tree (unlink drops a link, not its
	// target).
	tmp := w.File + ".podvm-partial"
	_ = unix.Unlinkat(int(img.Fd()), tmp, 0)
	fd, err := unix.Openat(int(img.Fd()), tmp, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return false, fmt.Errorf("deb cache: %w", &fs.PathError{Op: "create", Path: filepath.Join(img.Name(), tmp), Err: err})
	}
	out := os.NewFile(uintptr(fd), filepath.Join(img.Name(), tmp))
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(out, h), io.LimitReader(src, w.Size+1))
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = unix.Unlinkat(int(img.Fd()), tmp, 0)
		return false, fmt.Errorf("deb cache: copying %s: %w", w.File, err)
	}
	if hex.EncodeToString(h.Sum(nil)) != w.SHA256 || n != w.Size {
		// Damaged: gone from the store, unless another build has put a
		// good one there since, and apt downloads it.
		_ = unix.Unlinkat(int(img.Fd()), tmp, 0)
		if fi, err := src.Stat(); err == nil && sameAt(top, name, fi) {
			_ = unix.Unlinkat(int(top.Fd()), name, 0)
		}
		return false, nil
	}
	if err := unix.Renameat(int(img.Fd()), tmp, int(img.Fd()), w.File); err != nil {
		_ = unix.Unlinkat(int(img.Fd()), tmp, 0)
		return false, fmt.Errorf("deb cache: %w", &fs.PathError{Op: "rename", Path: filepath.Join(img.Name(), w.File), Err: err})
	}
	// Its last use, for the size bound.
	now := unix.NsecToTimespec(time.Now().UnixNano())
	_ = unix.UtimesNanoAt(int(top.Fd()), name, []unix.Timespec{now, now}, unix.AT_SYMLINK_NOFOLLOW)
	return true, nil
}

// sameAt reports whether name in d is still the file fi describes.
func sameAt(d *os.File, name string, fi fs.FileInfo) bool {
	var st unix.Stat_t
	if unix.Fstatat(int(d.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
		return false
	}
	sys, ok := fi.Sys().(*syscall.Stat_t)
	return ok && uint64(sys.Dev) == uint64(st.Dev) && sys.Ino == st.Ino
}

// Collect keeps the wanted files apt left in dir that the store lacks,
// each checked against its hash. It returns how many it added. Wants
// that fail their checks, and files in dir that are not regular or not
// of the wanted size, are skipped.
func (s *Store) Collect(wants []Want, dir string) (int, error) {
	top, err := s.open(true)
	if err != nil {
		return 0, err
	}
	defer top.Close()
	img, err := openImageDir(dir)
	if err != nil {
		return 0, err
	}
	defer img.Close()
	n := 0
	for _, w := range wants {
		if w.check() != nil {
			continue
		}
		var st unix.Stat_t
		if unix.Fstatat(int(top.Fd()), w.SHA256+".deb", &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			continue
		}
		f, err := openDownload(img, w)
		if err != nil {
			return n, err
		}
		if f == nil {
			continue
		}
		added, err := s.put(w, f)
		f.Close()
		if err != nil {
			return n, err
		}
		if added {
			n++
		}
	}
	return n, s.Prune()
}

// openDownload opens w's file in img, apt's archive directory, or returns
// nil when there is no regular file of w's size there: apt removed it or
// never needed it, or the image put a link, a FIFO or a device there.
// O_NONBLOCK keeps a FIFO from waiting for a writer.
func openDownload(img *os.File, w Want) (*os.File, error) {
	fd, err := unix.Openat(int(img.Fd()), w.File, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENXIO) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("deb cache: %w", &fs.PathError{Op: "open", Path: filepath.Join(img.Name(), w.File), Err: err})
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != w.Size {
		unix.Close(fd)
		return nil, nil
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("deb cache: %w", err)
	}
	return os.NewFile(uintptr(fd), filepath.Join(img.Name(), w.File)), nil
}

// put stores what r holds as w's file if it is what the index promised.
// The store's levels were checked by the caller, and w.SHA256 is a
// checked hash, so the names below are the store's own.
func (s *Store) put(w Want, r io.Reader) (bool, error) {
	tmp, err := os.CreateTemp(s.Dir, tmpPrefix)
	if err != nil {
		return false, fmt.Errorf("deb cache: %w", err)
	}
	defer os.Remove(tmp.Name())
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), io.LimitReader(r, w.Size+1))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return false, fmt.Errorf("deb cache: %w", err)
	}
	if hex.EncodeToString(h.Sum(nil)) != w.SHA256 || n != w.Size {
		return false, nil // not what the index promised: not kept
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return false, fmt.Errorf("deb cache: %w", err)
	}
	if err := os.Rename(tmp.Name(), s.path(w.SHA256)); err != nil {
		return false, fmt.Errorf("deb cache: %w", err)
	}
	return true, nil
}

// Prune removes the least recently used files until the rest fit in
// MaxSize, and temporary files that killed builds left behind. It
// removes only the store's own names, relative to its checked directory.
func (s *Store) Prune() error {
	top, err := s.open(false)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer top.Close()
	des, err := top.ReadDir(-1)
	if err != nil {
		return fmt.Errorf("deb cache: %w", err)
	}
	type file struct {
		name string
		size int64
		used time.Time
	}
	var files []file
	for _, de := range des {
		fi, err := de.Info()
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		name := de.Name()
		if strings.HasPrefix(name, tmpPrefix) {
			if time.Since(fi.ModTime()) > staleTmp {
				_ = unix.Unlinkat(int(top.Fd()), name, 0)
			}
			continue
		}
		if sum, ok := strings.CutSuffix(name, ".deb"); ok && validSHA256(sum) {
			files = append(files, file{name, fi.Size(), fi.ModTime()})
		}
	}
	if s.MaxSize > 0 {
		sort.Slice(files, func(i, j int) bool { return files[i].used.After(files[j].used) })
		var total int64
		for _, f := range files {
			total += f.size
			if total > s.MaxSize {
				_ = unix.Unlinkat(int(top.Fd()), f.name, 0)
			}
		}
	}
	// A marker goes with its .deb.
	for _, de := range des {
		if sum, ok := strings.CutSuffix(de.Name(), soundSuffix); ok && validSHA256(sum) {
			if !regularAt(top, sum+".deb") {
				_ = unix.Unlinkat(int(top.Fd()), de.Name(), 0)
			}
		}
	}
	return nil
}

// soundSuffix names a Sound marker: <sha256>.sound beside <sha256>.deb.
const soundSuffix = ".sound"

// Sound is the set of cached .debs whose data member the repository
// indexer decompressed to its end and found sound (an aptrepo.Checked):
// a rebuild's bake then reads only their digests. A member is an empty
// marker file beside the .deb, kept only while the .deb is in the store.
type Sound struct{ s *Store }

// Sound is the store's set of checked .debs.
func (s *Store) Sound() Sound { return Sound{s} }

// Has reports whether the .deb with this SHA256 was found sound and is
// still in the store.
func (v Sound) Has(sum string) bool {
	if !validSHA256(sum) {
		return false
	}
	top, err := v.s.open(false)
	if err != nil {
		return false
	}
	defer top.Close()
	return regularAt(top, sum+soundSuffix) && regularAt(top, sum+".deb")
}

// Add records the .deb with this SHA256 as sound, when it is in the
// store. A marker that cannot be written costs the next build a
// decompression, no more.
func (v Sound) Add(sum string) {
	if !validSHA256(sum) {
		return
	}
	top, err := v.s.open(false)
	if err != nil {
		return
	}
	defer top.Close()
	if !regularAt(top, sum+".deb") {
		return
	}
	// O_NONBLOCK: a FIFO planted in the marker's place does not hang the
	// build.
	fd, err := unix.Openat(int(top.Fd()), sum+soundSuffix, unix.O_WRONLY|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o644)
	if err == nil {
		unix.Close(fd)
	}
}

// regularAt reports whether name, relative to the directory dir and not
// followed if a link, is a regular file.
func regularAt(dir *os.File, name string) bool {
	var st unix.Stat_t
	return unix.Fstatat(int(dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG
}

// Around runs an apt command that downloads into apt's archive directory,
// whose path on this host dir resolves (again before each use: the image's
// code runs in between and may have moved things), through the store: what apt would download
// (aptCmd with --print-uris, and each file's SHA256 from apt-cache show;
// query runs a command where apt runs and returns its output) is placed
// in dir first where the store has it, and what apt downloaded is kept
// afterwards. A store that fails is reported through say and left out;
// run always runs.
func (s *Store) Around(query func(cmd string) (string, error), aptCmd string, dir func() (string, error), run func() error, say func(string)) error {
	out, err := query(aptCmd + " --print-uris -qq")
	var wants []Want
	if err == nil {
		wants, err = ParsePrintURIs(out)
	}
	if err == nil && len(wants) > 0 {
		var show string
		if show, err = query("apt-cache show " + shellquote.Join(ShowArgs(wants)...)); err == nil {
			wants = AddHashes(wants, show)
		}
	}
	if err != nil {
		say(fmt.Sprintf("deb cache: not used: %v", err))
		return run()
	}
	if len(wants) > 0 {
		d, err := dir()
		var n int
		var bytes int64
		if err == nil {
			n, bytes, err = s.Seed(wants, d)
		}
		if err != nil {
			say(fmt.Sprintf("deb cache: %v", err))
		}
		say(fmt.Sprintf("deb cache: %d of %d packages from the cache (%.1f MiB)", n, len(wants), float64(bytes)/(1<<20)))
	}
	if err := run(); err != nil {
		return err
	}
	if len(wants) > 0 {
		d, err := dir()
		added := 0
		if err == nil {
			added, err = s.Collect(wants, d)
		}
		if err != nil {
			say(fmt.Sprintf("deb cache: %v", err))
		} else if added > 0 {
			say(fmt.Sprintf("deb cache: kept %d packages in %s", added, s.Dir))
		}
	}
	return nil
}
