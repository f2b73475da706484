package rootfs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podvm-gpu/packer-plugin-podvm/chroot/chroottest"
)

func TestImageHygiene(t *testing.T) {
	chroottest.RequireRoot(t) // files are made root-owned
	root := t.TempDir()
	planted := map[string]string{
		"etc/machine-id":                   "0123456789abcdef0123456789abcdef\n",
		"var/lib/dbus/machine-id":          "0123456789abcdef0123456789abcdef\n",
		"etc/ssh/ssh_host_ed25519_key":     "private",
		"etc/ssh/ssh_host_ed25519_key.pub": "public",
		"var/lib/apt/lists/deb.debian.org_debian_dists_trixie_InRelease": "lists",
		"var/lib/apt/lists/partial/half":                                 "half",
		"var/cache/apt/pkgcache.bin":                                     "cache",
		"var/cache/apt/archives/linux-image_1_amd64.deb":                 "deb",
	}
	keep := []string{"var/lib/apt/lists/lock", "var/cache/apt/archives/lock", "etc/ssh/sshd_config"}
	for _, p := range append(keep, "var/cache/apt/archives/partial/.keep") {
		planted[p] = "keep"
	}
	for p, c := range planted {
		must(t, os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755))
		must(t, os.WriteFile(filepath.Join(root, p), []byte(c), 0o600))
	}
	got := strings.Join(hygieneProblems(root), "\n")
	for _, want := range []string{"/etc/machine-id is not empty", "/var/lib/dbus/machine-id", "/etc/ssh/ssh_host_ed25519_key: an SSH host key",
		"ssh_host_ed25519_key.pub", "/var/lib/apt/lists/deb.debian.org", "/var/lib/apt/lists/partial/half", "pkgcache.bin", "linux-image_1_amd64.deb"} {
		if !strings.Contains(got, want) {
			t.Errorf("problems lack %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "lock") || strings.Contains(got, "sshd_config") {
		t.Errorf("problems name what apt or sshd need:\n%s", got)
	}

	must(t, scrubImage(root))
	if p := hygieneProblems(root); len(p) > 0 {
		t.Errorf("after scrubbing: %v", p)
	}
	fi, err := os.Stat(filepath.Join(root, "etc/machine-id"))
	if err != nil || fi.Size() != 0 || fi.Mode().Perm() != 0o444 {
		t.Errorf("machine-id: %v %v", fi, err)
	}
	for _, p := range append(keep, "var/lib/apt/lists/partial", "var/cache/apt/archives/partial") {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("%s removed: %v", p, err)
		}
	}
}

// A machine-id link out of the tree is replaced, never written through.
func TestScrubImageLink(t *testing.T) {
	chroottest.RequireRoot(t)
	root := t.TempDir()
	outside := filepath.Join(t.TempDir(), "host-machine-id")
	must(t, os.WriteFile(outside, []byte("host id\n"), 0o444))
	must(t, os.MkdirAll(filepath.Join(root, "etc"), 0o755))
	must(t, os.Symlink(outside, filepath.Join(root, "etc/machine-id")))
	must(t, scrubImage(root))
	if b, _ := os.ReadFile(outside); string(b) != "host id\n" {
		t.Errorf("wrote through the link: %q", b)
	}
	if p := hygieneProblems(root); len(p) > 0 {
		t.Errorf("after scrubbing: %v", p)
	}
}

// A private key anywhere in the tree fails the build; scrubbing does not
// hide it.
func TestHygieneFindsPrivateKeys(t *testing.T) {
	chroottest.RequireRoot(t)
	root := t.TempDir()
	key := "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n"
	must(t, os.MkdirAll(filepath.Join(root, "var/lib/dkms"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "var/lib/dkms/mok.key"), []byte(key), 0o600))
	must(t, scrubImage(root))
	got := strings.Join(hygieneProblems(root), "\n")
	if !strings.Contains(got, "/var/lib/dkms/mok.key: private key material (PEM BEGIN PRIVATE KEY)") {
		t.Errorf("problems:\n%s", got)
	}
}

// A directory link in the tree is followed inside the tree, as the image
// would see it: the host's files behind the same absolute path are never
// removed.
func TestScrubImageDirectoryLink(t *testing.T) {
	chroottest.RequireRoot(t)
	root := t.TempDir()
	host := t.TempDir() // stands for the host's /etc/ssh
	must(t, os.WriteFile(filepath.Join(host, "ssh_host_ed25519_key"), []byte("host key"), 0o600))
	must(t, os.MkdirAll(filepath.Join(root, "etc"), 0o755))
	must(t, os.Symlink(host, filepath.Join(root, "etc/ssh")))
	// The same path inside the tree holds the image's key.
	must(t, os.MkdirAll(filepath.Join(root, host), 0o755))
	must(t, os.WriteFile(filepath.Join(root, host, "ssh_host_ed25519_key"), []byte("image key"), 0o600))
	must(t, scrubImage(root))
	if b, err := os.ReadFile(filepath.Join(host, "ssh_host_ed25519_key")); err != nil || string(b) != "host key" {
		t.Fatalf("the host's key behind the link was touched: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(root, host, "ssh_host_ed25519_key")); !os.IsNotExist(err) {
		t.Errorf("the image's key (through the link, inside the tree) is still there: %v", err)
	}
}
