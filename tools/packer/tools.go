//go:build tools

// Package tools pins the packer binary the tests and `make image` run.
package tools

import _ "github.com/hashicorp/packer"
