package gpu

import (
	"strings"
	"testing"
)

// TestSwapRefusesSystemDirectories checks the swap's own guard: whatever
// the Plan says, it never moves aside and removes a system directory.
func TestSwapRefusesSystemDirectories(t *testing.T) {
	for _, tc := range []struct {
		dir string
		ok  bool
	}{
		{"/opt/local-packages", true},
		{"/srv/repo", true},
		{"/etc", false},
		{"/usr", false},
		{"/var/lib", false},
		{"/var/lib/dpkg", false},
		{"/", false},
		{"/run/repo", false},
		{"/proc/x", false},
		{"/opt/x\rWhat=/srv", false},
	} {
		cmd, err := swapCommand(tc.dir+".podvm-new", tc.dir+".podvm-old", tc.dir, nil, nil)
		if tc.ok != (err == nil) {
			t.Errorf("swapCommand(%q): %v, want ok=%v", tc.dir, err, tc.ok)
		}
		if !tc.ok && (cmd != "" || !strings.Contains(err.Error(), "refusing to replace")) {
			t.Errorf("swapCommand(%q) = %q, %v; want no command and a refusal", tc.dir, cmd, err)
		}
	}
}
