package gpustack

import (
	"fmt"
	"slices"
	"strings"

	"github.com/podvm-gpu/packer-plugin-podvm/settings"
)

// gpuPlan is what the GPU stack's steps share while the planner adds them,
// one feature at a time, in the order the image needs them.
type gpuPlan struct {
	p *Plan
	o settings.Options
	r release
	f family
	d Driver
	// ks are the targeted kernels.
	ks []string
	// auto: the driver source is chosen in the image at build time.
	auto   bool
	choice ChooseDriver
	// pkgs are the driver's packages; dkms: they build with DKMS.
	pkgs    []string
	dkms    bool
	signing bool
	persist []string
	fabric  []string
	// units are the GPU-only units, gated on an NVIDIA PCI device.
	units []string
}

// gpuSteps adds the GPU stack's steps to p.
func gpuSteps(p *Plan, o settings.Options, r release, f family) error {
	g := &gpuPlan{p: p, o: o, r: r, f: f, d: p.Driver, ks: p.Kernels, auto: p.Driver.Source == settings.SourceAuto}
	if err := g.packages(); err != nil {
		return err
	}
	g.sources()
	g.driver()
	g.modules()
	g.services()
	g.toolkit()
	g.confidentialCompute()
	g.nouveau()
	g.gate()
	return nil
}

// packages resolves the driver's packages and the optional services'.
func (g *gpuPlan) packages() error {
	p, o, r, f, d, ks := g.p, g.o, g.r, g.f, g.d, g.ks
	var err error
	g.pkgs, g.dkms, err = f.driver(r, d, ks)
	if g.auto {
		// The DKMS branch is the distro's; the precompiled one is decided
		// in the image, where the archive is known.
		distro := d
		distro.Source = settings.SourceDistro
		g.pkgs, g.dkms, err = f.driver(r, distro, ks)
		modules, rest, _ := f.precompiled(d)
		g.choice = ChooseDriver{Kernels: ks, Modules: modules, Precompiled: rest, NoRecommends: true}
		p.Notes = append(p.Notes, fmt.Sprintf("nvidia_driver_source=auto: precompiled modules (%s) when the image's archive has them for every targeted kernel at build time, else DKMS from the distro archive; %s records which",
			modules, DriverSourceFile))
	}
	if err != nil {
		return err
	}
	p.Driver.Package, _, _ = strings.Cut(g.pkgs[0], "=")
	if g.auto {
		// The manifest's driver version comes from a package both branches
		// install.
		for _, q := range g.choice.Precompiled {
			if slices.Contains(g.pkgs, q) {
				p.Driver.Package = q
				break
			}
		}
	}
	p.Installed = f.pinPackages(d)
	if o.Persistenced {
		g.persist = f.persistenced(d)
	}
	if o.FabricManager {
		if g.fabric, err = f.fabricManager(d); err != nil {
			return err
		}
	}
	g.signing = g.dkms && o.ModuleSigning != settings.SigningNone
	return nil
}

// sources adds the apt sources, pins and one update: sources first, so a
// single apt-get update sees all of them.
func (g *gpuPlan) sources() {
	p, o, r, f, d := g.p, g.o, g.r, g.f, g.d
	p.add("apt-components", "Enabling "+strings.Join(f.archiveComponents(), ", ")+" in the image's "+r.ID+" archive",
		AptComponents{Components: f.archiveComponents(), Keyring: r.ArchiveKeyring()})
	if d.Source == settings.SourceCUDARepo {
		url := o.CUDARepoURL
		if url == "" {
			url = fmt.Sprintf("%s/%s/%s/", cudaRepoBase, r.cudaDir, cudaArch(p.Target.Arch))
		}
		src := AptSource{Name: "podvm-nvidia-cuda", URI: url, Suites: []string{"/"}, Arch: p.Target.Arch, Keyring: cudaKeyring,
			Key: repoKey(o.CUDARepoKeyring, strings.TrimSuffix(url, "/")+"/"+r.cudaKey, r.cudaFingerprint)}
		// The CUDA repository carries every branch; the pin keeps apt on ours.
		pin := AptPin{Name: "podvm-nvidia-driver", Packages: f.pinPackages(d), Version: d.Branch + ".*", Priority: 1001}
		if d.Version != "" {
			pin.Version = pinVersion(d.Version)
		}
		p.add("cuda-repo", "Adding NVIDIA's CUDA repository for driver branch "+d.Branch, src, pin)
	} else if d.Version != "" {
		p.add("driver-pin", "Pinning the NVIDIA driver to "+d.Version,
			AptPin{Name: "podvm-nvidia-driver", Packages: f.pinPackages(d), Version: pinVersion(d.Version), Priority: 1001})
	}
	if o.Toolkit {
		url := o.ToolkitRepoURL
		if url == "" {
			url = toolkitRepoBase + "/" + p.Target.Arch
		}
		actions := []Action{AptSource{Name: "podvm-nvidia-container-toolkit", URI: url, Suites: []string{"/"}, Arch: p.Target.Arch,
			Keyring: toolkitKeyring, Key: repoKey(o.ToolkitRepoKeyring, toolkitKeyURL, toolkitFingerprint)}}
		p.add("toolkit-repo", "Adding the NVIDIA container toolkit repository", actions...)
	}
	p.add("apt-update", "Refreshing package lists", AptUpdate{})
	if o.BlacklistNouveau {
		// The packages below would regenerate the initramfs several times
		// (each dpkg run of an apt transaction ends in the trigger, and
		// some postinsts call it): the nouveau step does it once.
		p.add("initramfs-defer", "Deferring initramfs updates to one at the end", DeferInitramfs{})
	}
}

// driver adds the DKMS configuration, the headers and the driver, or the
// build-time choice between precompiled modules and DKMS.
func (g *gpuPlan) driver() {
	p, f, d, ks := g.p, g.f, g.d, g.ks
	if g.dkms {
		// Before anything installs DKMS: it would mint a key in the image.
		// And from building while packages install: the modules step
		// builds, or restores a cached build, and removes the file.
		p.add("dkms-config", "Keeping DKMS from creating a module signing key in the image, and its builds for the modules step",
			WriteFile{Path: dkmsConf, Mode: modeFile, Owner: "root:root", Content: dkmsConfText, BeforePackages: true},
			WriteFile{Path: dkmsNoAutoinstall, Mode: modeFile, Owner: "root:root", Content: dkmsNoAutoinstallText, BeforePackages: true})
	}
	pkgs := g.pkgs
	if g.signing {
		// openssl makes the build's key; the kernel's sign-file needs it too.
		pkgs = append(slices.Clone(pkgs), "openssl")
	}
	if g.dkms {
		var headers []string
		for _, k := range ks {
			headers = append(headers, f.headers(k))
		}
		if p.Target.KernelsAtBuildTime {
			_, meta := f.kernelMeta(p.Target.Arch)
			headers = []string{meta}
		}
		if g.auto {
			// Headers only where DKMS builds: the choice installs them.
			g.choice.DKMS = append(headers, pkgs...)
		} else {
			p.add("kernel-headers", "Installing kernel headers for "+kernelRange(ks), Install{Packages: headers, NoRecommends: true})
		}
	}
	if g.auto {
		p.add("driver", fmt.Sprintf("Installing NVIDIA driver %s (%s) for %s: precompiled modules where the archive has them, else DKMS", orBranch(d), d.Flavour, kernelRange(ks)),
			g.choice)
	} else {
		p.add("driver", fmt.Sprintf("Installing NVIDIA driver %s (%s) for %s", orBranch(d), d.Flavour, kernelRange(ks)),
			Install{Packages: pkgs, NoRecommends: true})
	}
	if conf := f.moduleLoadConf(d); conf != "" {
		p.add("module-autoload", "Leaving NVIDIA module loading to udev (no boot-time load without a GPU)",
			WriteFile{Path: conf, Mode: modeFile, Owner: "root:root", Content: moduleLoadText})
	}
}

// modules adds the modules' build (DKMS), check and signature.
func (g *gpuPlan) modules() {
	p, o, d, ks := g.p, g.o, g.d, g.ks
	build := BuildModules{Kernels: ks}
	if g.auto {
		// The build runs on both branches: with no DKMS source installed
		// it only removes the file that kept DKMS from building.
		p.add("modules", "Building the NVIDIA modules with DKMS, or checking the precompiled ones, for "+kernelRange(ks),
			build, CheckModules{Kernels: ks, Modules: d.Modules},
			IfDriverSource{Source: TakenPrecompiled, Actions: []Action{CheckKernelSignatures{Kernels: ks}}})
	}
	if !g.dkms {
		p.add("modules", "Checking the precompiled NVIDIA modules for "+kernelRange(ks),
			CheckModules{Kernels: ks, Modules: d.Modules}, CheckKernelSignatures{Kernels: ks})
		p.ModuleSigning = ModuleSigning{Mode: settings.SigningDistribution}
		return
	}
	if !g.auto {
		p.add("modules", "Building NVIDIA modules with DKMS for "+kernelRange(ks),
			build, CheckModules{Kernels: ks, Modules: d.Modules})
	}
	if !g.signing {
		p.ModuleSigning = ModuleSigning{Mode: settings.SigningNone}
		return
	}
	sm := SignModules{Kernels: ks, Subject: moduleSigner, CertDER: moduleCertDER, CertPEM: moduleCertPEM}
	title := "Signing the NVIDIA modules for " + kernelRange(ks) + " with a key that lives only in memory"
	if o.ModuleSigning == settings.SigningKey {
		// The signer is the certificate's issuer, read from it.
		sm.Subject = ""
		sm.Key = &ModuleKey{File: o.ModuleKey, Cert: o.ModuleCert, PassphraseEnv: o.ModulePassphraseEnv}
		title = "Signing the NVIDIA modules for " + kernelRange(ks) + " with " + o.ModuleKey + ", piped into memory"
	}
	var a Action = sm
	if g.auto {
		// Only on the DKMS branch of the build-time choice.
		title += " (DKMS only)"
		a = IfDriverSource{Source: TakenDistro, Actions: []Action{sm}}
	}
	p.add("module-signing", title, a)
	p.ModuleSigning = ModuleSigning{Mode: o.ModuleSigning, Signer: sm.Subject, CertDER: moduleCertDER}
}

// services adds nvidia-persistenced and the fabric manager.
func (g *gpuPlan) services() {
	p, o, f := g.p, g.o, g.f
	if o.Persistenced {
		var acts []Action
		if len(g.persist) > 0 {
			acts = append(acts, Install{Packages: g.persist, NoRecommends: true})
		}
		acts = append(acts, WriteFile{Path: "/etc/systemd/system/" + persistUnit, Mode: modeFile, Owner: "root:root",
			Content: persistencedUnit(f.persistencedUser(g.d), branchAtLeast(g.d.Branch, uvmPersistenceBranch))})
		acts = append(acts, EnableUnits{Units: []string{persistUnit}})
		p.add("persistenced", "Enabling nvidia-persistenced", acts...)
		g.units = append(g.units, persistUnit)
	}
	if o.FabricManager {
		p.add("fabric-manager", "Installing the NVIDIA fabric manager",
			Install{Packages: g.fabric, NoRecommends: true}, EnableUnits{Units: []string{fabricUnit}})
		g.units = append(g.units, fabricUnit)
	}
}

// toolkit adds the container toolkit, its configuration for a kata guest,
// and the prestart hook or the CDI spec service.
func (g *gpuPlan) toolkit() {
	p, o := g.p, g.o
	if !o.Toolkit {
		return
	}
	p.Toolkit = &Toolkit{Version: o.ToolkitVersion, HookMode: o.HookMode}
	names := slices.Clone(toolkitPackages)
	for i := range names {
		if o.ToolkitVersion != "" {
			names[i] += "=" + o.ToolkitVersion
		}
	}
	p.add("toolkit", "Installing the NVIDIA container toolkit "+orDefault(o.ToolkitVersion, "(newest)"),
		Install{Packages: names, NoRecommends: true},
		ToolkitConfig{Path: toolkitConfig, Settings: []KV{
			// A kata guest has no cgroup manager of its own for the
			// container and its rootfs is not pivot-able.
			{"nvidia-container-cli.no-cgroups", "true"},
			{"nvidia-container-cli.no-pivot", "true"},
			{"disable-require", "true"},
			// Paths other than the commented defaults: nvidia-ctk leaves a
			// key commented out (off) when set to its example value.
			{"nvidia-container-cli.debug", "/var/log/nvidia-kata-container.log"},
			{"nvidia-container-runtime.debug", "/var/log/nvidia-kata-runtime.log"},
		}})
	if o.HookMode != settings.HookCDI {
		p.add("hook", "Installing the kata guest prestart hook",
			WriteFile{Path: hookPath, Mode: modeScript, Owner: "root:root", Content: hookScript})
	}
	if o.HookMode != settings.HookOCIPrestart {
		p.add("cdi", "Installing the CDI spec service",
			WriteFile{Path: cdiScriptPath, Mode: modeScript, Owner: "root:root", Content: cdiScript},
			WriteFile{Path: "/etc/systemd/system/" + cdiUnit, Mode: modeFile, Owner: "root:root", Content: cdiService(g.d.Modules)},
			EnableUnits{Units: []string{cdiUnit}})
		g.units = append(g.units, cdiUnit)
	}
}

func (g *gpuPlan) confidentialCompute() {
	if !g.o.ConfidentialCompute {
		return
	}
	g.p.add("confidential-compute", "Setting the GPU ready for confidential computing at boot",
		WriteFile{Path: "/etc/systemd/system/" + ccUnit, Mode: modeFile, Owner: "root:root", Content: ccService},
		EnableUnits{Units: []string{ccUnit}})
	g.units = append(g.units, ccUnit)
}

// nouveau keeps nouveau off the GPU, in the image and its initramfs, and
// ends the initramfs deferral with one update.
func (g *gpuPlan) nouveau() {
	if !g.o.BlacklistNouveau {
		return
	}
	g.p.InitrdExclude = []string{"nouveau"}
	g.p.add("nouveau", "Blacklisting nouveau",
		WriteFile{Path: nouveauConf, Mode: modeFile, Owner: "root:root", Content: nouveauBlacklist},
		WriteFile{Path: nouveauHook, Mode: modeScript, Owner: "root:root", Content: nouveauHookText},
		UpdateInitramfs{Kernels: g.ks})
}

// gate starts the GPU-only units only where an NVIDIA GPU is present.
func (g *gpuPlan) gate() {
	if !g.o.GateOnPCI || len(g.units) == 0 {
		return
	}
	acts := []Action{WriteFile{Path: gateScript, Mode: modeScript, Owner: "root:root", Content: gateScriptText}}
	for _, u := range g.units {
		acts = append(acts, WriteFile{Path: "/etc/systemd/system/" + u + ".d/podvm-gpu-gate.conf", Mode: modeFile, Owner: "root:root",
			Content: "# Start only where an NVIDIA GPU (PCI vendor 10de) is present.\n[Service]\nExecCondition=" + gateScript + "\n"})
	}
	g.p.add("gpu-gate", "Gating GPU units on an NVIDIA PCI device", acts...)
}
