package aptrepo

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// cacheDir returns $PODVM_CACHE, or ~/.cache/podvm: where downloads are
// kept between test runs.
func cacheDir(t testing.TB) string {
	if d := os.Getenv("PODVM_CACHE"); d != "" {
		return d
	}
	d, err := os.UserCacheDir()
	if err != nil {
		t.Skipf("no cache directory (set PODVM_CACHE): %v", err)
	}
	return filepath.Join(d, "podvm")
}

// hostApt runs apt-get or apt-cache with the host's sources and keys but
// private lists and caches under the cache directory, so the host's own
// apt state is neither needed nor touched.
func hostApt(t testing.TB, dir, name string, args ...string) ([]byte, error) {
	t.Helper()
	cache := cacheDir(t)
	opts := []string{
		"-o", "Dir::State::Lists=" + filepath.Join(cache, "apt/lists"),
		"-o", "Dir::Cache=" + filepath.Join(cache, "apt/cache"),
		"-o", "Debug::NoLocking=true",
		// The cache lies in root's home, which _apt cannot write.
		"-o", "APT::Sandbox::User=" + currentUser(),
		"-o", "Acquire::Languages=none",
	}
	cmd := exec.Command(name, append(opts, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "LC_ALL=C.UTF-8")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out, stderr.Bytes())
	}
	return out, nil
}

func currentUser() string {
	if os.Geteuid() == 0 {
		return "root"
	}
	return os.Getenv("USER")
}

// networkTrouble recognises apt failing for want of a network, the one
// reason to skip rather than fail.
var networkTrouble = regexp.MustCompile(`Could not resolve|Temporary failure resolving|Could not connect|Network is unreachable|Connection timed out|No route to host`)

// debianDebs returns real Debian .debs: the candidates of roots and of
// every dependency whose name matches follow, fetched through the host's
// apt configuration with apt-get download and cached under
// cacheDir/debs/<set>. Once cached, no network is needed.
func debianDebs(t testing.TB, set string, roots []string, follow *regexp.Regexp) []string {
	t.Helper()
	need(t, "apt-get", "apt-cache")
	dir := filepath.Join(cacheDir(t), "debs", set)
	manifest := filepath.Join(dir, "manifest")
	if paths, ok := cachedDebs(dir, manifest); ok {
		return paths
	}
	for _, d := range []string{dir, filepath.Join(cacheDir(t), "apt/lists/partial"), filepath.Join(cacheDir(t), "apt/cache/archives/partial")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := hostApt(t, dir, "apt-get", "update"); err != nil || networkTrouble.Match(out) {
		if networkTrouble.MatchString(fmt.Sprint(err)) || networkTrouble.Match(out) {
			t.Skipf("the host's apt sources are unreachable; real-.deb tests need them once to fill %s:\n%v%s", dir, err, out)
		}
		t.Fatal(err)
	}

	// Resolve the closure by name, candidate versions only.
	var names, files []string
	queue := slices.Clone(roots)
	for len(queue) > 0 {
		name := queue[0]
		queue = queue[1:]
		if slices.Contains(names, name) {
			continue
		}
		out, err := hostApt(t, dir, "apt-cache", "show", "--no-all-versions", name)
		if err != nil {
			t.Fatal(err)
		}
		first, _, _ := bytes.Cut(out, []byte("\n\n"))
		p, err := ParseControl(first)
		if err != nil {
			t.Fatalf("apt-cache show %s: %v", name, err)
		}
		names = append(names, name)
		version := strings.ReplaceAll(p.Value("Version"), ":", "%3a")
		files = append(files, fmt.Sprintf("%s_%s_%s.deb", name, version, p.Value("Architecture")))
		for _, dep := range dependencyNames(p.Value("Depends") + "," + p.Value("Pre-Depends")) {
			if follow != nil && follow.MatchString(dep) {
				queue = append(queue, dep)
			}
		}
	}
	if _, err := hostApt(t, dir, "apt-get", append([]string{"download"}, names...)...); err != nil {
		if networkTrouble.MatchString(err.Error()) {
			t.Skipf("the host's apt sources are unreachable: %v", err)
		}
		t.Fatal(err)
	}
	var paths []string
	for _, f := range files {
		p := filepath.Join(dir, f)
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("apt-get download left no %s: %v", f, err)
		}
		paths = append(paths, p)
	}
	if err := os.WriteFile(manifest, []byte(strings.Join(files, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return paths
}

func cachedDebs(dir, manifest string) ([]string, bool) {
	b, err := os.ReadFile(manifest)
	if err != nil {
		return nil, false
	}
	var paths []string
	for _, f := range strings.Fields(string(b)) {
		p := filepath.Join(dir, f)
		if _, err := os.Stat(p); err != nil {
			return nil, false
		}
		paths = append(paths, p)
	}
	return paths, len(paths) > 0
}

// dependencyNames returns every package name in a Depends-style field,
// alternatives included, without versions or architecture qualifiers.
func dependencyNames(field string) []string {
	var names []string
	for _, clause := range strings.Split(field, ",") {
		for _, alt := range strings.Split(clause, "|") {
			f := strings.Fields(alt)
			if len(f) == 0 {
				continue
			}
			name, _, _ := strings.Cut(f[0], ":")
			if !slices.Contains(names, name) {
				names = append(names, name)
			}
		}
	}
	return names
}

// fakeStatus returns a dpkg status file claiming that every dependency of
// pkgs found outside them is installed, in a version satisfying any lower
// bound, so that apt's resolver only ever reaches into our repository.
func fakeStatus(pkgs []Package, arch string) string {
	inRepo := make(map[string]bool)
	for _, p := range pkgs {
		inRepo[p.Name] = true
	}
	var b strings.Builder
	seen := make(map[string]bool)
	for _, p := range pkgs {
		for _, dep := range dependencyNames(p.Depends + "," + p.PreDepends) {
			if inRepo[dep] || seen[dep] {
				continue
			}
			seen[dep] = true
			fmt.Fprintf(&b, "Package: %s\nStatus: install ok installed\nVersion: 999:0\nArchitecture: %s\nMulti-Arch: allowed\nMaintainer: none\nDescription: stand-in\n\n", dep, arch)
		}
	}
	return b.String()
}

// TestAptRealDebs builds a repository of the kernel headers closure that
// GPU driver builds install (linux-headers-amd64 and the linux-*
// packages it pulls in), straight from Debian, and has real apt update
// from it and download the headers with their dependencies.
func TestAptRealDebs(t *testing.T) {
	if testing.Short() {
		t.Skip("downloads real packages")
	}
	need(t, "apt-get", "dpkg")
	arch := strings.TrimSpace(run(t, "dpkg", "--print-architecture"))
	if arch != "amd64" {
		t.Skipf("the fixture set is amd64's; this host is %s", arch)
	}
	debs := debianDebs(t, "kernel-headers", []string{"linux-headers-amd64"}, regexp.MustCompile(`^linux-`))

	// The .debs stay in the cache; the repository hard-links them.
	out := filepath.Join(worldReadableTempDir(t), "repo")
	signer := testSigner(t, testDate)
	date := time.Now().Truncate(time.Second)
	res, err := Build(context.Background(), Options{Debs: debs, Out: out, Placement: HardLink, Origin: "podvm", Label: "kernel headers", Date: date, Signer: signer})
	if err != nil {
		t.Fatal(err)
	}
	checkRepo(t, out, res, true)
	t.Logf("%d real packages, %d bytes, in %v", len(res.Packages), res.TotalBytes, res.Elapsed)

	// Cross-check our fields with dpkg's own reading of each .deb.
	for _, p := range res.Packages {
		fields := run(t, "dpkg-deb", "--showformat=${Package} ${Version} ${Architecture} ${Depends}", "--show", p.Source)
		if want := fmt.Sprintf("%s %s %s %s", p.Name, p.Version, p.Architecture, p.Depends); fields != want {
			t.Errorf("dpkg-deb --show %s = %q, we read %q", p.Filename, fields, want)
		}
	}

	for _, by := range []signedBy{keyringPath, inlineKey} {
		t.Run(by.String(), func(t *testing.T) {
			apt := newAptRoot(t, sourceFor(out, by, signer.ArmoredPublicKey()), fakeStatus(res.Packages, arch))
			apt.mustUpdate()
			out, ok := apt.run("apt-get", "install", "-y", "--download-only", "--no-install-recommends", "linux-headers-amd64")
			if !ok || diagnostics.MatchString(out) {
				t.Fatalf("apt-get install --download-only linux-headers-amd64 (ok=%v):\n%s", ok, out)
			}
			for _, p := range res.Packages {
				if !strings.Contains(out, " "+p.Name+" "+p.Version) {
					t.Errorf("apt did not fetch %s %s:\n%s", p.Name, p.Version, out)
				}
			}
		})
	}
}
