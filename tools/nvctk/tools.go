//go:build tools

// Package tools pins NVIDIA's container toolkit sources. The end-to-end test
// builds nvidia-ctk and nvidia-container-runtime-hook from them into a local
// stand-in of NVIDIA's apt repository, which CI cannot reach.
package tools

import (
	_ "github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-container-runtime-hook"
	_ "github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-ctk"
)
