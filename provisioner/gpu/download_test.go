package gpu

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/podvm-gpu/packer-plugin-podvm/bake"
	"github.com/podvm-gpu/packer-plugin-podvm/chroot/chroottest"
	"github.com/podvm-gpu/packer-plugin-podvm/gpustack"
	"github.com/podvm-gpu/packer-plugin-podvm/imagestep"
)

// TestDownloadWithRealApt runs the repository's download, the commands
// both back ends run (imagestep.DownloadCommands), with the real apt
// against a signed repository standing in for the archive: the closure
// brings the dependencies, alone the named packages come alone, an epoch's
// %3a becomes the pool name, and apt's scratch state does not stay.
func TestDownloadWithRealApt(t *testing.T) {
	chroottest.RequireTools(t, "apt-get", "dpkg-deb")
	archive := signedRepo(t, [][3]string{
		{"linux-headers-6.12.57+deb13-amd64", "6.12.57-1", "linux-headers-6.12.57+deb13-common, libattr1"},
		{"linux-headers-6.12.57+deb13-common", "6.12.57-1", ""},
		{"libattr1", "1:2.5.2-3", ""},
		{"unrelated", "1.0-1", ""},
	})
	// apt confined to a directory of its own: the archive its only
	// source; nothing of the host's apt read or written.
	cfg := t.TempDir()
	for _, d := range []string{"lists/partial", "cache", "parts", "sources.list.d", "preferences.d"} {
		if err := os.MkdirAll(filepath.Join(cfg, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	conf := strings.Join([]string{
		`Dir::Etc::Parts "` + cfg + `/parts";`,
		`Dir::Etc::SourceList "` + cfg + `/none.list";`,
		`Dir::Etc::SourceParts "` + cfg + `/sources.list.d";`,
		`Dir::Etc::Preferences "` + cfg + `/none.pref";`,
		`Dir::Etc::PreferencesParts "` + cfg + `/preferences.d";`,
		`Dir::State::Lists "` + cfg + `/lists";`,
		`Dir::State::status "` + cfg + `/status";`,
		`Dir::Cache "` + cfg + `/cache";`,
		`APT::Architecture "amd64";`,
		`APT::Sandbox::User "root";`,
		`Acquire::Languages "none";`,
		`Debug::NoLocking "1";`,
	}, "\n") + "\n"
	files := map[string]string{
		"apt.conf": conf,
		"status":   "",
		// copy: as a mirror's http: would, apt copies the .debs into its
		// archives; from a file: source it would use them in place.
		"sources.list.d/local.sources": strings.Replace(bake.Sources(archive, filepath.Join(archive, "keyring.gpg")), "file://", "copy://", 1),
	}
	for p, c := range files {
		if err := os.WriteFile(filepath.Join(cfg, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env := append(os.Environ(), "APT_CONFIG="+filepath.Join(cfg, "apt.conf"))
	update := exec.Command("apt-get", "-q", "update")
	update.Env = env
	if out, err := update.CombinedOutput(); err != nil {
		t.Fatalf("apt-get update: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		name    string
		closure bool
		want    []string
	}{
		{"closure", true, []string{"libattr1_2.5.2-3_amd64.deb", "linux-headers-6.12.57+deb13-amd64_6.12.57-1_amd64.deb", "linux-headers-6.12.57+deb13-common_6.12.57-1_amd64.deb"}},
		{"named only", false, []string{"linux-headers-6.12.57+deb13-amd64_6.12.57-1_amd64.deb"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "repo.podvm-new")
			b := gpustack.BakeRepo{Packages: []string{"linux-headers-6.12.57+deb13-amd64"}, Closure: tc.closure}
			cmd := exec.Command("sh", "-c", imagestep.DownloadCommands(b, dir, "apt-get -q").Script())
			cmd.Env = env
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("download: %v\n%s", err, out)
			}
			if err := bake.ToPoolNames(dir); err != nil {
				t.Fatal(err)
			}
			ents, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range ents {
				got = append(got, e.Name())
				if fi, err := e.Info(); err != nil || fi.Mode().Perm()&0o044 != 0o044 {
					t.Errorf("%s: mode %v, want readable by all", e.Name(), fi.Mode())
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("downloaded %v, want %v", got, tc.want)
			}
		})
	}
}
