package gpustack

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/podvm-gpu/packer-plugin-podvm/settings"
	"github.com/podvm-gpu/packer-plugin-podvm/shellquote"
)

// actionsOf collects the actions of type T in the plan, conditional ones
// included, with the branch they are kept to ("" for unconditional).
func actionsOf[T Action](p *Plan) (found []T, branches []string) {
	var walk func(branch string, as []Action)
	walk = func(branch string, as []Action) {
		for _, a := range as {
			switch a := a.(type) {
			case T:
				found = append(found, a)
				branches = append(branches, branch)
			case IfDriverSource:
				walk(a.Source, a.Actions)
			}
		}
	}
	for _, s := range p.Steps {
		walk("", s.Actions)
	}
	return found, branches
}

func TestAutoDriverSource(t *testing.T) {
	noble := goldenTargets[3]
	jammy := goldenTargets[2] // two kernels
	tests := []struct {
		name        string
		target      Target
		env         map[string]string
		modules     string
		precompiled []string
		dkms        []string
		kernels     []string
	}{
		{name: "noble 570 open", target: noble, env: map[string]string{},
			modules:     "linux-modules-nvidia-570-server-open-{kernel}",
			precompiled: []string{"nvidia-headless-no-dkms-570-server-open", "nvidia-utils-570-server"},
			dkms:        []string{"linux-headers-6.8.0-1028-azure", "nvidia-headless-570-server-open", "nvidia-utils-570-server", "openssl"},
			kernels:     []string{"6.8.0-1028-azure"}},
		{name: "noble 570 proprietary", target: noble, env: map[string]string{"NVIDIA_KERNEL_MODULES": "proprietary"},
			modules:     "linux-modules-nvidia-570-server-{kernel}",
			precompiled: []string{"nvidia-headless-no-dkms-570-server", "nvidia-utils-570-server"},
			dkms:        []string{"linux-headers-6.8.0-1028-azure", "nvidia-headless-570-server", "nvidia-utils-570-server", "openssl"},
			kernels:     []string{"6.8.0-1028-azure"}},
		{name: "jammy 535 proprietary, all kernels, unsigned", target: jammy,
			env:         map[string]string{"NVIDIA_KERNEL_MODULES": "proprietary", "PODVM_KERNELS": "all", "NVIDIA_MODULE_SIGNING": "none"},
			modules:     "linux-modules-nvidia-535-server-{kernel}",
			precompiled: []string{"nvidia-headless-no-dkms-535-server", "nvidia-utils-535-server"},
			dkms:        []string{"linux-headers-5.15.0-1089-aws", "linux-headers-6.8.0-1021-aws", "nvidia-headless-535-server", "nvidia-utils-535-server"},
			kernels:     []string{"5.15.0-1089-aws", "6.8.0-1021-aws"}},
		{name: "jammy 535 open", target: jammy, env: map[string]string{"NVIDIA_DRIVER_VERSION": "535"},
			modules:     "linux-modules-nvidia-535-server-open-{kernel}",
			precompiled: []string{"nvidia-headless-no-dkms-535-server-open", "nvidia-utils-535-server"},
			dkms:        []string{"linux-headers-6.8.0-1021-aws", "nvidia-headless-535-server-open", "nvidia-utils-535-server", "openssl"},
			kernels:     []string{"6.8.0-1021-aws"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := NewPlan(resolve(t, tt.env), tt.target)
			if err != nil {
				t.Fatal(err)
			}
			if p.Driver.Source != settings.SourceAuto || p.Driver.Package != tt.precompiled[1] {
				t.Errorf("driver %+v; want source auto recorded from %s", p.Driver, tt.precompiled[1])
			}
			choices, _ := actionsOf[ChooseDriver](p)
			if len(choices) != 1 {
				t.Fatalf("%d driver choices; want 1", len(choices))
			}
			c := choices[0]
			if c.Modules != tt.modules || !slices.Equal(c.Precompiled, tt.precompiled) || !slices.Equal(c.DKMS, tt.dkms) || !slices.Equal(c.Kernels, tt.kernels) {
				t.Errorf("choice %+v\nwant modules %s, precompiled %v, dkms %v, kernels %v", c, tt.modules, tt.precompiled, tt.dkms, tt.kernels)
			}
			pre, err := c.Packages(TakenPrecompiled)
			if err != nil {
				t.Fatal(err)
			}
			for i, k := range tt.kernels {
				if want := strings.ReplaceAll(tt.modules, "{kernel}", k); pre[i] != want {
					t.Errorf("precompiled package %d: %s; want %s", i, pre[i], want)
				}
			}
			if _, err := c.Packages("cuda-repo"); err == nil {
				t.Error("Packages accepted a source the probe never prints")
			}
			// Nothing installs outside the choice on the driver's behalf.
			installs, _ := actionsOf[Install](p)
			for _, in := range installs {
				for _, pkg := range in.Packages {
					if strings.HasPrefix(pkg, "linux-headers-") || strings.Contains(pkg, "nvidia-headless") {
						t.Errorf("unconditional install of %s", pkg)
					}
				}
			}
			// The DKMS build runs on both branches (with no DKMS source
			// it only lifts DKMS's pause); signing and its check on the
			// DKMS branch only; the kernel-key check on the precompiled one.
			_, builds := actionsOf[BuildModules](p)
			if !slices.Equal(builds, []string{""}) {
				t.Errorf("dkms builds on branches %q; want one, unconditional", builds)
			}
			_, signs := actionsOf[SignModules](p)
			_, kernelChecks := actionsOf[CheckKernelSignatures](p)
			for what, branches := range map[string][]string{"module signing": signs} {
				for _, b := range branches {
					if b != TakenDistro {
						t.Errorf("%s on branch %q; want distro only", what, b)
					}
				}
			}
			if !slices.Equal(kernelChecks, []string{TakenPrecompiled}) {
				t.Errorf("kernel-key checks on branches %q; want one, precompiled", kernelChecks)
			}
			wantSigns := 2 // sign and verify
			if tt.env["NVIDIA_MODULE_SIGNING"] == "none" {
				wantSigns = 0
			}
			if len(signs) != wantSigns {
				t.Errorf("%d signing actions; want %d", len(signs), wantSigns)
			}
		})
	}
}

// TestAutoIsDistroOnDebian: Debian has no precompiled modules, so auto is
// the distro archive, plan for plan.
func TestAutoIsDistroOnDebian(t *testing.T) {
	for _, tg := range goldenTargets[:2] {
		for _, env := range []map[string]string{{}, {"NVIDIA_KERNEL_MODULES": "open"}, {"PODVM_KERNELS": "all"}} {
			auto, err := NewPlan(resolve(t, env), tg)
			if err != nil {
				t.Fatal(err)
			}
			withDistro := map[string]string{"NVIDIA_DRIVER_SOURCE": "distro"}
			for k, v := range env {
				withDistro[k] = v
			}
			distro, err := NewPlan(resolve(t, withDistro), tg)
			if err != nil {
				t.Fatal(err)
			}
			if a, d := auto.Text(), distro.Text(); a != d {
				t.Errorf("%s %v: auto differs from distro:\n%s\n---\n%s", tg, env, a, d)
			}
		}
	}
}

// TestPrecompiledChecksKernelKey: an explicit precompiled source checks
// the signatures in its modules step, which runs before the bake that
// records them, and names the mode for the manifest.
func TestPrecompiledChecksKernelKey(t *testing.T) {
	p, err := NewPlan(resolve(t, map[string]string{"NVIDIA_DRIVER_SOURCE": "precompiled", "PODVM_KERNELS": "all"}), goldenTargets[2])
	if err != nil {
		t.Fatal(err)
	}
	checks, branches := actionsOf[CheckKernelSignatures](p)
	if len(checks) != 1 || branches[0] != "" || !slices.Equal(checks[0].Kernels, goldenTargets[2].Kernels) {
		t.Errorf("kernel-key checks %+v on %q", checks, branches)
	}
	if p.ModuleSigning.Mode != settings.SigningDistribution || p.ModuleSigning.CertDER != "" {
		t.Errorf("module signing %+v", p.ModuleSigning)
	}
	if _, signs := actionsOf[SignModules](p); len(signs) != 0 {
		t.Errorf("precompiled modules signed or checked against a certificate: %d actions", len(signs))
	}
}

// fakeModules lays out kernel k under root with modinfo answers: each
// module file holds "signer<TAB>key<TAB>hash", which the fake modinfo
// prints field by field.
func fakeModules(t *testing.T, root, k string, mods map[string]string) {
	t.Helper()
	for rel, sig := range mods {
		f := filepath.Join(root, k, rel)
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte(sig), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

const fakeModinfo = `#!/bin/sh
# modinfo -F FIELD FILE, from "signer<TAB>key<TAB>hash" in FILE.
[ "$1" = -F ] || exit 2
case $2 in signer) n=1 ;; sig_key) n=2 ;; sig_hashalgo) n=3 ;; *) exit 2 ;; esac
cut -f "$n" "$3"
`

// TestKernelSignaturesScript runs the check's shell text against a module
// tree and a modinfo that reads the signatures from the files: the logic
// that compares NVIDIA's modules with the kernel's own, and what it
// records.
func TestKernelSignaturesScript(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	const (
		kernelKey = "Build time autogenerated kernel key\t4A:1B:00\tsha512"
		otherKey  = "Some other key\t99:99\tsha512"
		k1, k2    = "6.8.0-1028-azure", "6.8.0-1030-azure"
	)
	tests := []struct {
		name    string
		k2mods  map[string]string
		wantErr string
	}{
		{name: "all signed with the kernel's key", k2mods: map[string]string{
			"kernel/fs/ext4/ext4.ko.zst":                    kernelKey,
			"kernel/nvidia-570srv/nvidia.ko":                kernelKey,
			"kernel/nvidia-570srv/nvidia-uvm.ko":            kernelKey,
			"kernel/drivers/video/fbdev/nvidia/nvidiafb.ko": kernelKey,
		}},
		{name: "one signed with another key", k2mods: map[string]string{
			"kernel/fs/ext4/ext4.ko.zst":         kernelKey,
			"kernel/nvidia-570srv/nvidia.ko":     kernelKey,
			"kernel/nvidia-570srv/nvidia-uvm.ko": otherKey,
		}, wantErr: "module MODDIR/" + k2 + "/kernel/nvidia-570srv/nvidia-uvm.ko of kernel " + k2 + " is signed by 'Some other key' (key '99:99'); expected 'Build time autogenerated kernel key' (key 4A:1B:00)"},
		{name: "unsigned", k2mods: map[string]string{
			"kernel/fs/ext4/ext4.ko.zst":     kernelKey,
			"kernel/nvidia-570srv/nvidia.ko": "\t\t",
		}, wantErr: "is signed by '' (key ''); expected 'Build time autogenerated kernel key'"},
		{name: "no NVIDIA module", k2mods: map[string]string{"kernel/fs/ext4/ext4.ko.zst": kernelKey},
			wantErr: "kernel " + k2 + ": no NVIDIA module"},
		{name: "no signed in-tree module", k2mods: map[string]string{
			"kernel/fs/ext4/ext4.ko.zst":     "\t\t",
			"kernel/nvidia-570srv/nvidia.ko": kernelKey,
		}, wantErr: "kernel " + k2 + ": no signed in-tree module"},
		{name: "weak hash", k2mods: map[string]string{
			"kernel/fs/ext4/ext4.ko.zst":     "k\t01\tsha1",
			"kernel/nvidia-570srv/nvidia.ko": "k\t01\tsha1",
		}, wantErr: "signature hash 'sha1'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			moddir, bin := filepath.Join(dir, "modules"), filepath.Join(dir, "bin")
			if err := os.MkdirAll(bin, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(bin, "modinfo"), []byte(fakeModinfo), 0o755); err != nil {
				t.Fatal(err)
			}
			fakeModules(t, moddir, k1, map[string]string{"kernel/fs/ext4/ext4.ko.zst": kernelKey, "kernel/nvidia-570srv/nvidia.ko": kernelKey})
			fakeModules(t, moddir, k2, tt.k2mods)
			out := filepath.Join(dir, "share", "module-signatures.tsv")
			a := CheckKernelSignatures{Kernels: []string{k1, k2}}
			cmd := strings.Replace(a.Command(), shellquote.Quote(ModuleSignatures), shellquote.Quote(out), 1) + " " + shellquote.Join(a.Kernels...)
			c := exec.Command("sh", "-c", cmd)
			c.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "PODVM_MODULES_DIR="+moddir)
			got, err := c.CombinedOutput()
			msg := strings.ReplaceAll(string(got), moddir, "MODDIR")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(msg, tt.wantErr) {
					t.Fatalf("err %v, output %q; want failure with %q", err, msg, tt.wantErr)
				}
				if _, err := os.Stat(out); err == nil {
					t.Error("signatures recorded although the check failed")
				}
				return
			}
			if err != nil {
				t.Fatalf("%v: %s", err, got)
			}
			tsv, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			want := strings.Join([]string{
				k1 + "\tMODDIR/" + k1 + "/kernel/nvidia-570srv/nvidia.ko\t" + kernelKey,
				k2 + "\tMODDIR/" + k2 + "/kernel/drivers/video/fbdev/nvidia/nvidiafb.ko\t" + kernelKey,
				k2 + "\tMODDIR/" + k2 + "/kernel/nvidia-570srv/nvidia-uvm.ko\t" + kernelKey,
				k2 + "\tMODDIR/" + k2 + "/kernel/nvidia-570srv/nvidia.ko\t" + kernelKey,
			}, "\n") + "\n"
			if g := strings.ReplaceAll(string(tsv), moddir, "MODDIR"); g != want {
				t.Errorf("signatures:\n%s\nwant:\n%s", g, want)
			}
		})
	}
}
