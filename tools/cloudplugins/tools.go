//go:build tools

// Package tools pins the cloud plugins that scripts/validate-examples.sh
// builds to validate example/aws and example/azure with real Packer.
package tools

import (
	_ "github.com/hashicorp/packer-plugin-amazon"
	_ "github.com/hashicorp/packer-plugin-azure"
)
