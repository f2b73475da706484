package rootfs

import (
	"strings"
	"testing"
)

// TestHostMirror covers the builder's use of the host's apt sources; the
// parsing and the choice of archive are tested in package hostapt.
func TestHostMirror(t *testing.T) {
	tests := []struct {
		dir, suite string
		want       string
		origin     string
	}{
		{"plain", "trixie", "http://mirror.example/debian", "testdata/apt/plain/sources.list"},
		{"none", "trixie", "", "debootstrap's default (no Debian archive found in testdata/apt/none)"},
		{"missing-directory", "trixie", "", "debootstrap's default"},
	}
	for _, tt := range tests {
		got, origin := hostMirror("testdata/apt/"+tt.dir, tt.suite)
		if got != tt.want {
			t.Errorf("%s (%s): mirror %q, want %q", tt.dir, tt.suite, got, tt.want)
		}
		if !strings.Contains(origin, tt.origin) {
			t.Errorf("%s (%s): origin %q lacks %q", tt.dir, tt.suite, origin, tt.origin)
		}
	}
}
