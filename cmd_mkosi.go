package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/podvm-gpu/packer-plugin-podvm/mkosi"
)

func init() {
	register(command{name: "mkosi", summary: "generate a mkosi (v25+) configuration tree with the nvidia-gpu profile", run: runMkosi})
}

func runMkosi(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return mkosi.RunCommand(ctx, args, os.Stdout, os.Stderr)
}
