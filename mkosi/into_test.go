package mkosi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"os"

	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/podvm-gpu/packer-plugin-podvm/internal/shellcheck"
)

// snapshot is a tree's every entry: type, mode and content or link.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out[rel] = "link " + l
		case fi.IsDir():
			out[rel] = fmt.Sprintf("dir %v", fi.Mode().Perm())
		default:
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[rel] = fmt.Sprintf("file %v %q", fi.Mode().Perm(), data)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// copyTree copies the fixture src to a new directory, modes included.
func copyTree(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "tree")
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.WriteFile(to, data, fi.Mode().Perm()); err != nil {
			return err
		}
		return os.Chmod(to, fi.Mode().Perm())
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// oneImageTree is a tree of one image, as a user of mkosi writes it.
func oneImageTree(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tree")
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "mkosi.extra", "etc"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "mkosi.conf"), []byte("[Distribution]\nDistribution=debian\nRelease=trixie\n\n[Output]\nFormat=disk\n\n[Content]\nBootable=yes\nPackages=linux-image-amd64,systemd\n"), 0o644))
	must(os.WriteFile(filepath.Join(dir, "mkosi.extra", "etc", "motd"), []byte("ours\n"), 0o644))
	return dir
}

// intoArgs are the flags every --into run of the tests takes: a mirror,
// no security suite, the toolkit key from testdata and this test binary
// as the program the scripts run.
func intoArgs(t *testing.T, dir string, extra ...string) []string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	key, err := filepath.Abs(filepath.Join("testdata", "toolkit-key.asc"))
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"--into", dir, "--mirror", "http://deb.example/debian", "--security-mirror=",
		"--nvidia-container-toolkit-repo-keyring", key, "--podvm-bin", exe, "--build-cache", "no"}, extra...)
}

func runInto(t *testing.T, args []string) (int, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	rc := RunCommand(context.Background(), args, &stdout, &stderr)
	return rc, stdout.String() + stderr.String()
}

// TestIntoRoundTrip adds the layer to a tree of several images (shaped
// like cloud-api-adaptor's) and to a tree of one, checks where its files
// went and that the tree's own files are untouched, regenerates it (the
// same files again), and removes it: the tree is as before, byte for
// byte, with no directory left behind.
func TestIntoRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name       string
		tree       func(t *testing.T) string
		args       []string
		imageFiles string // where image settings, trees and scripts go
	}{
		{"several images", func(t *testing.T) string { return copyTree(t, filepath.Join("testdata", "caa-shaped")) }, nil, "mkosi.images/system/mkosi.conf.d/" + LayerDropIn + "/"},
		{"several images, image named", func(t *testing.T) string { return copyTree(t, filepath.Join("testdata", "caa-shaped")) }, []string{"--image", "system"}, "mkosi.images/system/mkosi.conf.d/" + LayerDropIn + "/"},
		{"one image", oneImageTree, nil, "mkosi.conf.d/" + LayerDropIn + "/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := tc.tree(t)
			before := snapshot(t, dir)
			rc, out := runInto(t, intoArgs(t, dir, tc.args...))
			if rc != 0 {
				t.Fatalf("--into: rc %d\n%s", rc, out)
			}
			after := snapshot(t, dir)
			for p, v := range before {
				if after[p] != v {
					t.Errorf("the tree's own %s changed: %s -> %s", p, v, after[p])
				}
			}
			for _, p := range []string{
				tc.imageFiles + "mkosi.conf",
				tc.imageFiles + "mkosi.postinst.d/50-podvm.sh",
				tc.imageFiles + "mkosi.finalize.d/50-podvm-check.sh",
				tc.imageFiles + "mkosi.extra/usr/libexec/podvm-gpu/nvidia-cdi-generate",
				tc.imageFiles + "podvm-bake.json",
				"mkosi.conf.d/" + LayerDropIn + "/mkosi.conf",
				"mkosi.conf.d/" + LayerDropIn + "/mkosi.sandbox/etc/apt/sources.list.d/mkosi.sources",
				layerRecord,
			} {
				if !strings.HasPrefix(after[filepath.FromSlash(p)], "file ") {
					t.Errorf("the layer did not write %s", p)
				}
			}
			// The image settings match the profile; the universal ones
			// are at the top, matched on it too; nothing else.
			image, _ := os.ReadFile(filepath.Join(dir, tc.imageFiles+"mkosi.conf"))
			universal, _ := os.ReadFile(filepath.Join(dir, "mkosi.conf.d", LayerDropIn, "mkosi.conf"))
			for name, conf := range map[string]string{"image": string(image), "universal": string(universal)} {
				if !strings.Contains(conf, "[Match]\nProfiles="+Profile+"\n") {
					t.Errorf("%s settings do not match on the profile:\n%s", name, conf)
				}
			}
			if !strings.Contains(string(image), "Packages=") || (tc.imageFiles != "mkosi.conf.d/"+LayerDropIn+"/" && strings.Contains(string(image), "[Build]")) {
				t.Errorf("image settings:\n%s", image)
			}
			if !strings.Contains(string(universal), "WithNetwork=yes") {
				t.Errorf("universal settings:\n%s", universal)
			}
			// The script finds the bake's spec where the layer put it.
			script, _ := os.ReadFile(filepath.Join(dir, tc.imageFiles+"mkosi.postinst.d/50-podvm.sh"))
			if !strings.Contains(string(script), "'"+tc.imageFiles+"podvm-bake.json'") {
				t.Errorf("the script does not read the spec at %spodvm-bake.json", tc.imageFiles)
			}
			if !strings.Contains(string(script), "[size] The root with the GPU layer") || !strings.Contains(string(script), "layer_repo='/opt/local-packages'") {
				t.Error("the script does not print the root's size with the layer")
			}
			shellcheck.Check(t, "50-podvm.sh of the layer", string(script))

			// Regenerating gives the same tree.
			if rc, out := runInto(t, intoArgs(t, dir, tc.args...)); rc != 0 {
				t.Fatalf("--into again: rc %d\n%s", rc, out)
			}
			if again := snapshot(t, dir); !mapsEqual(again, after) {
				t.Errorf("regenerating changed the tree: %v", diffKeys(after, again))
			}

			// A build leaves the mount points of BuildSources= behind,
			// below the layer's drop-in: --remove takes them too.
			if err := os.MkdirAll(filepath.Join(dir, "mkosi.conf.d", LayerDropIn, "mnt", "podvm-module-cache"), 0o755); err != nil {
				t.Fatal(err)
			}
			if rc, out := runInto(t, []string{"--into", dir, "--remove"}); rc != 0 {
				t.Fatalf("--remove: rc %d\n%s", rc, out)
			}
			if restored := snapshot(t, dir); !mapsEqual(restored, before) {
				t.Errorf("--remove did not restore the tree: %v", diffKeys(before, restored))
			}
		})
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func diffKeys(a, b map[string]string) []string {
	var out []string
	for k, v := range a {
		if b[k] != v {
			out = append(out, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out = append(out, "+"+k)
		}
	}
	slices.Sort(out)
	return out
}

// TestIntoRefuses: what --into cannot do is refused before any change,
// with a message naming the flag or file.
func TestIntoRefuses(t *testing.T) {
	caa := func(t *testing.T) string { return copyTree(t, filepath.Join("testdata", "caa-shaped")) }
	write := func(dir, p, data string) {
		p = filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name  string
		tree  func(t *testing.T) string
		edit  func(dir string)
		args  func(t *testing.T, dir string) []string
		wants []string
	}{
		{"a file of the tree's own where the layer writes", caa, func(dir string) {
			write(dir, "mkosi.images/system/mkosi.conf.d/"+LayerDropIn+"/mkosi.conf", "[Content]\nPackages=vim\n")
		}, nil, []string{"mkosi.images/system/mkosi.conf.d/" + LayerDropIn + "/mkosi.conf", "the tree's own file", "nothing was changed"}},
		{"release flag against the tree's", caa, nil, func(t *testing.T, dir string) []string {
			return intoArgs(t, dir, "--release", "12")
		}, []string{"the tree builds debian 13 (trixie, amd64)", "the flags name debian 12"}},
		{"no release in the tree", caa, func(dir string) {
			write(dir, "mkosi.conf", "[Distribution]\nDistribution=debian\n")
		}, nil, []string{"the tree sets no Release=", "--release"}},
		{"an unknown image", caa, nil, func(t *testing.T, dir string) []string {
			return intoArgs(t, dir, "--image", "nope")
		}, []string{"--image nope", "initrd, system"}},
		{"no bootable image and none named system", caa, func(dir string) {
			if err := os.Rename(filepath.Join(dir, "mkosi.images", "system"), filepath.Join(dir, "mkosi.images", "root")); err != nil {
				t.Fatal(err)
			}
			write(dir, "mkosi.images/root/mkosi.conf", "[Output]\nFormat=directory\n")
		}, nil, []string{"--image", "initrd, root", "not exactly one is bootable"}},
		{"an image of one file", caa, func(dir string) {
			write(dir, "mkosi.images/extra.conf", "[Output]\nFormat=disk\n")
		}, func(t *testing.T, dir string) []string { return intoArgs(t, dir, "--image", "extra") }, []string{"mkosi.images/extra.conf is a single file"}},
		{"--image on a tree of one image", func(t *testing.T) string { return oneImageTree(t) }, nil, func(t *testing.T, dir string) []string {
			return intoArgs(t, dir, "--image", "system")
		}, []string{"--image system", "no mkosi.images"}},
		{"not a mkosi tree", func(t *testing.T) string { return t.TempDir() }, nil, nil, []string{"no mkosi.conf or mkosi.conf.d"}},
		{"--remove with no layer", caa, nil, func(t *testing.T, dir string) []string {
			return []string{"--into", dir, "--remove"}
		}, []string{"has no GPU layer", "nothing was changed"}},
		{"a record that leads out of the tree", caa, func(dir string) {
			write(dir, layerRecord, "file 00 ../outside\n")
		}, nil, []string{layerRecord, "not a path inside the tree", "nothing was changed"}},
		{"a record that is a link", caa, func(dir string) {
			if err := os.Symlink("/etc/passwd", filepath.Join(dir, layerRecord)); err != nil {
				t.Fatal(err)
			}
		}, func(t *testing.T, dir string) []string { return []string{"--into", dir, "--remove"} }, []string{layerRecord}},
		{"--remove without --into", caa, nil, func(t *testing.T, dir string) []string {
			return []string{"--output", dir, "--remove"}
		}, []string{"--image, --layer-profile and --remove go with --into"}},
		{"--layer-profile without --into", caa, nil, func(t *testing.T, dir string) []string {
			return []string{"--output", dir, "--layer-profile", "always"}
		}, []string{"--image, --layer-profile and --remove go with --into"}},
		{"--layer-profile not a name", caa, nil, func(t *testing.T, dir string) []string {
			return intoArgs(t, dir, "--layer-profile", "../x")
		}, []string{`--layer-profile "../x": not a profile name`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := tc.tree(t)
			if tc.edit != nil {
				tc.edit(dir)
			}
			before := snapshot(t, dir)
			args := intoArgs(t, dir)
			if tc.args != nil {
				args = tc.args(t, dir)
			}
			rc, out := runInto(t, args)
			if rc == 0 {
				t.Fatalf("rc 0, want a refusal; output:\n%s", out)
			}
			for _, w := range tc.wants {
				if !strings.Contains(out, w) {
					t.Errorf("the message lacks %q:\n%s", w, out)
				}
			}
			if after := snapshot(t, dir); !mapsEqual(before, after) {
				t.Errorf("a refused run changed the tree: %v", diffKeys(before, after))
			}
		})
	}
}

// TestIntoSummary has real mkosi, 25 and 27 (and any source checkout of
// PODVM_MKOSI_SOURCES, such as v26), read the CAA-shaped tree with the
// layer, as Debian trixie and as Ubuntu resolute (the release
// cloud-api-adaptor builds): with the profile, the system image runs our
// scripts after its own and the initrd image gets nothing of the layer;
// without it, the tree is the tree's own.
func TestIntoSummary(t *testing.T) {
	for _, tc := range []struct {
		name, conf string
		driver     string // a package of the driver in Packages=, "" where the build picks it
	}{
		{"debian trixie", "", "nvidia-kernel-dkms"},
		{"ubuntu resolute", "[Distribution]\nDistribution=ubuntu\nRelease=resolute\nArchitecture=x86-64\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyTree(t, filepath.Join("testdata", "caa-shaped"))
			if tc.conf != "" {
				if err := os.WriteFile(filepath.Join(dir, "mkosi.conf"), []byte(tc.conf), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			// With the module cache on, the layer mounts it: BuildSources=
			// is set, and its first entry must still be the tree.
			if rc, out := runInto(t, intoArgs(t, dir, "--build-cache", "auto", "--build-cache-dir", t.TempDir())); rc != 0 {
				t.Fatalf("--into: rc %d\n%s", rc, out)
			}
			for _, m := range parsingMkosis(t) {
				t.Run("mkosi "+m.name, func(t *testing.T) {
					checkIntoSummary(t, m.argv, dir, tc.driver, map[string]bool{Profile: true, "debug," + Profile: true, "": false})
				})
			}
		})
	}
}

// TestIntoLayerProfile: --layer-profile switches the layer on with one of
// the tree's own profiles (cloud-api-adaptor's make image passes
// --profile production and nothing else), or always; real mkosi reads
// the tree so. A profile the tree does not define is refused, naming the
// ones it does, and the tree is left as it was.
func TestIntoLayerProfile(t *testing.T) {
	for _, tc := range []struct {
		with   string
		active map[string]bool // --profile value: the layer is on
	}{
		{"debug", map[string]bool{"debug": true, "": false}},
		{AlwaysActive, map[string]bool{"": true, "debug": true}},
	} {
		t.Run(tc.with, func(t *testing.T) {
			dir := copyTree(t, filepath.Join("testdata", "caa-shaped"))
			if rc, out := runInto(t, intoArgs(t, dir, "--build-cache", "auto", "--build-cache-dir", t.TempDir(), "--layer-profile", tc.with)); rc != 0 {
				t.Fatalf("--into --layer-profile %s: rc %d\n%s", tc.with, rc, out)
			}
			for _, m := range parsingMkosis(t) {
				t.Run("mkosi "+m.name, func(t *testing.T) { checkIntoSummary(t, m.argv, dir, "nvidia-kernel-dkms", tc.active) })
			}
		})
	}
	dir := copyTree(t, filepath.Join("testdata", "caa-shaped"))
	before := snapshot(t, dir)
	rc, out := runInto(t, intoArgs(t, dir, "--layer-profile", "production"))
	if rc != 2 || !strings.Contains(out, `--layer-profile "production": the tree defines no such profile (its profiles: debug)`) {
		t.Errorf("--layer-profile production on a tree without it: rc %d\n%s", rc, out)
	}
	if after := snapshot(t, dir); !maps.Equal(before, after) {
		t.Error("a refused --layer-profile changed the tree")
	}
}

// checkIntoSummary reads the tree with real mkosi under each --profile
// value of active, and checks the layer is on (its scripts and packages in
// the system image, the module cache mounted) exactly where active says.
func checkIntoSummary(t *testing.T, argv []string, dir, driver string, active map[string]bool) {
	t.Helper()
	own := filepath.Join(dir, "mkosi.images", "system")
	layer := filepath.Join(own, "mkosi.conf.d", LayerDropIn)
	postinst := []string{filepath.Join(own, "mkosi.postinst.chroot"), filepath.Join(layer, "mkosi.postinst.d", "50-podvm.sh")}
	finalize := []string{filepath.Join(own, "mkosi.finalize.chroot"), filepath.Join(layer, "mkosi.finalize.d", "50-podvm-check.sh")}
	for _, profile := range slices.Sorted(maps.Keys(active)) {
		on := active[profile]
		args := []string{"--json", "summary"}
		if profile != "" {
			args = append([]string{"--profile", profile}, args...)
		}
		out, stderr := runMkosi(t, argv, dir, args...)
		var s struct {
			Images []struct {
				Image                   string
				Packages                []string
				PostInstallationScripts []string
				FinalizeScripts         []string
				BuildSources            []struct{ Source, Target string }
			}
		}
		if err := json.Unmarshal(out, &s); err != nil {
			t.Fatalf("summary: %v\n%s", err, stderr)
		}
		found := 0
		for _, im := range s.Images {
			ours := slices.Contains(im.PostInstallationScripts, postinst[1])
			wantOurs := on && im.Image == "system"
			if ours != wantOurs {
				t.Errorf("profile %q: image %q runs our post-installation script: %v, want %v (%v)", profile, im.Image, ours, wantOurs, im.PostInstallationScripts)
			}
			if wantOurs {
				found++
				if driver != "" && !slices.Contains(im.Packages, driver) {
					t.Errorf("system image: no %s in packages %v", driver, im.Packages)
				}
				// The order docs/mkosi.md gives: the image's own scripts
				// first, then the layer's.
				if !slices.Equal(im.PostInstallationScripts, postinst) || !slices.Equal(im.FinalizeScripts, finalize) {
					t.Errorf("system image scripts: post-installation %v, finalize %v; want the tree's own first, then the layer's", im.PostInstallationScripts, im.FinalizeScripts)
				}
			}
			if on && (len(im.BuildSources) != 2 || im.BuildSources[0].Source != dir || im.BuildSources[1].Target != "mkosi.conf.d/"+LayerDropIn+"/mnt/podvm-module-cache") {
				t.Errorf("image %q: build sources %+v, want the tree first, then the module cache", im.Image, im.BuildSources)
			}
			if im.Image == "initrd" && slices.ContainsFunc(im.Packages, func(p string) bool { return strings.Contains(p, "nvidia") }) {
				t.Errorf("the initrd image got NVIDIA packages: %v", im.Packages)
			}
		}
		if on && found != 1 {
			t.Errorf("profile %q: the system image is not in the summary", profile)
		}
		if strings.Contains(stderr, "Setting") || strings.Contains(stderr, "Unknown") {
			t.Errorf("mkosi warns: %s", stderr)
		}
	}
}
