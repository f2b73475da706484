//go:build tools

// Package tools pins goreleaser, which make release-check runs to build the
// release assets as a snapshot.
package tools

import _ "github.com/goreleaser/goreleaser/v2"
