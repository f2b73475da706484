package gpustack

import (
	_ "embed"
	"fmt"
	"strings"

	"github.com/podvm-gpu/packer-plugin-podvm/settings"
	"github.com/podvm-gpu/packer-plugin-podvm/shellquote"
)

// DriverSourceFile records in the image which driver source a build-time
// choice (ChooseDriver) took: "precompiled" or "distro", one line. The
// bake reads it for the manifest; later steps read it to skip what belongs
// to the other branch.
const DriverSourceFile = "/usr/share/podvm-gpu/driver-source"

// ChooseDriver installs the driver from the distribution's precompiled,
// signed modules when the image's archive has the modules package for
// every targeted kernel, and from the DKMS packages otherwise. The archive
// is only known in the image at build time, so the choice is made there:
// the probe (ProbeCommand) prints the source it takes, the back end
// installs Packages(source) and writes the source to DriverSourceFile.
type ChooseDriver struct {
	Kernels []string
	// Modules is the precompiled modules package, {kernel} standing for
	// each kernel.
	Modules string
	// Precompiled are the other packages of the precompiled branch.
	Precompiled []string
	// DKMS are the packages of the DKMS branch: headers, driver and what
	// module signing needs.
	DKMS         []string
	NoRecommends bool
}

// The sources a ChooseDriver can take.
const (
	TakenPrecompiled = string(settings.SourcePrecompiled)
	TakenDistro      = string(settings.SourceDistro)
)

// ProbeCommand is the shell command that decides, the same text for every
// back end; the kernels follow it as arguments. It prints the source it
// takes, TakenPrecompiled or TakenDistro, as its last line of output.
func (a ChooseDriver) ProbeCommand() string {
	return "sh -c " + shellquote.Quote(DriverProbeScript) + " podvm-driver-probe " + shellquote.Quote(a.Modules)
}

// ModulesFor is the precompiled modules package of kernel k.
func (a ChooseDriver) ModulesFor(k string) string {
	return strings.ReplaceAll(a.Modules, KernelPlaceholder, k)
}

// Packages are the packages of the branch taken.
func (a ChooseDriver) Packages(taken string) ([]string, error) {
	switch taken {
	case TakenPrecompiled:
		var pkgs []string
		for _, k := range a.Kernels {
			pkgs = append(pkgs, a.ModulesFor(k))
		}
		return append(pkgs, a.Precompiled...), nil
	case TakenDistro:
		return a.DKMS, nil
	}
	return nil, fmt.Errorf("driver source probe: got %q; want %s or %s", taken, TakenPrecompiled, TakenDistro)
}

// DriverProbeScript decides the driver source: precompiled when apt has an
// installable candidate of the modules package (its first argument, a
// template with {kernel}) for each kernel that follows, else distro. It
// needs package lists that are current (apt-get update first) and runs
// whatever apt-cache is on the PATH: the image's own, or mkosi's wrapper
// that acts on the image.
//
//go:embed scripts/driver-probe.sh
var DriverProbeScript string

// IfDriverSource runs Actions only when the build-time driver choice took
// Source (TakenPrecompiled or TakenDistro), as DriverSourceFile records.
type IfDriverSource struct {
	Source  string
	Actions []Action
}

// CheckKernelSignatures checks that every NVIDIA module (nvidia*.ko*) of
// each kernel is signed with the kernel's own module signing key, the key
// its in-tree modules carry, and records each module's signature in
// ModuleSignatures as the signing step does for DKMS-built modules.
// Nothing names the signer: Canonical signs its precompiled modules with
// the key of the kernel build they belong to.
type CheckKernelSignatures struct {
	Kernels []string
}

// Command is the check's shell command, the same text for every back end;
// the kernels follow it as arguments.
func (a CheckKernelSignatures) Command() string {
	return "sh -c " + shellquote.Quote(kernelSignaturesScript) + " podvm-kernel-signatures " + shellquote.Quote(ModuleSignatures)
}

// kernelSignaturesScript: arguments are the signatures file, then the
// kernels. PODVM_MODULES_DIR replaces /usr/lib/modules for its tests.
//
//go:embed scripts/kernel-signatures.sh
var kernelSignaturesScript string

func (a ChooseDriver) describe() string {
	return fmt.Sprintf("choose the driver source in the image: precompiled (apt-get install %s %s) when the archive has %s for every kernel of %s, else DKMS (apt-get install %s)%s; record it in %s",
		a.Modules, strings.Join(a.Precompiled, " "), a.Modules, strings.Join(a.Kernels, " "), strings.Join(a.DKMS, " "), noRecommends(a.NoRecommends), DriverSourceFile)
}

func noRecommends(b bool) string {
	if b {
		return " (no recommends)"
	}
	return ""
}

func (a IfDriverSource) describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "only where the driver source taken is %s:", a.Source)
	for _, x := range a.Actions {
		fmt.Fprintf(&b, "\n        - %s", x.describe())
	}
	return b.String()
}

func (a CheckKernelSignatures) describe() string {
	return fmt.Sprintf("check that every NVIDIA module of kernels %s is signed with its kernel's own module signing key (as the kernel's in-tree modules are); record each signature in %s",
		strings.Join(a.Kernels, " "), ModuleSignatures)
}
