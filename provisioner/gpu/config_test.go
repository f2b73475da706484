package gpu

import (
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2/hcldec"
	"github.com/hashicorp/hcl/v2/hclparse"

	"github.com/podvm-gpu/packer-plugin-podvm/settings"
)

// prepareHCL decodes an HCL body with the provisioner's own spec, the way
// Packer hands HCL2 configuration to a plugin, then prepares it.
func prepareHCL(t *testing.T, src string, env map[string]string) (*Provisioner, error) {
	t.Helper()
	f, diags := hclparse.NewParser().ParseHCL([]byte(src), "test.pkr.hcl")
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	p := &Provisioner{lookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }}
	val, diags := hcldec.Decode(f.Body, p.ConfigSpec(), nil)
	if diags.HasErrors() {
		return nil, diags
	}
	return p, p.Prepare(val)
}

func TestPrepareHCL(t *testing.T) {
	p, err := prepareHCL(t, `
enable_nvidia_gpu     = "yes"
nvidia_driver_version = "550.163.01"
local_repo_packages   = ["linux-headers-{kernel}", "linux-image-{kernel}"]
local_repo_path       = "/srv/repo"
execute_command       = "sudo -n sh -c {{.Command}}"
env                   = { http_proxy = "http://proxy:3128" }
transfer_retries           = 5
`, map[string]string{"NVIDIA_KERNEL_MODULES": "proprietary", "LOCAL_REPO_PATH": "/ignored"})
	if err != nil {
		t.Fatal(err)
	}
	o := p.options
	if !o.EnableGPU || o.DriverVersion != "550.163.01" || o.RepoPath != "/srv/repo" || len(o.RepoPackages) != 2 {
		t.Errorf("options %+v", o)
	}
	// The environment applies where HCL is silent, and only there.
	if o.KernelModules != settings.ModulesProprietary {
		t.Errorf("nvidia_kernel_modules = %s, want proprietary from the environment", o.KernelModules)
	}
	if p.config.ExecuteCommand != "sudo -n sh -c {{.Command}}" || p.retries != 5 || p.config.Env["http_proxy"] != "http://proxy:3128" {
		t.Errorf("config %+v, retries %d", p.config, p.retries)
	}
}

func TestPrepareDefaults(t *testing.T) {
	p, err := prepareHCL(t, ``, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.config.ExecuteCommand != DefaultExecuteCommand || p.config.RemoteFolder != "/tmp" || p.retries != 3 {
		t.Errorf("defaults: execute_command %q, remote_folder %q, retries %d", p.config.ExecuteCommand, p.config.RemoteFolder, p.retries)
	}
	if !p.options.EnableGPU || !p.options.RepoEnabled() || !p.options.Verify {
		t.Errorf("default options %+v", p.options)
	}
}

func TestPrepareRejects(t *testing.T) {
	tests := []struct {
		name string
		hcl  string
		env  map[string]string
		want []string // every one must appear in the error
	}{
		{"several settings at once", `
enable_nvidia_gpu     = "maybe"
nvidia_kernel_modules = "closed"
local_repo_path       = "relative/path"
`, nil, []string{"enable_nvidia_gpu", "nvidia_kernel_modules", "local_repo_path"}},
		{"bad environment value names the variable", ``,
			map[string]string{"NVIDIA_HOOK_MODE": "sideways"}, []string{"NVIDIA_HOOK_MODE"}},
		{"packer manners", `
execute_command = "sudo sh -c"
env             = { "bad-name" = "x" }
remote_folder   = "tmp"
transfer_retries = -1
`, nil, []string{"execute_command", "bad-name", "remote_folder", "transfer_retries"}},
		{"broken template", `execute_command = "{{.Command"`, nil, []string{"execute_command"}},
		{"repository dated in the far future", `source_date_epoch = "99999999999"`, nil, []string{"source_date_epoch", "in the future"}},
		{"settings and manners together", `
verify          = "perhaps"
execute_command = "true"
`, nil, []string{"verify", "execute_command"}},
		{"cross check", `
local_repo_passphrase_env = "PASS"
`, nil, []string{"local_repo_passphrase_env"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := prepareHCL(t, tc.hcl, tc.env)
			if err == nil {
				t.Fatal("Prepare accepted it")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not name %s:\n%v", w, err)
				}
			}
		})
	}
}

func TestUnknownKeyRejectedByHCLSpec(t *testing.T) {
	f, _ := hclparse.NewParser().ParseHCL([]byte(`enable_nvidia_gpus = "yes"`), "x.pkr.hcl")
	p := &Provisioner{}
	if _, diags := hcldec.Decode(f.Body, p.ConfigSpec(), nil); !diags.HasErrors() {
		t.Fatal("a misspelt setting decoded")
	}
}

// TestTransferRetriesBounded checks that a retry count that would retry a
// failing upload for ever is refused before the build.
func TestTransferRetriesBounded(t *testing.T) {
	for _, tc := range []struct {
		n    string
		want string // "" for accepted
	}{
		{"0", ""},
		{"100", ""},
		{"101", "transfer_retries: 101"},
		{"1000000000", "transfer_retries: 1000000000"},
		{"-1", "transfer_retries: -1"},
	} {
		_, err := prepareHCL(t, "transfer_retries = "+tc.n+"\n", nil)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("transfer_retries = %s: %v", tc.n, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "allowed: 0 (no retries) to 100")):
			t.Errorf("transfer_retries = %s: %v; want %q and what is allowed", tc.n, err, tc.want)
		}
	}
}

// TestWarningsReachTheUi checks that settings the others make useless are
// reported through Packer's ui, not dropped without a word.
func TestWarningsReachTheUi(t *testing.T) {
	for _, tc := range []struct {
		hcl  string
		want string // "" for no warning
	}{
		{"enable_nvidia_gpu = \"no\"\nlocal_repo = \"no\"\nnvidia_hook_mode = \"cdi\"\n", "nvidia_hook_mode is ignored: enable_nvidia_gpu is no"},
		{"enable_nvidia_gpu = \"no\"\nlocal_repo = \"no\"\nnvidia_module_signing = \"key\"\n", "nvidia_module_signing is ignored"},
		{"enable_nvidia_gpu = \"no\"\nlocal_repo = \"no\"\n", ""},
	} {
		p, err := prepareHCL(t, tc.hcl, nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.hcl, err)
		}
		ui := &countingUi{}
		if err := p.Provision(t.Context(), ui, nil, nil); err != nil {
			t.Fatalf("%s: %v", tc.hcl, err)
		}
		var warned []string
		for _, m := range ui.messages {
			if strings.Contains(m, "warning") {
				warned = append(warned, m)
			}
		}
		got := strings.Join(warned, "\n")
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: ui warnings %q, want %q", tc.hcl, got, tc.want)
		}
	}
}
