package main

import (
	"context"
	"os"
	"os/signal"

	"github.com/podvm-gpu/packer-plugin-podvm/aptrepo"
)

func init() {
	register(command{
		name:    "repo",
		summary: "index and sign a flat apt repository of .deb files",
		run:     runRepo,
	})
}

func runRepo(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	return aptrepo.RunCommand(ctx, args, os.Stdout, os.Stderr)
}
