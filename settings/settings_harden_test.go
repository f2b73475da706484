package settings

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// resolveWith resolves settings given as environment, HCL or flags.
func resolveWith(t *testing.T, envs map[string]string, hcl string, flags []string) (Resolved, error) {
	t.Helper()
	in := Input{LookupEnv: env(envs)}
	switch {
	case hcl != "":
		in.Explicit, in.ExplicitFrom = decodeHCL(t, hcl), FromHCL
	case flags != nil:
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		collect := BindFlags(fs)
		if err := fs.Parse(flags); err != nil {
			t.Fatal(err)
		}
		in.Explicit, in.ExplicitFrom = collect(), FromFlag
	}
	return Resolve(in)
}

// TestHostileSettings holds the settings of issue 22 that were accepted and
// then broke the image or failed late.
func TestHostileSettings(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	dangling, loop := filepath.Join(dir, "dangling"), filepath.Join(dir, "loop")
	if err := os.Symlink(filepath.Join(dir, "nothing"), dangling); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(loop, loop); err != nil {
		t.Fatal(err)
	}
	long := "/opt/" + strings.Repeat("a", 5000)
	tests := []struct {
		name  string
		env   map[string]string
		hcl   string
		flag  []string
		want  []string // each must appear in the error
		count int      // how many errors, when it matters
	}{
		// 1: system directories as the repository, which the swap removes.
		{name: "repo path /etc", env: map[string]string{"LOCAL_REPO_PATH": "/etc"}, want: []string{`LOCAL_REPO_PATH: invalid value "/etc"`, "system directory", "below /opt"}},
		{name: "repo path /usr", hcl: `local_repo_path = "/usr"`, want: []string{`local_repo_path: invalid value "/usr"`}},
		{name: "repo path /boot", env: map[string]string{"LOCAL_REPO_PATH": "/boot"}, want: []string{`invalid value "/boot"`}},
		{name: "repo path /var/lib", env: map[string]string{"LOCAL_REPO_PATH": "/var/lib"}, want: []string{`invalid value "/var/lib"`}},
		{name: "repo path /opt", env: map[string]string{"LOCAL_REPO_PATH": "/opt"}, want: []string{`invalid value "/opt"`}},
		{name: "repo path dpkg's", env: map[string]string{"LOCAL_REPO_PATH": "/var/lib/dpkg"}, want: []string{`invalid value "/var/lib/dpkg"`}},
		{name: "repo path /etc/apt", env: map[string]string{"LOCAL_REPO_PATH": "/etc/apt"}, want: []string{`invalid value "/etc/apt"`}},
		{name: "repo path below /proc", env: map[string]string{"LOCAL_REPO_PATH": "/proc/repo"}, want: []string{"below /proc"}},
		{name: "repo path below /sys", env: map[string]string{"LOCAL_REPO_PATH": "/sys/repo"}, want: []string{"below /sys"}},
		{name: "repo path below /dev", env: map[string]string{"LOCAL_REPO_PATH": "/dev/repo"}, want: []string{"below /dev"}},
		{name: "repo path below /run", flag: []string{"--local-repo-path=/run/repo"}, want: []string{`--local-repo-path: invalid value "/run/repo"`, "below /run"}},
		{name: "repo path below /tmp", env: map[string]string{"LOCAL_REPO_PATH": "/tmp/repo"}, want: []string{"below /tmp"}},
		{name: "repo path below /var/tmp", env: map[string]string{"LOCAL_REPO_PATH": "/var/tmp/repo"}, want: []string{"below /var/tmp"}},

		// 2: the keyring over an image file or the repository.
		{name: "keyring /etc/passwd", env: map[string]string{"LOCAL_REPO_KEYRING": "/etc/passwd"}, want: []string{`LOCAL_REPO_KEYRING: invalid value "/etc/passwd"`, "/usr/share/keyrings"}},
		{name: "keyring /bin/sh", hcl: `local_repo_keyring = "/bin/sh"`, want: []string{`local_repo_keyring: invalid value "/bin/sh"`}},
		{name: "keyring the debian archive's", env: map[string]string{"LOCAL_REPO_KEYRING": "/usr/share/keyrings/debian-archive-keyring.gpg"}, want: []string{"distribution's keyring"}},
		{name: "keyring the ubuntu archive's", env: map[string]string{"LOCAL_REPO_KEYRING": "/usr/share/keyrings/ubuntu-archive-keyring.gpg"}, want: []string{"distribution's keyring"}},
		{name: "keyring the cuda repo's", env: map[string]string{"LOCAL_REPO_KEYRING": "/usr/share/keyrings/podvm-nvidia-cuda.gpg"}, want: []string{"keyring of another repository"}},
		{name: "keyring trusted.gpg.d", env: map[string]string{"LOCAL_REPO_KEYRING": "/etc/apt/trusted.gpg.d/debian-archive-bookworm-automatic.gpg"}, want: []string{"not directly in"}},
		{name: "keyring the repository", env: map[string]string{"LOCAL_REPO_KEYRING": "/opt/local-packages"}, want: []string{`invalid value "/opt/local-packages"`}},
		{name: "keyring inside the repository", env: map[string]string{"LOCAL_REPO_KEYRING": "/opt/local-packages/keyring.gpg"}, want: []string{`invalid value "/opt/local-packages/keyring.gpg"`}},
		{name: "keyring a directory", env: map[string]string{"LOCAL_REPO_KEYRING": "/usr/share/keyrings"}, want: []string{`invalid value "/usr/share/keyrings"`}},

		// 3: control characters inject unit lines.
		{name: "repo path CR", env: map[string]string{"LOCAL_REPO_PATH": "/opt/x\rWhat=/srv"}, want: []string{"control character U+000D"}},
		{name: "expose path CR", env: map[string]string{"LOCAL_REPO_EXPOSE_PATH": "/run/nvidia/x\rWhat=/srv"}, want: []string{"control character U+000D"}},
		{name: "expose path DEL", env: map[string]string{"LOCAL_REPO_EXPOSE_PATH": "/run/nvidia/x\x7f"}, want: []string{"control character U+007F"}},
		{name: "keyring C1", hcl: "local_repo_keyring = \"/usr/share/keyrings/a\u0085.gpg\"", want: []string{"control character U+0085"}},
		{name: "host path tab", env: map[string]string{"LOCAL_REPO_SIGNING_KEY": "/k\t.asc"}, want: []string{"control character U+0009"}},

		// 4: the mount over a live runtime directory.
		{name: "expose /run/systemd", env: map[string]string{"LOCAL_REPO_EXPOSE_PATH": "/run/systemd"}, want: []string{`invalid value "/run/systemd"`, "inside /run/systemd"}},
		{name: "expose /run/dbus", env: map[string]string{"LOCAL_REPO_EXPOSE_PATH": "/run/dbus"}, want: []string{"inside /run/dbus"}},
		{name: "expose /run/lock", env: map[string]string{"LOCAL_REPO_EXPOSE_PATH": "/run/lock"}, want: []string{"inside /run/lock"}},
		{name: "expose /run/kata-containers", env: map[string]string{"LOCAL_REPO_EXPOSE_PATH": "/run/kata-containers"}, want: []string{"inside /run/kata-containers"}},
		{name: "expose /run/nvidia/driver", hcl: `local_repo_expose_path = "/run/nvidia/driver"`, want: []string{"inside /run/nvidia/driver"}},
		{name: "expose /run/nvidia/validations", env: map[string]string{"LOCAL_REPO_EXPOSE_PATH": "/run/nvidia/validations"}, want: []string{"inside /run/nvidia/validations"}},
		{name: "expose below /run/systemd", env: map[string]string{"LOCAL_REPO_EXPOSE_PATH": "/run/systemd/repo"}, want: []string{"inside /run/systemd"}},

		// 16: output directories that fail only after the build.
		{name: "output dir dangling link", env: map[string]string{"PODVM_OUTPUT_DIR": dangling}, want: []string{"PODVM_OUTPUT_DIR: invalid value", "symlink to nothing"}},
		{name: "output dir link loop", env: map[string]string{"PODVM_OUTPUT_DIR": loop}, want: []string{"symlink loop"}},
		{name: "output dir below a file", env: map[string]string{"PODVM_OUTPUT_DIR": filepath.Join(file, "out")}, want: []string{"which is a regular file"}},
		{name: "output dir /proc/self", hcl: `output_dir = "/proc/self"`, want: []string{`output_dir: invalid value "/proc/self"`, "kernel file system"}},

		// Smaller ones.
		{name: "invalid repo path alone", env: map[string]string{"LOCAL_REPO_PATH": "/etc"}, want: []string{"invalid setting: LOCAL_REPO_PATH"}, count: 1},
		{name: "package list comma", env: map[string]string{"LOCAL_REPO_PACKAGES": ","}, want: []string{"LOCAL_REPO_PACKAGES: invalid value", "empty list"}},
		{name: "package list empty flag", flag: []string{"--local-repo-packages= "}, want: []string{"--local-repo-packages: invalid value", "empty list"}},
		{name: "package list empty hcl", hcl: `local_repo_packages = []`, want: []string{"local_repo_packages: invalid value", "empty list"}},
		{name: "package template kernel alone", env: map[string]string{"LOCAL_REPO_PACKAGES": "{kernel}"}, want: []string{`LOCAL_REPO_PACKAGES: invalid value "{kernel}"`}},
		{name: "repo path 5000 bytes", env: map[string]string{"LOCAL_REPO_PATH": long}, want: []string{"LOCAL_REPO_PATH: invalid value", "5005 bytes in all", "more than the 4096 allowed"}},
		{name: "repo path 2000 bytes", env: map[string]string{"LOCAL_REPO_PATH": long[:2000]}, want: []string{"LOCAL_REPO_PATH: invalid value", "more than the 1024 allowed"}},
		{name: "host path 5000 bytes", env: map[string]string{"LOCAL_REPO_SIGNING_KEY": long}, want: []string{"more than the 4096 allowed"}},
		{name: "output dir 5000 bytes", env: map[string]string{"PODVM_OUTPUT_DIR": long}, want: []string{"more than the 4096 allowed"}},
		{name: "url 5000 bytes", env: map[string]string{"NVIDIA_CUDA_REPO_URL": "https://m/" + strings.Repeat("a", 5000)}, want: []string{"NVIDIA_CUDA_REPO_URL: invalid value"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := resolveWith(t, tt.env, tt.hcl, tt.flag)
			if err == nil {
				t.Fatal("accepted; want an error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
			if se, ok := err.(*Error); ok && tt.count > 0 && len(se.Errs) != tt.count {
				t.Errorf("%d errors, want %d:\n%v", len(se.Errs), tt.count, err)
			}
		})
	}
}

// TestHostileSettingsFine are values near the refused ones that stay valid.
func TestHostileSettingsFine(t *testing.T) {
	for _, m := range []map[string]string{
		{"LOCAL_REPO_PATH": "/srv/podvm/repo"},
		{"LOCAL_REPO_PATH": "/var/lib/podvm-packages"},
		{"LOCAL_REPO_KEYRING": "/etc/apt/keyrings/podvm.gpg"},
		{"LOCAL_REPO_EXPOSE_PATH": "/run/podvm-packages"},
		{"LOCAL_REPO_EXPOSE_PATH": "/run/nvidia/repo"},
		{"LOCAL_REPO_PACKAGES": "linux-headers-{kernel}, linux-kbuild-6.12"},
		{"PODVM_OUTPUT_DIR": filepath.Join(t.TempDir(), "new", "dir")},
		// A module key that the GPU stack, off, never uses is not demanded.
		{"ENABLE_NVIDIA_GPU": "no", "NVIDIA_MODULE_SIGNING": "key"},
	} {
		if _, err := resolveWith(t, m, "", nil); err != nil {
			t.Errorf("%v: %v", m, err)
		}
	}
}

// TestEverySettingRefusesControlCharacters checks that the one validator
// covers the whole table: a control character or an overlong value is
// refused by every String and List setting, whatever its own check.
func TestEverySettingRefusesControlCharacters(t *testing.T) {
	for _, s := range Table {
		if s.Kind != String && s.Kind != List {
			continue
		}
		for _, bad := range []string{"a\rb", "a\x1bb", "a\u009bb", strings.Repeat("a", 5000)} {
			_, err := resolveWith(t, map[string]string{s.Env: bad}, "", nil)
			if err == nil || !strings.Contains(err.Error(), s.Env+": invalid value") {
				t.Errorf("%s=%s: %v; want it refused", s.Env, Clip(bad), err)
			}
		}
	}
}

// TestIgnoredSettingsWarn checks that explicit settings that the other
// settings make useless are reported, not dropped without a word.
func TestIgnoredSettingsWarn(t *testing.T) {
	tests := []struct {
		env  map[string]string
		want string // "" for no warning
	}{
		{map[string]string{"NVIDIA_CUDA_REPO_URL": "https://m/cuda"}, "NVIDIA_CUDA_REPO_URL is ignored"},
		{map[string]string{"NVIDIA_CUDA_REPO_URL": "https://m/cuda", "NVIDIA_DRIVER_SOURCE": "distro"}, "nvidia_driver_source is distro"},
		{map[string]string{"NVIDIA_CUDA_REPO_URL": "https://m/cuda", "NVIDIA_DRIVER_SOURCE": "cuda-repo"}, ""},
		{map[string]string{"NVIDIA_HOOK_MODE": "cdi", "NVIDIA_CONTAINER_TOOLKIT": "no"}, "NVIDIA_HOOK_MODE is ignored"},
		{map[string]string{"NVIDIA_HOOK_MODE": "cdi"}, ""},
		{map[string]string{"NVIDIA_MODULE_SIGNING": "key", "ENABLE_NVIDIA_GPU": "no"}, "NVIDIA_MODULE_SIGNING is ignored"},
		{map[string]string{}, ""},
	}
	for _, tt := range tests {
		res, err := resolveWith(t, tt.env, "", nil)
		if err != nil {
			t.Errorf("%v: %v", tt.env, err)
			continue
		}
		got := strings.Join(res.Warnings, "\n")
		if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
			t.Errorf("%v: warnings %q, want %q", tt.env, got, tt.want)
		}
	}
}
