package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/pflag"

	"github.com/podvm-gpu/packer-plugin-podvm/bake"
	"github.com/podvm-gpu/packer-plugin-podvm/cmdflags"
	"github.com/podvm-gpu/packer-plugin-podvm/gpustack"
	"github.com/podvm-gpu/packer-plugin-podvm/settings"
)

func init() {
	register(command{name: "plan", summary: "print the steps the options produce for a target, without touching anything", run: runPlan})
}

func runPlan(args []string) int {
	fs := pflag.NewFlagSet("plan", pflag.ContinueOnError)
	distro := fs.String("distribution", "debian", "target distribution: debian|ubuntu")
	release := fs.String("release", "13", "target release by version or codename: 12, 13, 22.04, 24.04, 26.04, bookworm, trixie, jammy, noble, resolute")
	arch := fs.String("architecture", "amd64", "target dpkg architecture: amd64|arm64")
	kernels := fs.StringSlice("kernel", nil, "a kernel version installed in the image (repeat for several); none: resolved at build time")
	collect := settings.BindFlags(fs)
	fs.Usage = func() {
		fmt.Fprintln(os.Stderr, "Usage: packer-plugin-podvm plan [--distribution D --release R --kernel K ...] [setting flags]")
		fs.PrintDefaults()
	}
	if code, ok := cmdflags.Parse(fs, args, false, os.Stderr); !ok {
		return code
	}
	// The plan prints the kernels in commands; check them as the image's
	// own kernel names are checked before they reach a shell.
	for _, k := range *kernels {
		if !settings.ValidKernel(k) {
			fmt.Fprintf(os.Stderr, "plan: --kernel: invalid value %s; allowed: a kernel release as the image's /usr/lib/modules names it, such as 6.12.57+deb13-amd64\n", settings.Clip(k))
			return 2
		}
	}
	res, err := settings.Resolve(settings.Input{Explicit: collect(), ExplicitFrom: settings.FromFlag})
	if err != nil {
		fmt.Fprintln(os.Stderr, "plan:", err)
		return 2
	}
	for _, w := range res.Warnings {
		fmt.Fprintln(os.Stderr, "plan: warning:", w)
	}
	if errs := bake.CheckInputs(res.Options, time.Now()); len(errs) > 0 {
		for _, e := range errs {
			fmt.Fprintln(os.Stderr, "plan:", e)
		}
		return 2
	}
	t, err := gpustack.LookupRelease(*distro, *release, *arch)
	if err != nil {
		fmt.Fprintln(os.Stderr, "plan: --distribution/--release:", err)
		return 2
	}
	t.Kernels, t.KernelsAtBuildTime = *kernels, len(*kernels) == 0
	for _, w := range gpustack.TargetWarnings(res.Options, t) {
		fmt.Fprintln(os.Stderr, "plan: warning:", w)
	}
	p, err := gpustack.NewPlan(res.Options, t)
	if err != nil {
		fmt.Fprintln(os.Stderr, "plan:", err)
		return 1
	}
	fmt.Print(p.Text())
	return 0
}
