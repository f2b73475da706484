package gpu

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/podvm-gpu/packer-plugin-podvm/chroot/chroottest"
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

// TestSwapRefusesDirectoriesItDidNotMake runs the swap with a real shell,
// in a mount namespace whose /opt is a fresh tmpfs: an existing directory
// is replaced only when it is empty or a repository a podvm build made, so
// a package's directory below an allowed root (/var/lib/pam, /opt/<vendor>)
// is never removed.
func TestSwapRefusesDirectoriesItDidNotMake(t *testing.T) {
	chroottest.RequireRoot(t)
	chroottest.RequireTools(t, "unshare")
	const dir = "/opt/repo"
	tests := []struct {
		name  string
		setup string
		ok    bool
	}{
		{"absent", ``, true},
		{"empty", `mkdir ` + dir, true},
		{"a previous repository", `mkdir ` + dir + ` && touch ` + dir + `/manifest.json ` + dir + `/InRelease ` + dir + `/old.deb`, true},
		{"a package's directory", `mkdir ` + dir + ` && echo keep > ` + dir + `/common-auth`, false},
		{"a link to a directory", `mkdir /opt/elsewhere && echo keep > /opt/elsewhere/f && ln -s elsewhere ` + dir, false},
		{"a file", `echo keep > ` + dir, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			staged := "/opt/staged.deb"
			swap, err := swapCommand(dir+".podvm-new", dir+".podvm-old", dir, nil, []string{staged})
			if err != nil {
				t.Fatal(err)
			}
			script := `set -e; mount -t tmpfs tmpfs /opt; ` + orTrue(tt.setup) + `
mkdir ` + dir + `.podvm-new; echo new > ` + dir + `.podvm-new/InRelease; touch ` + staged + `
set +e; (` + swap + `); rc=$?
echo "rc=$rc"; ls -A /opt; cat ` + dir + `/InRelease ` + dir + `/common-auth /opt/elsewhere/f 2>/dev/null; [ -e ` + dir + ` ] && cat ` + dir + ` 2>/dev/null; exit 0`
			out, err := exec.Command("unshare", "-m", "sh", "-c", script).CombinedOutput()
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			got := string(out)
			if strings.Contains(got, "rc=0") != tt.ok {
				t.Fatalf("swap: want ok=%v:\n%s", tt.ok, got)
			}
			if strings.Contains(got, "staged.deb") {
				t.Errorf("staged file left behind:\n%s", got)
			}
			if tt.ok {
				if !strings.Contains(got, "new") || strings.Contains(got, "podvm-old") {
					t.Errorf("new repository not in place, or the old one left:\n%s", got)
				}
				return
			}
			if !strings.Contains(got, "keep") || !strings.Contains(got, "refusing to replace it") {
				t.Errorf("the existing directory was not kept, or no reason given:\n%s", got)
			}
		})
	}
}

func orTrue(s string) string {
	if s == "" {
		return "true"
	}
	return s
}
