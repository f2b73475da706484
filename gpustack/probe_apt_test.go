package gpustack_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podvm-gpu/packer-plugin-podvm/aptrepo"
	"github.com/podvm-gpu/packer-plugin-podvm/gpustack"
)

// TestDriverProbeWithRealApt runs the driver source probe, the text both
// back ends run, with the real apt-cache against a signed repository
// that has Canonical's precompiled modules package for one kernel only.
func TestDriverProbeWithRealApt(t *testing.T) {
	for _, tool := range []string{"apt-get", "apt-cache", "dpkg-deb"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed (HOST_PACKAGES installs it): %v", tool, err)
		}
	}
	const (
		template = "linux-modules-nvidia-570-server-open-{kernel}"
		have     = "6.8.0-50-generic"
		lack     = "6.8.0-51-generic"
	)
	dir := t.TempDir()
	for d := dir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		// apt's _apt sandbox reads the repository.
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	debs, repo := filepath.Join(dir, "debs"), filepath.Join(dir, "repo")
	pkg := filepath.Join(debs, "pkg")
	must(t, os.MkdirAll(filepath.Join(pkg, "DEBIAN"), 0o755))
	name := strings.ReplaceAll(template, "{kernel}", have)
	must(t, os.WriteFile(filepath.Join(pkg, "DEBIAN", "control"), []byte(fmt.Sprintf(
		"Package: %s\nVersion: 6.8.0-50.51\nArchitecture: all\nMaintainer: test <test@example.org>\nDescription: stand-in for Canonical's precompiled modules\n", name)), 0o644))
	if out, err := exec.Command("dpkg-deb", "--root-owner-group", "--build", pkg, filepath.Join(debs, name+".deb")).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb: %v\n%s", err, out)
	}
	now := time.Now()
	signer, err := aptrepo.NewEphemeralSigner("probe test", now)
	must(t, err)
	_, err = aptrepo.Build(context.Background(), aptrepo.Options{Debs: []string{filepath.Join(debs, name+".deb")}, Out: repo, Date: now, Signer: signer})
	must(t, err)

	root := filepath.Join(dir, "apt")
	for _, d := range []string{"etc/apt.conf.d", "etc/preferences.d", "etc/sources.list.d", "state/lists/partial", "cache/archives/partial", "log"} {
		must(t, os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	must(t, os.WriteFile(filepath.Join(root, "etc/sources.list"), nil, 0o644))
	must(t, os.WriteFile(filepath.Join(root, "state/status"), nil, 0o644))
	must(t, os.WriteFile(filepath.Join(root, "etc/sources.list.d/local.sources"), []byte(
		"Types: deb\nURIs: file://"+repo+"\nSuites: ./\nSigned-By: "+filepath.Join(repo, aptrepo.KeyringFile)+"\n"), 0o644))
	conf := filepath.Join(root, "apt.conf")
	c := fmt.Sprintf("Dir \"/\";\nDir::Etc \"%[1]s/etc\";\nDir::Etc::main \"/dev/null\";\nDir::Etc::Parts \"%[1]s/etc/apt.conf.d\";\n"+
		"Dir::State \"%[1]s/state\";\nDir::State::status \"%[1]s/state/status\";\nDir::Cache \"%[1]s/cache\";\nDir::Log \"%[1]s/log\";\n"+
		"Debug::NoLocking \"true\";\nAcquire::Languages \"none\";\n", root)
	if os.Geteuid() != 0 {
		c += "APT::Sandbox::User \"\";\n"
	}
	must(t, os.WriteFile(conf, []byte(c), 0o644))
	env := append(os.Environ(), "APT_CONFIG="+conf)
	update := exec.Command("apt-get", "update")
	update.Env = env
	if out, err := update.CombinedOutput(); err != nil || strings.Contains(string(out), "W:") {
		t.Fatalf("apt-get update: %v\n%s", err, out)
	}

	choice := gpustack.ChooseDriver{Modules: template}
	for _, tt := range []struct {
		kernels []string
		want    string
	}{
		{[]string{have}, gpustack.TakenPrecompiled},
		{[]string{lack}, gpustack.TakenDistro},
		// Every targeted kernel needs it: one without falls back for all.
		{[]string{have, lack}, gpustack.TakenDistro},
	} {
		cmd := exec.Command("sh", "-c", choice.ProbeCommand()+" "+strings.Join(tt.kernels, " "))
		cmd.Env = env
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("probe for %v: %v\n%s", tt.kernels, err, stderr.String())
		}
		// The explanations come first, the source taken last.
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if got := lines[len(lines)-1]; got != tt.want || (len(lines) != len(tt.kernels)+1 && tt.want == gpustack.TakenPrecompiled) {
			t.Errorf("probe for %v: %q; want %q\n%s", tt.kernels, got, tt.want, stderr.String())
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
