package gpu

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"

	"github.com/podvm-gpu/packer-plugin-podvm/aptsource"
	"github.com/podvm-gpu/packer-plugin-podvm/chroot"
	"github.com/podvm-gpu/packer-plugin-podvm/chroot/chroottest"
)

// TestSmokeChroot runs the provisioner for real, through the project's
// chroot communicator, on a Debian trixie minbase tree: the tarball named
// by PODVM_SMOKE_TARBALL, else the podvm-rootfs builder's newest cached
// base tree under $PODVM_CACHE (default ~/.cache/podvm), else a fresh debootstrap from the host's
// Debian mirror.
//
//	go test ./provisioner/gpu -run TestSmokeChroot -v -timeout 30m
//
// It needs root and the distro archive (make check runs it). It bakes the
// repository (GPU off, so no NVIDIA repositories are needed) for the
// archive's current kernel, runs the offline apt self-test, then runs a
// second time to check the provisioner is idempotent. With
// PODVM_SMOKE_GPU=1 it installs the GPU stack from the distro archive too
// (DKMS build: about 10 minutes on 2 cores), without the container
// toolkit, whose repository is NVIDIA's.
func TestSmokeChroot(t *testing.T) {
	chroottest.RequireRoot(t)
	root := filepath.Join(t.TempDir(), "root")
	sh := func(cmd string) string {
		t.Helper()
		out, err := exec.Command("sh", "-ec", cmd).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", cmd, err, out)
		}
		return string(out)
	}
	if tarball := smokeTarball(); tarball != "" {
		t.Logf("base tree from %s", tarball)
		sh("mkdir -p " + root + " && tar --zstd -xpf " + tarball + " -C " + root)
	} else {
		chroottest.RequireTools(t, "debootstrap")
		mirror, _ := aptsource.ArchiveMirror(aptsource.Read(aptsource.Dir), "debian", "trixie")
		t.Logf("no cached base tree: debootstrap trixie from %s", orDefaultMirror(mirror))
		start := time.Now()
		sh("debootstrap --variant=minbase trixie " + root + " " + mirror + " >/dev/null")
		t.Logf("debootstrap took %s", time.Since(start).Round(time.Second))
	}
	for _, m := range []string{"proc", "sys", "dev"} {
		sh("mount --rbind /" + m + " " + root + "/" + m + " && mount --make-rslave " + root + "/" + m)
	}
	t.Cleanup(func() {
		for _, m := range []string{"dev", "sys", "proc"} {
			exec.Command("umount", "-R", "-l", root+"/"+m).Run()
		}
	})
	sh("cp -L /etc/resolv.conf " + root + "/etc/resolv.conf")
	// A pod VM image has systemd; the plan enables units with systemctl.
	sh("chroot " + root + " env DEBIAN_FRONTEND=noninteractive apt-get -qy update >/dev/null")
	sh("chroot " + root + " env DEBIAN_FRONTEND=noninteractive apt-get -qy install --no-install-recommends systemd >/dev/null")
	// The tree has no kernel; pretend to have the archive's current one,
	// which is what the repository is baked for.
	kver := strings.TrimSpace(sh(`chroot ` + root + ` apt-cache depends linux-image-amd64 | sed -n 's/^  Depends: linux-image-\(.*\)$/\1/p' | grep -v unsigned | head -1`))
	if kver == "" {
		t.Fatal("no kernel found in the archive")
	}
	sh("mkdir -p " + root + "/usr/lib/modules/" + kver + " && : > " + root + "/boot/vmlinuz-" + kver)
	t.Logf("kernel %s", kver)
	settings := map[string]interface{}{
		"enable_nvidia_gpu":   "no",
		"local_repo":          "yes",
		"local_repo_packages": []string{"linux-headers-{kernel}"},
	}
	if os.Getenv("PODVM_SMOKE_GPU") != "" {
		// The GPU stack from the distro archive; NVIDIA's toolkit
		// repository is not reachable from every build machine.
		settings = map[string]interface{}{"nvidia_container_toolkit": "no"}
	}

	comm, err := chroot.New(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer comm.Close()
	out := t.TempDir()
	var inRelease []byte
	for run := 1; run <= 2; run++ {
		p := &Provisioner{}
		settings["output_dir"] = out
		if err := p.Prepare(settings); err != nil {
			t.Fatal(err)
		}
		ui := &testUi{t: t}
		start := time.Now()
		// As the podvm-rootfs builder generates it for its chroot.
		if err := p.Provision(context.Background(), ui, comm, map[string]interface{}{generatedChroot: "true"}); err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		t.Logf("run %d took %s", run, time.Since(start).Round(time.Second))
		if !slices.ContainsFunc(ui.said, func(s string) bool { return strings.Contains(s, "the target is the podvm-rootfs chroot") }) {
			t.Errorf("run %d: the provisioner did not see that its target is a chroot", run)
		}
		// The second run resolves the same .debs, so it must keep the
		// repository as signed: a re-signed one would have a new InRelease.
		got, err := os.ReadFile(filepath.Join(root, "opt/local-packages/InRelease"))
		if err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		if run == 2 && string(got) != string(inRelease) {
			t.Error("the second run re-signed the repository; it should have kept it")
		}
		inRelease = got
	}
	t.Log(sh("ls -la " + root + "/opt/local-packages | head -20; ls " + root + "/opt/local-packages | wc -l; ls " + root + "/opt; ls " + out))
}

// testUi logs what the provisioner says; nothing else is used.
type testUi struct {
	packersdk.Ui
	t      *testing.T
	said   []string
	errors []string
}

func (u *testUi) Say(s string)     { u.said = append(u.said, s); u.t.Log(s) }
func (u *testUi) Message(s string) { u.t.Log(s) }
func (u *testUi) Error(s string)   { u.errors = append(u.errors, s); u.t.Log("error: " + s) }

// smokeTarball is PODVM_SMOKE_TARBALL, else the newest trixie minbase tree
// in the builder's cache, else "".
func smokeTarball() string {
	if t := os.Getenv("PODVM_SMOKE_TARBALL"); t != "" {
		return t
	}
	cache := os.Getenv("PODVM_CACHE")
	if cache == "" {
		d, err := os.UserCacheDir()
		if err != nil {
			return ""
		}
		cache = filepath.Join(d, "podvm")
	}
	matches, _ := filepath.Glob(filepath.Join(cache, "rootfs", "debootstrap-trixie-minbase-amd64-*.tar.zst"))
	if len(matches) == 0 {
		return ""
	}
	sort.Strings(matches) // the UTC day is in the name
	return matches[len(matches)-1]
}

func orDefaultMirror(m string) string {
	if m == "" {
		return "debootstrap's default mirror"
	}
	return m
}
