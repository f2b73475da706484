package inputcheck

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// check runs f on each case: want "" means accepted, else a part of the
// error message.
func check(t *testing.T, name string, f func(string) error, cases map[string]string) {
	t.Helper()
	for in, want := range cases {
		err := f(in)
		switch {
		case want == "" && err != nil:
			t.Errorf("%s(%q) = %v, want nil", name, in, err)
		case want != "" && err == nil:
			t.Errorf("%s(%q) = nil, want an error with %q", name, in, want)
		case want != "" && !strings.Contains(err.Error(), want):
			t.Errorf("%s(%q) = %v, want %q in it", name, in, err, want)
		}
		var ie *Error
		if err != nil && (!errors.As(err, &ie) || ie.Allowed == "") {
			t.Errorf("%s(%q) = %v: not an *Error naming what is allowed", name, in, err)
		}
	}
}

func TestText(t *testing.T) {
	check(t, "Text", func(s string) error { return Text(s, 0) }, map[string]string{
		"":                        "",
		"550.163.01":              "",
		"héllo wörld":             "",
		"/opt/x\rWhat=/srv":       "control character U+000D",
		"a\nb":                    "control character U+000A",
		"a\tb":                    "control character U+0009",
		"a\x00b":                  "control character U+0000",
		"a\x7fb":                  "control character U+007F",
		"a\u0085b":                "control character U+0085",
		"a\u2028b":                "control character U+2028",
		"a\xffb":                  "not valid UTF-8",
		strings.Repeat("a", 5000): "more than the 4096 allowed",
	})
	if err := Text("abcdef", 5); err == nil || !strings.Contains(err.Error(), "more than the 5 allowed") {
		t.Errorf("Text with max 5 = %v", err)
	}
}

func TestHostPath(t *testing.T) {
	check(t, "HostPath", HostPath, map[string]string{
		"key.pem":                       "",
		"/home/me/my keys/key.pem":      "",
		"":                              "empty",
		"a\rb":                          "control character",
		"/" + strings.Repeat("a", 5000): "more than the 4096 allowed",
	})
}

func TestImagePath(t *testing.T) {
	check(t, "ImagePath", ImagePath, map[string]string{
		"/opt/local-packages":               "",
		"/usr/share/keyrings/x.gpg":         "",
		"":                                  "empty",
		"/":                                 "root directory",
		"opt/x":                             "not an absolute path",
		"/opt//x":                           "not clean",
		"/opt/x/":                           "not clean",
		"/opt/../etc":                       "not clean",
		"/opt/x\rWhat=/srv":                 "control character",
		"/opt/my repo":                      `' '`,
		"/opt/$HOME":                        `'$'`,
		"/opt/%H":                           `'%'`,
		"/opt/a'b":                          `'\''`,
		"/opt/a`b":                          "'`'",
		`/opt/a\b`:                          `'\\'`,
		"/opt/" + strings.Repeat("a", 5000): "more than the 1024 allowed",
	})
}

func TestImageDataDir(t *testing.T) {
	check(t, "ImageDataDir", ImageDataDir, map[string]string{
		"/opt/local-packages":    "",
		"/srv/repo":              "",
		"/var/lib/podvm/repo":    "",
		"/usr/local/share/podvm": "",
		"/":                      "root directory",
		"/etc":                   "system directory",
		"/etc/podvm":             "below an allowed root",
		"/usr":                   "system directory",
		"/usr/share/doc":         "below an allowed root",
		"/opt":                   "system directory",
		"/var/lib":               "system directory",
		"/var/lib/dpkg":          "system directory",
		"/var/lib/apt/lists":     "inside /var/lib/apt",
		"/proc/x":                "below /proc",
		"/sys/x":                 "below /sys",
		"/dev/x":                 "below /dev",
		"/run/x":                 "below /run",
		"/var/run/x":             "below /var/run",
		"/tmp/repo":              "below /tmp",
		"/var/tmp/repo":          "below /var/tmp",
		"/opt/x\rWhat=/srv":      "control character",
		"/home/me/repo":          "below an allowed root",
	})
}

func TestImageFileIn(t *testing.T) {
	f := func(p string) error { return ImageFileIn(p, ".gpg", "/usr/share/keyrings", "/etc/apt/keyrings") }
	check(t, "ImageFileIn", f, map[string]string{
		"/usr/share/keyrings/podvm.gpg": "",
		"/etc/apt/keyrings/podvm.gpg":   "",
		"/etc/passwd":                   "not directly in",
		"/bin/sh":                       "not directly in",
		"/usr/share/keyrings":           "not directly in",
		"/usr/share/keyrings/a/b.gpg":   "not directly in",
		"/etc/apt/trusted.gpg.d/x.gpg":  "not directly in",
		"/usr/share/keyrings/podvm.asc": "does not end in .gpg",
		"/usr/share/keyrings/.gpg":      "does not end in .gpg",
		"/usr/share/keyrings/x\r.gpg":   "control character",
	})
}

func TestImageRunDir(t *testing.T) {
	check(t, "ImageRunDir", ImageRunDir, map[string]string{
		"/run/nvidia/local-packages": "",
		"/run/podvm-packages":        "",
		"/run":                       "not below /run",
		"/var/run/x":                 "not below /run",
		"/opt/x":                     "not below /run",
		"/run/nvidia":                "GPU Operator",
		"/run/systemd":               "inside /run/systemd",
		"/run/systemd/x":             "inside /run/systemd",
		"/run/dbus":                  "inside /run/dbus",
		"/run/lock":                  "inside /run/lock",
		"/run/kata-containers":       "inside /run/kata-containers",
		"/run/nvidia/driver":         "inside /run/nvidia/driver",
		"/run/nvidia/validations/x":  "inside /run/nvidia/validations",
		"/run/nvidia/x\rWhat=/srv":   "control character",
		"/run/nvidia/%H":             "'%'",
	})
}

func TestHostDir(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	link := func(name, target string) string {
		p := filepath.Join(dir, name)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	dangling := link("dangling", filepath.Join(dir, "nothing"))
	loop := link("loop", filepath.Join(dir, "loop"))
	toDir := link("todir", dir)
	toProc := link("toproc", "/proc/self")
	check(t, "HostDir", HostDir, map[string]string{
		dir:                            "",
		filepath.Join(dir, "new"):      "",
		filepath.Join(dir, "new/deep"): "",
		toDir:                          "",
		filepath.Join(toDir, "new"):    "",
		"relative-new-dir":             "",
		"":                             "empty",
		file:                           "an existing regular file",
		filepath.Join(file, "x"):       "which is a regular file",
		dangling:                       "symlink to nothing",
		filepath.Join(dangling, "x"):   "symlink to nothing",
		loop:                           "symlink loop",
		filepath.Join(loop, "x"):       "symlink loop",
		"/proc/self":                   "kernel file system",
		"/proc/self/new":               "kernel file system",
		"/sys/kernel":                  "kernel file system",
		"/dev/shm/x":                   "kernel file system",
		toProc:                         "kernel file system",
		"/dev/null":                    "an existing character device",
		"a\nb":                         "control character",
	})
}
