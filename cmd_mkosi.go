package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/podvm-gpu/packer-plugin-podvm/gpustack"
	"github.com/podvm-gpu/packer-plugin-podvm/mkosi"
)

func init() {
	register(command{name: "mkosi", summary: "generate a mkosi (v25+) configuration tree with the nvidia-gpu profile", run: runMkosi})
}

func runMkosi(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// bake-repo is the host-side step the generated post-installation
	// script calls; it is not meant for people, so usage does not list it.
	if len(args) > 0 && args[0] == "bake-repo" {
		return runBakeRepo(ctx, args[1:])
	}

	fs := pflag.NewFlagSet("mkosi", pflag.ContinueOnError)
	out := fs.String("output", "", "directory to write the tree into (required)")
	force := fs.Bool("force", false, "regenerate into a non-empty --output, removing the previous generation's files")
	distro := fs.String("distribution", "debian", "target distribution: debian|ubuntu")
	release := fs.String("release", "13", "target release, version or codename: 12|13|bookworm|trixie, 22.04|24.04|jammy|noble")
	arch := fs.String("architecture", "amd64", "target dpkg architecture: amd64|arm64")
	mirror := fs.String("mirror", "", "distro archive URL for the build's apt sources (default: the distro's own)")
	securityMirror := fs.String("security-mirror", "", "security archive URL (default: the distro's own)")
	bin := fs.String("podvm-bin", "", "absolute path of packer-plugin-podvm on the build host, which mkosi runs to sign the repository (default: $PODVM_BIN, else this binary)")
	collect := gpustack.BindFlags(fs)
	fs.Usage = func() {
		fmt.Fprintln(os.Stderr, "Usage: packer-plugin-podvm mkosi --output DIR [--distribution D --release R --architecture A] [--force] [setting flags]\n\nEvery setting also reads its environment variable (see `packer-plugin-podvm options`).\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *out == "" || fs.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "mkosi: --output DIR is required and takes no arguments")
		fs.Usage()
		return 2
	}
	res, err := gpustack.Resolve(gpustack.Input{Explicit: collect(), ExplicitFrom: gpustack.FromFlag})
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkosi:", err)
		return 2
	}
	t, err := gpustack.LookupRelease(*distro, *release, *arch)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkosi:", err)
		return 2
	}
	t.KernelsAtBuildTime = true
	plan, err := gpustack.NewPlan(res.Options, t)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkosi:", err)
		return 1
	}
	if *bin == "" {
		*bin = os.Getenv("PODVM_BIN")
	}
	if *bin == "" {
		if *bin, err = os.Executable(); err != nil {
			fmt.Fprintln(os.Stderr, "mkosi: locate this binary (pass --podvm-bin):", err)
			return 1
		}
	}
	files, err := mkosi.Render(ctx, mkosi.Config{Plan: plan, Mirror: *mirror, SecurityMirror: *securityMirror, Bin: *bin})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := mkosi.Write(*out, files, *force); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("mkosi: wrote %d files for %s into %s\n", len(files), t, *out)
	if res.Options.EnableGPU {
		fmt.Printf("build with: mkosi -C %s build   (profile %s selected; --profile= builds without the GPU stack)\n", *out, mkosi.Profile)
	}
	return 0
}

func runBakeRepo(ctx context.Context, args []string) int {
	fs := pflag.NewFlagSet("mkosi bake-repo", pflag.ContinueOnError)
	var b mkosi.Bake
	fs.StringVar(&b.Root, "root", "", "the image root ($BUILDROOT)")
	fs.StringVar(&b.Spec, "spec", "", "the tree's podvm-bake.json")
	fs.StringVar(&b.SrcDir, "srcdir", ".", "the tree as mkosi mounts it ($SRCDIR)")
	fs.StringVar(&b.ArtifactsDir, "artifacts", "", "directory for the host artifacts")
	kernels := fs.String("kernels", "", "the targeted image kernels, space separated")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		return 2
	}
	if b.Root == "" || b.Spec == "" || strings.TrimSpace(*kernels) == "" {
		fmt.Fprintln(os.Stderr, "mkosi bake-repo: --root, --spec and --kernels are required")
		return 2
	}
	b.Kernels = strings.Fields(*kernels)
	res, err := b.Run(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("  repo: %d packages, key %s\n", len(res.Packages), res.Fingerprint)
	return 0
}
