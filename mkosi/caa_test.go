package mkosi

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/podvm-gpu/packer-plugin-podvm/modcache"
)

// caaProfiles are the profiles a cloud-api-adaptor build selects on the
// command line: its own production one and ours.
const caaProfiles = "--profile=production," + Profile

// TestCAAShapedTree puts the GPU profile of the Ubuntu 26.04 tree, as
// rendered, into the system image of a multi-image tree shaped like
// cloud-api-adaptor's pod VM tree (testdata/caa-shaped) and checks what each
// mkosi of parsingMkosis says. These are the facts a generator that adds its
// layer to such a tree must respect (checked with 25.3, 26 and 27.1):
//   - the tree parses on its own;
//   - the profile as rendered is refused: SourceDateEpoch=, ExtraSearchPaths=,
//     WithNetwork= and BuildSources= belong to the top level;
//   - with them in a top-level drop-in matched on the profile, the tree
//     parses and the system image picks up the profile's packages, scripts,
//     extra and skeleton trees, but not its sandbox tree, which mkosi reads
//     at the top level only.
func TestCAAShapedTree(t *testing.T) {
	mkosis := parsingMkosis(t)
	tree := t.TempDir()
	if err := os.CopyFS(tree, os.DirFS(filepath.Join("testdata", "caa-shaped"))); err != nil {
		t.Fatal(err)
	}
	for _, m := range mkosis {
		out, stderr := runMkosi(t, m.argv, tree, "--profile=production", "--json", "summary")
		if names := imageNames(t, out); !slices.Contains(names, "initrd") || !slices.Contains(names, "system") || stderr != "" {
			t.Fatalf("mkosi %s: the CAA-shaped tree alone: images %v, stderr %q", m.name, names, stderr)
		}
	}

	profileDir := filepath.Join(tree, "mkosi.images", "system", "mkosi.profiles", Profile)
	addProfile(t, profileDir)
	for _, m := range mkosis {
		_, stderr, err := tryMkosi(m.argv, tree, caaProfiles, "summary")
		if err == nil || !strings.Contains(stderr, filepath.Join(profileDir, "mkosi.conf")) || !strings.Contains(stderr, "cannot be configured in") {
			t.Errorf("mkosi %s: want the profile's top-level settings refused in the system image, got %v:\n%s", m.name, err, stderr)
		}
	}

	moveTopLevelSettings(t, tree, profileDir)
	for _, m := range mkosis {
		out, stderr := runMkosi(t, m.argv, tree, caaProfiles, "--json", "summary")
		if stderr != "" {
			t.Errorf("mkosi %s printed on stderr:\n%s", m.name, stderr)
		}
		checkCAASystemImage(t, m.name, out, profileDir)
	}
}

// addProfile renders the Ubuntu 26.04 GPU tree and copies its profile
// directory to dir.
func addProfile(t *testing.T, dir string) {
	t.Helper()
	rendered := t.TempDir()
	cache := t.TempDir()
	if err := os.MkdirAll(modcache.Dir(cache), 0o755); err != nil {
		t.Fatal(err)
	}
	c := treeCase{distro: "ubuntu", release: "26.04", gpu: "yes"}
	if err := Write(rendered, c.render(t, filepath.Join(t.TempDir(), "packer-plugin-podvm"), cache), false); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(dir, os.DirFS(filepath.Join(rendered, "mkosi.profiles", Profile))); err != nil {
		t.Fatal(err)
	}
}

// topLevelSettings are the settings of the rendered profile that mkosi
// refuses in a subimage.
var topLevelSettings = []string{"SourceDateEpoch", "ExtraSearchPaths", "WithNetwork", "BuildSources"}

// moveTopLevelSettings moves the topLevelSettings lines of the profile's
// mkosi.conf, under their sections, into a top-level drop-in that applies
// with the profile. Its paths only have to exist for mkosi summary.
func moveTopLevelSettings(t *testing.T, tree, profileDir string) {
	t.Helper()
	conf := filepath.Join(profileDir, "mkosi.conf")
	data, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	var keep, moved strings.Builder
	section, movedSection := "", ""
	for _, line := range strings.SplitAfter(string(data), "\n") {
		if strings.HasPrefix(line, "[") {
			section = line
		}
		key, _, _ := strings.Cut(line, "=")
		if !slices.Contains(topLevelSettings, key) {
			keep.WriteString(line)
			continue
		}
		if section != movedSection {
			moved.WriteString("\n" + section)
			movedSection = section
		}
		moved.WriteString(strings.ReplaceAll(line, "BuildSources=../..", "BuildSources="+profileDir))
	}
	if moved.Len() == 0 {
		t.Fatalf("%s sets none of %v:\n%s", conf, topLevelSettings, data)
	}
	if err := os.WriteFile(conf, []byte(keep.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(tree, "mkosi.conf.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	dropIn := "[Match]\nProfiles=" + Profile + "\n" + moved.String()
	if err := os.WriteFile(filepath.Join(tree, "mkosi.conf.d", "50-podvm-gpu.conf"), []byte(dropIn), 0o644); err != nil {
		t.Fatal(err)
	}
}

// checkCAASystemImage checks the system image of the summary: the profile's
// packages, scripts and trees are there, the profile's sandbox tree is not.
func checkCAASystemImage(t *testing.T, version string, out []byte, profileDir string) {
	t.Helper()
	var s summary
	if err := json.Unmarshal(out, &s); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(s.Images, func(img summaryImage) bool { return img.Image == "system" })
	if i < 0 {
		t.Fatalf("mkosi %s: no system image in %s", version, out)
	}
	img := s.Images[i]
	sources := func(trees []struct{ Source string }) []string {
		var l []string
		for _, tr := range trees {
			l = append(l, tr.Source)
		}
		return l
	}
	if !slices.Contains(img.Profiles, Profile) || !img.WithNetwork ||
		!slices.ContainsFunc(img.Packages, func(p string) bool { return strings.HasPrefix(p, "nvidia-container-toolkit=") }) ||
		!slices.Equal(img.PostInstallationScripts, []string{filepath.Join(profileDir, "mkosi.postinst.d", "50-podvm.sh")}) ||
		!slices.Equal(img.FinalizeScripts, []string{filepath.Join(profileDir, "mkosi.finalize.d", "50-podvm-check.sh")}) ||
		!slices.Contains(sources(img.ExtraTrees), filepath.Join(profileDir, "mkosi.extra")) ||
		!slices.Contains(sources(img.SkeletonTrees), filepath.Join(profileDir, "mkosi.skeleton")) {
		t.Errorf("mkosi %s: the system image lacks the profile: profiles %v network %v packages %v postinst %v finalize %v extra %v skeleton %v",
			version, img.Profiles, img.WithNetwork, img.Packages, img.PostInstallationScripts, img.FinalizeScripts, sources(img.ExtraTrees), sources(img.SkeletonTrees))
	}
	if slices.Contains(sources(img.SandboxTrees), filepath.Join(profileDir, "mkosi.sandbox")) {
		t.Errorf("mkosi %s now reads a subimage profile's mkosi.sandbox (%v): the layer may keep it there", version, sources(img.SandboxTrees))
	}
}

// imageNames lists the names of the summary's images.
func imageNames(t *testing.T, out []byte) []string {
	t.Helper()
	var s summary
	if err := json.Unmarshal(out, &s); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, img := range s.Images {
		names = append(names, img.Image)
	}
	return names
}
