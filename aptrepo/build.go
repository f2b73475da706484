package aptrepo

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
)

// Placement says how .deb files get into the repository directory.
type Placement int

const (
	// Copy copies each .deb into the output directory.
	Copy Placement = iota
	// HardLink hard-links each .deb into the output directory, copying
	// instead where a link is impossible (another file system) or would
	// carry the wrong permissions (anything but 0644).
	HardLink
	// IndexOnly writes only the index files. Filename in Packages is the
	// .deb's base name: the .debs are expected beside the index wherever
	// the repository finally lives (for instance, already in the output
	// directory, or inside an image the index is uploaded into).
	IndexOnly
)

func (p Placement) String() string {
	switch p {
	case Copy:
		return "copy"
	case HardLink:
		return "hard-link"
	case IndexOnly:
		return "index-only"
	}
	return "Placement(" + strconv.Itoa(int(p)) + ")"
}

// Options describe one repository build.
type Options struct {
	// Debs lists .deb files; DebDir adds every *.deb directly inside it.
	// At least one .deb is needed in all.
	Debs   []string
	DebDir string

	// Out is the repository directory. With Copy and HardLink it is
	// replaced as a whole; it may exist only if it is empty or holds a
	// repository already (a Release or InRelease file). With IndexOnly an
	// existing directory is kept and only the index files in it are
	// replaced, each by a rename.
	Out       string
	Placement Placement

	// Origin and Label go into Release (omitted when empty); apt can pin
	// by them.
	Origin string
	Label  string

	// Date is the Release Date and the signatures' creation time. Pass
	// DateFromEnvironment's result so builds are reproducible.
	Date time.Time

	// Signer signs Release; its public key is written as keyring.gpg and
	// keyring.asc.
	Signer *Signer

	// AllDigests adds MD5, SHA1 and SHA512 to Packages and Release, for
	// consumers older than apt's SHA256; apt itself needs SHA256 only.
	AllDigests bool

	// Checked, when set, remembers the .debs (by SHA256) whose data
	// member decompressed in full: a rebuild from the same files skips
	// that, the slowest part of indexing. Nil checks every file.
	Checked Checked
}

// Checked is a set of SHA256 digests of .debs whose data member was
// decompressed to its end and found sound. Implementations must be safe
// for concurrent use.
type Checked interface {
	Has(sha256 string) bool
	Add(sha256 string)
}

// Package is one .deb in the repository.
type Package struct {
	Name         string `json:"name"`
	Version      string `json:"version"`
	Architecture string `json:"architecture"`
	Filename     string `json:"filename"`
	Size         int64  `json:"size"`
	MD5sum       string `json:"md5sum"`
	SHA1         string `json:"sha1"`
	SHA256       string `json:"sha256"`
	SHA512       string `json:"sha512"`
	Depends      string `json:"depends,omitempty"`
	PreDepends   string `json:"pre_depends,omitempty"`
	Provides     string `json:"provides,omitempty"`
	// Source is the path the .deb was read from.
	Source string `json:"-"`

	control Paragraph
	// knownSound: Options.Checked knew the file; its data member was not
	// decompressed.
	knownSound bool
}

// Control returns the package's control paragraph as found in the .deb.
func (p *Package) Control() Paragraph { return slices.Clone(p.control) }

// Result describes a finished build.
type Result struct {
	Dir         string        `json:"dir"`
	Packages    []Package     `json:"packages"` // sorted by name, version, architecture
	TotalBytes  int64         `json:"total_bytes"`
	Fingerprint string        `json:"fingerprint"`
	Files       []string      `json:"files"` // index and key files written, by base name
	Elapsed     time.Duration `json:"elapsed_ns"`
	// KnownSound counts the .debs Options.Checked knew: hashed, not
	// decompressed again.
	KnownSound int `json:"known_sound"`
}

// maxDateSkew is how far Date may lie ahead of this host's clock. apt
// refuses a Release dated in its future ("not valid yet"), so a repository
// dated ahead would be useless to any node whose clock agrees with ours.
const maxDateSkew = time.Minute

// Build indexes and signs a flat repository as described by opts. The
// output directory is either fully written or left as it was: everything is
// built in a temporary directory beside it (or, for IndexOnly into an
// existing directory, inside it) and renamed into place.
func Build(ctx context.Context, opts Options) (*Result, error) {
	start := time.Now()
	if err := opts.check(); err != nil {
		return nil, err
	}
	debs, err := opts.collect()
	if err != nil {
		return nil, err
	}
	out, err := filepath.Abs(opts.Out)
	if err != nil {
		return nil, fmt.Errorf("output directory: %w", err)
	}

	if err := checkOverlap(debs, opts, out); err != nil {
		return nil, err
	}
	if opts.Placement == IndexOnly {
		// Index files are renamed in one by one: two builds at once would
		// interleave them, leaving an InRelease signed by one key beside
		// the other's keyring.gpg. The lock is held until every file of
		// this build is in place.
		unlock, err := lockDir(ctx, out)
		if err != nil {
			return nil, err
		}
		defer unlock()
	}
	st, err := newStage(out, opts.Placement == IndexOnly)
	if err != nil {
		return nil, err
	}
	defer st.cleanup()

	pkgs, known, err := readAll(ctx, debs, st.dir, opts.Placement, opts.AllDigests, opts.Checked)
	if err != nil {
		return nil, err
	}
	if err := checkDuplicates(pkgs); err != nil {
		return nil, err
	}
	if err := checkStanzas(pkgs); err != nil {
		return nil, err
	}
	slices.SortFunc(pkgs, func(a, b Package) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Version, b.Version),
			cmp.Compare(a.Architecture, b.Architecture))
	})

	files, err := indexFiles(pkgs, opts)
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		if err := writeFile(filepath.Join(st.dir, f.name), f.data); err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	names := make([]string, len(files))
	for i, f := range files {
		names[i] = f.name
	}
	if err := st.commit(names); err != nil {
		return nil, err
	}

	res := &Result{
		Dir:         out,
		Packages:    pkgs,
		Fingerprint: opts.Signer.Fingerprint(),
		Files:       names,
		KnownSound:  known,
	}
	for _, p := range pkgs {
		res.TotalBytes += p.Size
	}
	res.Elapsed = time.Since(start)
	return res, nil
}

// CheckDate applies apt's rule for a repository's Date to date, as of now:
// more than a minute ahead, and apt refuses the repository as not valid
// yet. Entry points call it when they validate settings, long before a
// build signs anything.
func CheckDate(date, now time.Time) error {
	// Seconds, not a Duration: a Duration saturates at 292 years.
	ahead := date.Unix() - now.Unix()
	if ahead <= int64(maxDateSkew/time.Second) {
		return nil
	}
	how := (time.Duration(ahead) * time.Second).String()
	if ahead > 2*86400 {
		how = fmt.Sprintf("%d days", ahead/86400)
	}
	return fmt.Errorf("the Release date %s is %s in the future; apt would refuse the repository as not valid yet",
		date.UTC().Format(time.RFC3339), how)
}

func (opts *Options) check() error {
	switch {
	case opts.Out == "":
		return errors.New("no output directory")
	case opts.Signer == nil:
		return errors.New("no signer")
	case opts.Date.IsZero():
		return errors.New("no Date")
	case opts.Placement < Copy || opts.Placement > IndexOnly:
		return fmt.Errorf("unknown placement %v", opts.Placement)
	}
	if err := CheckDate(opts.Date, time.Now()); err != nil {
		return err
	}
	for field, v := range map[string]string{"Origin": opts.Origin, "Label": opts.Label} {
		if len(v) > MaxReleaseField {
			return fmt.Errorf("%s of %d bytes: at most %d are allowed; gpgv and apt report a clearsigned line of about 20,000 bytes as a BAD signature", field, len(v), MaxReleaseField)
		}
		if strings.IndexFunc(v, func(r rune) bool { return unicode.IsControl(r) }) >= 0 {
			return fmt.Errorf("%s %q: control characters are not allowed", field, v)
		}
		if v != strings.TrimSpace(v) {
			return fmt.Errorf("%s %q: leading or trailing blanks are not allowed", field, v)
		}
	}
	return nil
}

// Limits of what apt reads, measured with apt 2.6 and gpgv 2.2
// (TestBuildRefusesWhatAptCannotRead): apt fails to parse a Packages
// stanza of about 1 MiB ("Unable to parse package file"), which takes the
// whole repository with it, and GnuPG's clearsigned text breaks at lines
// near 20,000 bytes (apt saw a BAD signature from 19,997 on). The caps
// leave room below both.
const (
	// MaxStanza bounds one package's stanza in Packages: its control
	// paragraph and the fields the index adds.
	MaxStanza = 768 << 10
	// MaxReleaseField bounds Origin and Label, each a line of Release.
	MaxReleaseField = 4 << 10
	// maxReleaseLine bounds every line of Release, those the index
	// writes included.
	maxReleaseLine = 16 << 10
)

// checkStanzas refuses a package whose stanza apt could not parse.
func checkStanzas(pkgs []Package) error {
	var errs []error
	for i := range pkgs {
		if n := len(pkgs[i].stanza(nil)); n > MaxStanza {
			errs = append(errs, fmt.Errorf("%s: its Packages stanza would be %d bytes, more than the %d allowed (apt fails on the whole repository from about 1 MiB); the control paragraph is too large", pkgs[i].Source, n, MaxStanza))
		}
	}
	return errors.Join(errs...)
}

// checkOverlap refuses inputs inside the output and an output inside an
// input directory, compared as real paths: replacing the output would
// delete the inputs (and whatever else lives beside them), and an output
// below the input directory is a repository inside the tree being
// indexed. IndexOnly indexes the .debs in the output itself, which is
// its point.
func checkOverlap(debs []debFile, opts Options, out string) error {
	realOut, err := realPath(out)
	if err != nil {
		return fmt.Errorf("output directory: %w", err)
	}
	var inDir string
	if opts.DebDir != "" {
		if inDir, err = realPath(opts.DebDir); err != nil {
			return fmt.Errorf(".deb directory: %w", err)
		}
	}
	if opts.Placement == IndexOnly {
		// Only index files are replaced; no input can go with them.
		return nil
	}
	if inDir != "" {
		switch {
		case within(inDir, realOut):
			return fmt.Errorf(".deb directory %s lies inside the output %s, which a build replaces as a whole; give an output directory outside it (or index in place)", opts.DebDir, out)
		case within(realOut, inDir):
			return fmt.Errorf("output %s lies inside the .deb directory %s; give an output directory outside it", out, opts.DebDir)
		}
	}
	for _, d := range debs {
		if within(d.real, realOut) {
			return fmt.Errorf("%s lies inside the output %s, which a build replaces as a whole; move it out first", d.path, out)
		}
	}
	return nil
}

// realPath resolves every symbolic link in p; the part of p that does not
// exist yet is appended to its deepest existing directory, resolved.
func realPath(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	var rest []string
	for dir := abs; ; dir = filepath.Dir(dir) {
		real, err := filepath.EvalSymlinks(dir)
		if err == nil {
			return filepath.Join(append([]string{real}, rest...)...), nil
		}
		if !errors.Is(err, fs.ErrNotExist) || filepath.Dir(dir) == dir {
			return "", err
		}
		rest = append([]string{filepath.Base(dir)}, rest...)
	}
}

// within reports whether p is dir or lies below it; both are clean
// absolute paths.
func within(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// debFile is one input .deb.
type debFile struct {
	path string // as given, for messages
	real string // symbolic links resolved: what is read and linked
	name string // base name of path, which becomes Filename in Packages
	size int64
}

// collect lists the input .debs, checks their base names (they become
// file names in the repository) and refuses two with the same base name.
func (opts *Options) collect() ([]debFile, error) {
	paths := slices.Clone(opts.Debs)
	if opts.DebDir != "" {
		found, err := FindDebs(opts.DebDir)
		if err != nil {
			return nil, err
		}
		paths = append(paths, found...)
	}
	var debs []debFile
	seen := make(map[string]bool)
	byName := make(map[string]string)
	for _, p := range paths {
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		// A hard link to a symbolic link would be a symbolic link, which
		// may not resolve inside the repository.
		real, err := filepath.EvalSymlinks(abs)
		if err != nil {
			return nil, err
		}
		if seen[real] {
			continue
		}
		seen[real] = true
		fi, err := os.Stat(real)
		if err != nil {
			return nil, err
		}
		if !fi.Mode().IsRegular() {
			return nil, fmt.Errorf("%s: not a regular file", p)
		}
		name := filepath.Base(abs)
		if err := checkDebName(name); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		if other, ok := byName[name]; ok {
			return nil, fmt.Errorf("%s and %s: two .debs with the same file name", other, p)
		}
		byName[name] = p
		debs = append(debs, debFile{path: abs, real: real, name: name, size: fi.Size()})
	}
	if len(debs) == 0 {
		return nil, errors.New("no .deb files given")
	}
	return debs, nil
}

// checkDebName keeps file names to what needs no quoting in Packages or
// in shell scripts. '%' is allowed: apt-get download writes an epoch's
// colon as "%3a", and apt finds such files (tested).
func checkDebName(name string) error {
	if !strings.HasSuffix(name, ".deb") || strings.HasPrefix(name, ".") {
		return errors.New("file name must end in .deb and not start with a dot")
	}
	for _, r := range name {
		if r > unicode.MaxASCII || unicode.IsSpace(r) || unicode.IsControl(r) || strings.ContainsRune(`"'\`, r) {
			return fmt.Errorf("file name %q contains %q", name, r)
		}
	}
	return nil
}

// FindDebs returns the *.deb regular files directly inside dir, sorted.
func FindDebs(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read .deb directory: %w", err)
	}
	var paths []string
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".deb") || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if e.Type().IsRegular() || e.Type()&fs.ModeSymlink != 0 {
			paths = append(paths, filepath.Join(dir, e.Name()))
		}
	}
	return paths, nil
}

// readAll reads every .deb on GOMAXPROCS workers, placing it into dir as
// placement asks. Largest files go first so that no worker is left with a
// big one at the end. Every file is read even after one fails, so that all
// bad inputs are reported at once.
func readAll(ctx context.Context, debs []debFile, dir string, placement Placement, allDigests bool, checked Checked) ([]Package, int, error) {
	order := make([]int, len(debs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(debs[b].size, debs[a].size) })

	pkgs := make([]Package, len(debs))
	errs := make([]error, len(debs))
	var known atomic.Int64
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(debs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				pkg, err := ingest(ctx, debs[i], dir, placement, allDigests, checked)
				if err != nil {
					errs[i] = err
					continue
				}
				if pkg.knownSound {
					known.Add(1)
				}
				pkgs[i] = *pkg
			}
		}()
	}
	for _, i := range order {
		if ctx.Err() != nil {
			break
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	if err := errors.Join(errs...); err != nil {
		return nil, 0, err
	}
	return pkgs, int(known.Load()), nil
}

// ingest reads one .deb and, unless placement is IndexOnly, puts it into
// dir: by a hard link where allowed, else by copying the very bytes that
// were hashed, so Packages describes exactly the file in the repository.
func ingest(ctx context.Context, deb debFile, dir string, placement Placement, allDigests bool, checked Checked) (*Package, error) {
	src := deb.real
	var dst *os.File
	switch placement {
	case HardLink:
		target := filepath.Join(dir, deb.name)
		if linked, err := tryLink(deb.real, target); err != nil {
			return nil, err
		} else if linked {
			src = target // hash what the repository holds
			break
		}
		fallthrough
	case Copy:
		f, err := createFile(filepath.Join(dir, deb.name))
		if err != nil {
			return nil, err
		}
		defer f.Close()
		dst = f
	}

	f, err := os.Open(src)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	known := ""
	if checked != nil {
		if known, err = fileSHA256(f); err != nil {
			return nil, fmt.Errorf("%s: %w", deb.path, err)
		}
		if !checked.Has(known) {
			known = ""
		}
	}
	var info *debInfo
	if dst != nil {
		info, err = readDebDigests(ctx, f, dst, allDigests, known == "")
	} else {
		info, err = readDebDigests(ctx, f, nil, allDigests, known == "")
	}
	if err == nil && known != "" && info.sha256 != known {
		err = fmt.Errorf("changed while it was read")
	}
	if err != nil {
		var ce *copyError
		if errors.As(err, &ce) {
			return nil, fmt.Errorf("copy %s: %w", deb.path, ce.err)
		}
		return nil, fmt.Errorf("%s: %w", deb.path, err)
	}
	if dst != nil {
		if err := dst.Sync(); err != nil {
			return nil, fmt.Errorf("copy %s: %w", deb.path, err)
		}
		if err := dst.Close(); err != nil {
			return nil, fmt.Errorf("copy %s: %w", deb.path, err)
		}
	}
	name, version, arch, err := info.control.identity()
	if err != nil {
		return nil, fmt.Errorf("%s: control file: %w", deb.path, err)
	}
	if checked != nil && known == "" {
		checked.Add(info.sha256)
	}
	return &Package{
		Name:         name,
		Version:      version,
		Architecture: arch,
		Filename:     deb.name,
		Size:         info.size,
		MD5sum:       info.md5,
		SHA1:         info.sha1,
		SHA256:       info.sha256,
		SHA512:       info.sha512,
		Depends:      info.control.Value("Depends"),
		PreDepends:   info.control.Value("Pre-Depends"),
		Provides:     info.control.Value("Provides"),
		Source:       deb.path,
		control:      info.control,
		knownSound:   known != "",
	}, nil
}

// tryLink hard-links src to dst. It reports false, rather than an error,
// when a copy should be made instead: src is not mode 0644 (a link shares
// the mode, and the repository's files must be 0644), or the link is
// refused for a reason a copy avoids (another file system, no hard links).
func tryLink(src, dst string) (bool, error) {
	fi, err := os.Stat(src)
	if err != nil {
		return false, err
	}
	if fi.Mode().Perm() != 0o644 {
		return false, nil
	}
	if err := os.Link(src, dst); err != nil {
		if linkFallback(err) {
			return false, nil
		}
		return false, fmt.Errorf("link %s: %w", src, err)
	}
	return true, nil
}

// checkDuplicates refuses two files claiming the same package, version and
// architecture: apt would see only one of them.
func checkDuplicates(pkgs []Package) error {
	seen := make(map[string]*Package)
	var errs []error
	for i := range pkgs {
		p := &pkgs[i]
		key := p.Name + "_" + p.Version + "_" + p.Architecture
		if q, ok := seen[key]; ok {
			same := ""
			if q.SHA256 == p.SHA256 {
				same = " (identical copies)"
			}
			errs = append(errs, fmt.Errorf("%s and %s: both are %s %s (%s)%s", q.Source, p.Source, p.Name, p.Version, p.Architecture, same))
			continue
		}
		seen[key] = p
	}
	return errors.Join(errs...)
}

// indexFiles renders every file of the repository besides the .debs, in
// the order they are renamed into place.
func indexFiles(pkgs []Package, opts Options) ([]indexFile, error) {
	packages := packagesIndex(pkgs)
	gz, err := gzipBytes(packages)
	if err != nil {
		return nil, fmt.Errorf("compress Packages: %w", err)
	}
	var archs []string
	for _, p := range pkgs {
		if !slices.Contains(archs, p.Architecture) {
			archs = append(archs, p.Architecture)
		}
	}
	slices.Sort(archs)
	indexes := []indexFile{{PackagesFile, packages}, {PackagesGzFile, gz}}
	release := releaseFile(opts.Origin, opts.Label, opts.Date, archs, indexes, opts.AllDigests)
	for i, line := range strings.Split(string(release), "\n") {
		if len(line) > maxReleaseLine {
			return nil, fmt.Errorf("the Release file's line %d would be %d bytes, more than the %d allowed: GnuPG breaks clearsigned lines near 20,000 bytes", i+1, len(line), maxReleaseLine)
		}
	}
	detached, err := opts.Signer.detachSign(release, opts.Date)
	if err != nil {
		return nil, err
	}
	inRelease, err := opts.Signer.clearsign(release, opts.Date)
	if err != nil {
		return nil, err
	}
	return append(indexes,
		indexFile{KeyringFile, opts.Signer.PublicKeyring()},
		indexFile{ArmoredKeyringFile, opts.Signer.ArmoredPublicKey()},
		indexFile{ReleaseFile, release},
		indexFile{ReleaseGPGFile, detached},
		indexFile{InReleaseFile, inRelease},
	), nil
}

// DateFromEnvironment returns the time in SOURCE_DATE_EPOCH (see
// reproducible-builds.org) when it is set, and the current time otherwise,
// in UTC and truncated to whole seconds as Release records it.
func DateFromEnvironment() (time.Time, error) {
	v, ok := os.LookupEnv("SOURCE_DATE_EPOCH")
	if !ok || v == "" {
		return time.Now().UTC().Truncate(time.Second), nil
	}
	secs, err := strconv.ParseInt(v, 10, 64)
	if err != nil || secs < 0 {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: want a non-negative integer of seconds", v)
	}
	return time.Unix(secs, 0).UTC(), nil
}

// fileSHA256 is the SHA256 of f's contents, read from its start; f is
// left at its start again.
func fileSHA256(f *os.File) (string, error) {
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
