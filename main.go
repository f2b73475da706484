// Command packer-plugin-podvm is a Packer plugin (builder podvm-rootfs,
// provisioner podvm-gpu, post-processor podvm-record) and, on the same
// binary, a CLI: options, repo, mkosi.
package main

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/hashicorp/packer-plugin-sdk/plugin"

	"github.com/podvm-gpu/packer-plugin-podvm/builder/rootfs"
	"github.com/podvm-gpu/packer-plugin-podvm/postprocessor/record"
	"github.com/podvm-gpu/packer-plugin-podvm/provisioner/gpu"
	"github.com/podvm-gpu/packer-plugin-podvm/version"
)

// command is a CLI subcommand. Each lives in its own cmd_*.go file and
// registers itself in init, so subcommands can land independently.
type command struct {
	name    string
	summary string
	run     func(args []string) int
}

var commands = map[string]command{}

func register(c command) { commands[c.name] = c }

func main() {
	if len(os.Args) > 1 {
		if c, ok := commands[os.Args[1]]; ok {
			os.Exit(c.run(os.Args[2:]))
		}
		switch os.Args[1] {
		case "-h", "--help", "help":
			usage(os.Stdout)
			return
		}
	}
	// Anything else (describe, start, ...) belongs to Packer's plugin protocol.
	if err := pluginSet().RunCommand(os.Args[1:]...); err != nil {
		fmt.Fprintln(os.Stderr, err)
		usage(os.Stderr)
		os.Exit(1)
	}
}

// pluginSet is every Packer component the plugin ships.
func pluginSet() *plugin.Set {
	pps := plugin.NewSet()
	pps.RegisterBuilder("rootfs", new(rootfs.Builder))
	pps.RegisterProvisioner("gpu", new(gpu.Provisioner))
	pps.RegisterPostProcessor("record", new(record.PostProcessor))
	pps.SetVersion(version.PluginVersion)
	return pps
}

func usage(w *os.File) {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("Usage: packer-plugin-podvm <command> [flags]\n\nCommands:\n")
	for _, n := range names {
		fmt.Fprintf(&b, "  %-10s %s\n", n, commands[n].summary)
	}
	b.WriteString("\nPacker calls this binary with describe and start; run\n`packer-plugin-podvm <command> --help` for a command's flags.\n")
	fmt.Fprint(w, b.String())
}
