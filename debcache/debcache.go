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
package debcache

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// layout names the on-disk format; a new one starts an empty directory.
const layout = "v1"

const (
	tmpPrefix = ".tmp-"
	staleTmp  = time.Hour
)

// Store is a directory of .deb files named <sha256>.deb.
type Store struct {
	Dir string
	// MaxSize bounds the files' total size; the least recently used go
	// first. 0: no bound.
	MaxSize int64
}

// New returns the store below root, the build cache directory
// (modcache.Root).
func New(root string, maxSize int64) *Store {
	return &Store{Dir: filepath.Join(root, "debs", layout), MaxSize: maxSize}
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
		if !strings.HasSuffix(m[2], ".deb") || strings.ContainsAny(m[2], "/\x00") {
			continue
		}
		parts := strings.Split(strings.TrimSuffix(m[2], ".deb"), "_")
		if len(parts) != 3 {
			continue
		}
		size, _ := strconv.ParseInt(m[3], 10, 64)
		ws = append(ws, Want{URI: m[1], File: m[2], Size: size, Name: parts[0], Version: strings.ReplaceAll(parts[1], "%3a", ":")})
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
				r.sha = strings.ToLower(v)
			}
		}
		if r.file != "" && len(r.sha) == 64 {
			recs = append(recs, r)
		}
	}
	var out []Want
	for _, w := range ws {
		for _, r := range recs {
			if strings.HasSuffix(w.URI, "/"+r.file) && r.size == strconv.FormatInt(w.Size, 10) {
				w.SHA256 = r.sha
				out = append(out, w)
				break
			}
		}
	}
	return out
}

func (s *Store) path(sum string) string { return filepath.Join(s.Dir, sum+".deb") }

// Seed places every wanted file the store holds in dir, apt's archive
// directory, after checking its hash; a stored file that fails the check
// is removed. It returns how many files and bytes it placed.
func (s *Store) Seed(wants []Want, dir string) (n int, bytes int64, err error) {
	for _, w := range wants {
		dst := filepath.Join(dir, w.File)
		if _, err := os.Lstat(dst); err == nil {
			continue // apt has it already
		}
		ok, err := s.place(w, dst)
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

// place copies the stored file of w to dst, verified as it is copied.
func (s *Store) place(w Want, dst string) (bool, error) {
	src, err := os.Open(s.path(w.SHA256))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("deb cache: %w", err)
	}
	defer src.Close()
	// dir is the image's: O_EXCL, so a link planted there is never
	// followed out of the tree (Remove drops a link, not its target).
	tmp := dst + ".podvm-partial"
	os.Remove(tmp)
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return false, fmt.Errorf("deb cache: %w", err)
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(out, h), src)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return false, fmt.Errorf("deb cache: copying %s: %w", w.File, err)
	}
	if hex.EncodeToString(h.Sum(nil)) != w.SHA256 || n != w.Size {
		// Damaged: gone from the store, and apt downloads it.
		os.Remove(tmp)
		os.Remove(src.Name())
		return false, nil
	}
	if err := os.Rename(tmp, dst); err != nil {
		os.Remove(tmp)
		return false, fmt.Errorf("deb cache: %w", err)
	}
	now := time.Now()
	_ = os.Chtimes(src.Name(), now, now) // its last use, for the size bound
	return true, nil
}

// Collect keeps the wanted files apt left in dir that the store lacks,
// each checked against its hash. It returns how many it added.
func (s *Store) Collect(wants []Want, dir string) (int, error) {
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return 0, fmt.Errorf("deb cache: %w", err)
	}
	n := 0
	for _, w := range wants {
		if _, err := os.Stat(s.path(w.SHA256)); err == nil {
			continue
		}
		f, err := os.OpenFile(filepath.Join(dir, w.File), os.O_RDONLY|syscall.O_NOFOLLOW, 0)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ELOOP) {
			continue // apt removed it or never needed it, or a link
		}
		if err != nil {
			return n, fmt.Errorf("deb cache: %w", err)
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

func (s *Store) put(w Want, r io.Reader) (bool, error) {
	tmp, err := os.CreateTemp(s.Dir, tmpPrefix)
	if err != nil {
		return false, fmt.Errorf("deb cache: %w", err)
	}
	defer os.Remove(tmp.Name())
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), r)
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
// MaxSize, and temporary files that killed builds left behind.
func (s *Store) Prune() error {
	des, err := os.ReadDir(s.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
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
		if err != nil {
			continue
		}
		if strings.HasPrefix(de.Name(), tmpPrefix) {
			if time.Since(fi.ModTime()) > staleTmp {
				os.Remove(filepath.Join(s.Dir, de.Name()))
			}
			continue
		}
		files = append(files, file{de.Name(), fi.Size(), fi.ModTime()})
	}
	if s.MaxSize <= 0 {
		return nil
	}
	sort.Slice(files, func(i, j int) bool { return files[i].used.After(files[j].used) })
	var total int64
	for _, f := range files {
		total += f.size
		if total > s.MaxSize {
			os.Remove(filepath.Join(s.Dir, f.name))
		}
	}
	return nil
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
		if show, err = query("apt-cache show " + strings.Join(quoteAll(ShowArgs(wants)), " ")); err == nil {
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

// quoteAll quotes each word for sh: versions carry ':' and '~'.
func quoteAll(words []string) []string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
	}
	return q
}
