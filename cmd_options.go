package main

import (
	"fmt"
	"os"

	"github.com/spf13/pflag"

	"github.com/podvm-gpu/packer-plugin-podvm/cmdflags"
	"github.com/podvm-gpu/packer-plugin-podvm/settings"
)

func init() {
	register(command{name: "options", summary: "list every setting: HCL key, environment variable, flag, type, default, allowed values", run: runOptions})
}

func runOptions(args []string) int {
	fs := pflag.NewFlagSet("options", pflag.ContinueOnError)
	format := fs.String("format", "text", "output format: text|markdown|json")
	fs.Usage = func() {
		fmt.Fprintln(os.Stderr, "Usage: packer-plugin-podvm options [--format text|markdown|json]")
		fs.PrintDefaults()
	}
	if code, ok := cmdflags.Parse(fs, args, false, os.Stderr); !ok {
		return code
	}
	if err := settings.WriteTable(os.Stdout, *format); err != nil {
		fmt.Fprintln(os.Stderr, "options:", err)
		return 2
	}
	return 0
}
