package settings

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hcldec"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/spf13/pflag"
	"github.com/zclconf/go-cty/cty/gocty"
)

// decodeHCL decodes HCL text through the generated HCL2 spec, as Packer does.
func decodeHCL(t *testing.T, src string) map[string]Raw {
	t.Helper()
	f, diags := hclparse.NewParser().ParseHCL([]byte(src), "test.pkr.hcl")
	if diags.HasErrors() {
		t.Fatalf("parse: %v", diags)
	}
	var flat FlatHCL
	spec := hcldec.ObjectSpec(flat.HCL2Spec())
	val, diags := hcldec.Decode(f.Body, spec, &hcl.EvalContext{})
	if diags.HasErrors() {
		t.Fatalf("decode: %v", diags)
	}
	if err := gocty.FromCtyValue(val, &flat); err != nil {
		t.Fatalf("from cty: %v", err)
	}
	s := HCL(flat)
	return s.Explicit()
}

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestBadInputs(t *testing.T) {
	tests := []struct {
		name string
		hcl  string            // HCL body, if any
		env  map[string]string // environment
		flag []string          // CLI flags
		want []string          // each must appear in the error
	}{
		{name: "env bool maybe", env: map[string]string{"ENABLE_NVIDIA_GPU": "maybe"}, want: []string{`ENABLE_NVIDIA_GPU: invalid value "maybe"`, "yes|no"}},
		{name: "env bool number", env: map[string]string{"NVIDIA_PERSISTENCED": "2"}, want: []string{`NVIDIA_PERSISTENCED: invalid value "2"`}},
		{name: "hcl bool word", hcl: `enable_nvidia_gpu = "maybe"`, want: []string{`enable_nvidia_gpu: invalid value "maybe"`}},
		{name: "flag bool", flag: []string{"--enable-nvidia-gpu=perhaps"}, want: []string{`--enable-nvidia-gpu: invalid value "perhaps"`}},
		{name: "env driver text", env: map[string]string{"NVIDIA_DRIVER_VERSION": "latest"}, want: []string{`NVIDIA_DRIVER_VERSION: invalid value "latest"`, `branch such as "550"`}},
		{name: "hcl driver short", hcl: `nvidia_driver_version = "55"`, want: []string{`nvidia_driver_version: invalid value "55"`}},
		{name: "flag driver spaces", flag: []string{"--nvidia-driver-version=550 open"}, want: []string{`--nvidia-driver-version: invalid value "550 open"`}},
		{name: "env modules", env: map[string]string{"NVIDIA_KERNEL_MODULES": "closed"}, want: []string{`NVIDIA_KERNEL_MODULES: invalid value "closed"`, "auto|open|proprietary"}},
		{name: "hcl source", hcl: `nvidia_driver_source = "runfile"`, want: []string{`nvidia_driver_source: invalid value "runfile"`, "distro|cuda-repo|precompiled"}},
		{name: "flag source", flag: []string{"--nvidia-driver-source=ppa"}, want: []string{`--nvidia-driver-source: invalid value "ppa"`}},
		{name: "env cuda url scheme", env: map[string]string{"NVIDIA_CUDA_REPO_URL": "ftp://mirror/cuda"}, want: []string{`NVIDIA_CUDA_REPO_URL: invalid value "ftp://mirror/cuda"`, "https://"}},
		{name: "hcl toolkit url quote", hcl: `nvidia_container_toolkit_repo_url = "https://m/x'y"`, want: []string{`nvidia_container_toolkit_repo_url: invalid value`}},
		{name: "env toolkit bool", env: map[string]string{"NVIDIA_CONTAINER_TOOLKIT": "y"}, want: []string{`NVIDIA_CONTAINER_TOOLKIT: invalid value "y"`}},
		{name: "env toolkit version", env: map[string]string{"NVIDIA_CONTAINER_TOOLKIT_VERSION": "v1.17"}, want: []string{`NVIDIA_CONTAINER_TOOLKIT_VERSION: invalid value "v1.17"`, "Debian package version"}},
		{name: "hcl toolkit version shell", hcl: `nvidia_container_toolkit_version = "1.17; rm -rf /"`, want: []string{`nvidia_container_toolkit_version: invalid value`}},
		{name: "flag hook mode", flag: []string{"--nvidia-hook-mode=poststart"}, want: []string{`--nvidia-hook-mode: invalid value "poststart"`, "oci-prestart|cdi|both"}},
		{name: "env nouveau", env: map[string]string{"NVIDIA_BLACKLIST_NOUVEAU": "sometimes"}, want: []string{`NVIDIA_BLACKLIST_NOUVEAU: invalid value "sometimes"`}},
		{name: "hcl fabric", hcl: `nvidia_fabric_manager = "enable"`, want: []string{`nvidia_fabric_manager: invalid value "enable"`}},
		{name: "env cc", env: map[string]string{"NVIDIA_CONFIDENTIAL_COMPUTE": "tdx"}, want: []string{`NVIDIA_CONFIDENTIAL_COMPUTE: invalid value "tdx"`}},
		{name: "flag gate", flag: []string{"--nvidia-gate-on-pci=pci"}, want: []string{`--nvidia-gate-on-pci: invalid value "pci"`}},
		{name: "expose over the operator's directory", env: map[string]string{"LOCAL_REPO_EXPOSE_PATH": "/run/nvidia"}, want: []string{`LOCAL_REPO_EXPOSE_PATH: invalid value "/run/nvidia"`, "GPU Operator's own directory", "below /run"}},
		{name: "expose over /etc", hcl: `local_repo_expose_path = "/etc"`, want: []string{`local_repo_expose_path: invalid value "/etc"`}},
		{name: "expose with a specifier", env: map[string]string{"LOCAL_REPO_EXPOSE_PATH": "/run/nvidia/%H"}, want: []string{`invalid value "/run/nvidia/%H"`}},
		{name: "env output dir is a file", env: map[string]string{"PODVM_OUTPUT_DIR": "settings_test.go"}, want: []string{`PODVM_OUTPUT_DIR: invalid value "settings_test.go"`, "not an existing file"}},
		{name: "hcl output dir newline", hcl: `output_dir = "a\nb"`, want: []string{`output_dir: invalid value`}},
		{name: "module key mode without files", env: map[string]string{"NVIDIA_MODULE_SIGNING": "key"}, want: []string{"NVIDIA_MODULE_SIGNING=key: needs nvidia_module_signing_key and nvidia_module_signing_cert"}},
		{name: "module key without key mode", hcl: `nvidia_module_signing_key = "/keys/m.key"`, want: []string{"nvidia_module_signing_key=/keys/m.key: only used with nvidia_module_signing=key, not ephemeral"}},
		{name: "module passphrase env name", flag: []string{"--nvidia-module-signing=key", "--nvidia-module-signing-key=/k", "--nvidia-module-signing-cert=/c", "--nvidia-module-signing-passphrase-env=no-such name"},
			want: []string{`--nvidia-module-signing-passphrase-env: invalid value "no-such name"`}},
		{name: "toolkit version word", env: map[string]string{"NVIDIA_CONTAINER_TOOLKIT_VERSION": "latest"}, want: []string{`NVIDIA_CONTAINER_TOOLKIT_VERSION: invalid value "latest"`, "newest, or a whole Debian package version"}},
		{name: "env kernels", env: map[string]string{"PODVM_KERNELS": "latest"}, want: []string{`PODVM_KERNELS: invalid value "latest"`, "newest, all"}},
		{name: "hcl kernels", hcl: `kernels = "6.12;reboot"`, want: []string{`kernels: invalid value "6.12;reboot"`}},
		{name: "env local repo", env: map[string]string{"LOCAL_REPO": "maybe"}, want: []string{`LOCAL_REPO: invalid value "maybe"`, "auto|yes|no"}},
		{name: "hcl repo path relative", hcl: `local_repo_path = "opt/local"`, want: []string{`local_repo_path: invalid value "opt/local"`, "absolute"}},
		{name: "env repo path root", env: map[string]string{"LOCAL_REPO_PATH": "/"}, want: []string{`LOCAL_REPO_PATH: invalid value "/"`}},
		{name: "flag repo path unclean", flag: []string{"--local-repo-path=/opt/../etc"}, want: []string{`--local-repo-path: invalid value "/opt/../etc"`}},
		{name: "hcl repo path empty", hcl: `local_repo_path = ""`, want: []string{`local_repo_path: invalid value ""`}},
		{name: "env template placeholder", env: map[string]string{"LOCAL_REPO_PACKAGES": "linux-headers-{version}"}, want: []string{`LOCAL_REPO_PACKAGES: invalid value "linux-headers-{version}"`, "{kernel}"}},
		{name: "hcl template upper", hcl: `local_repo_packages = ["Linux-Headers"]`, want: []string{`local_repo_packages: invalid value "Linux-Headers"`}},
		{name: "env closure", env: map[string]string{"LOCAL_REPO_CLOSURE": "partial"}, want: []string{`LOCAL_REPO_CLOSURE: invalid value "partial"`, "full|none"}},
		{name: "flag extra package", flag: []string{"--local-repo-extra-packages=gcc,make;id"}, want: []string{`--local-repo-extra-packages: invalid value "make;id"`}},
		{name: "env passphrase name", env: map[string]string{"LOCAL_REPO_SIGNING_KEY": "/k.asc", "LOCAL_REPO_PASSPHRASE_ENV": "MY-PASS"}, want: []string{`LOCAL_REPO_PASSPHRASE_ENV: invalid value "MY-PASS"`}},
		{name: "passphrase without key", env: map[string]string{"LOCAL_REPO_PASSPHRASE_ENV": "PASS"}, want: []string{"LOCAL_REPO_PASSPHRASE_ENV=PASS: needs local_repo_signing_key"}},
		{name: "hcl keyring relative", hcl: `local_repo_keyring = "keyring.gpg"`, want: []string{`local_repo_keyring: invalid value "keyring.gpg"`}},
		{name: "env sources file", env: map[string]string{"LOCAL_REPO_SOURCES_FILE": "enabled"}, want: []string{`LOCAL_REPO_SOURCES_FILE: invalid value "enabled"`}},
		{name: "env verify", env: map[string]string{"PODVM_VERIFY": "skip"}, want: []string{`PODVM_VERIFY: invalid value "skip"`}},
		{name: "epoch negative", env: map[string]string{"SOURCE_DATE_EPOCH": "-5"}, want: []string{`SOURCE_DATE_EPOCH: invalid value "-5"`}},
		{name: "epoch date", flag: []string{"--source-date-epoch=2024-01-01"}, want: []string{`--source-date-epoch: invalid value "2024-01-01"`}},
		{name: "hcl list for scalar", hcl: `nvidia_hook_mode = ["cdi"]`, want: []string{"nvidia_hook_mode"}},
		{name: "precompiled with a module key", env: map[string]string{"NVIDIA_DRIVER_SOURCE": "precompiled", "NVIDIA_MODULE_SIGNING": "key", "NVIDIA_MODULE_SIGNING_KEY": "/k", "NVIDIA_MODULE_SIGNING_CERT": "/c"},
			want: []string{"NVIDIA_MODULE_SIGNING=key with NVIDIA_DRIVER_SOURCE=precompiled", "allowed: nvidia_driver_source=auto|distro|cuda-repo"}},
		{name: "env source", env: map[string]string{"NVIDIA_DRIVER_SOURCE": "prebuilt"}, want: []string{`NVIDIA_DRIVER_SOURCE: invalid value "prebuilt"`, "auto|distro|cuda-repo|precompiled"}},
		{name: "cc with proprietary", env: map[string]string{"NVIDIA_CONFIDENTIAL_COMPUTE": "yes", "NVIDIA_KERNEL_MODULES": "proprietary"}, want: []string{"confidential computing needs the open kernel modules"}},
		{name: "toolkit version without revision", env: map[string]string{"NVIDIA_CONTAINER_TOOLKIT_VERSION": "1.17.8"}, want: []string{`NVIDIA_CONTAINER_TOOLKIT_VERSION: invalid value "1.17.8"`, "revision"}},
		{name: "driver branch with revision", env: map[string]string{"NVIDIA_DRIVER_VERSION": "550-1"}, want: []string{`NVIDIA_DRIVER_VERSION: invalid value "550-1"`}},
		{name: "http mirror without keyring", env: map[string]string{"NVIDIA_CUDA_REPO_URL": "http://mirror.example/cuda"}, want: []string{"NVIDIA_CUDA_REPO_URL=http://mirror.example/cuda: a plain-http mirror needs NVIDIA_CUDA_REPO_KEYRING"}},
		{name: "several at once", env: map[string]string{"ENABLE_NVIDIA_GPU": "maybe", "NVIDIA_HOOK_MODE": "x", "LOCAL_REPO_CLOSURE": "y"},
			want: []string{"3 invalid settings", "ENABLE_NVIDIA_GPU", "NVIDIA_HOOK_MODE", "LOCAL_REPO_CLOSURE"}},
		{name: "several across sources", hcl: `nvidia_driver_source = "x"`, env: map[string]string{"NVIDIA_PERSISTENCED": "z"},
			want: []string{"2 invalid settings", "nvidia_driver_source", "NVIDIA_PERSISTENCED"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := Input{LookupEnv: env(tt.env)}
			switch {
			case tt.hcl != "":
				if strings.HasPrefix(tt.name, "hcl list for scalar") {
					// HCL itself refuses a list where the spec says string.
					f, _ := hclparse.NewParser().ParseHCL([]byte(tt.hcl), "t.hcl")
					var flat FlatHCL
					_, diags := hcldec.Decode(f.Body, hcldec.ObjectSpec(flat.HCL2Spec()), nil)
					if !diags.HasErrors() || !strings.Contains(diags.Error(), tt.want[0]) {
						t.Fatalf("want HCL to refuse a list, got %v", diags)
					}
					return
				}
				in.Explicit, in.ExplicitFrom = decodeHCL(t, tt.hcl), FromHCL
			case tt.flag != nil:
				fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
				collect := BindFlags(fs)
				if err := fs.Parse(tt.flag); err != nil {
					t.Fatal(err)
				}
				in.Explicit, in.ExplicitFrom = collect(), FromFlag
			}
			_, err := Resolve(in)
			if err == nil {
				t.Fatal("accepted; want an error")
			}
			var se *Error
			if !errors.As(err, &se) {
				t.Fatalf("error %T is not a *Error", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
	if len(tests) < 30 {
		t.Fatalf("only %d bad inputs", len(tests))
	}
}

// samples gives two valid values for every setting, neither the default.
func samples(s *Setting) (a, b Raw) {
	if s.Key == "nvidia_module_signing" {
		// key needs its files; none alone is a valid change.
		return Scalar("none"), Scalar("none")
	}
	switch s.Kind {
	case Bool:
		// Two valid bools differ only from each other: the explicit one is
		// the default spelled differently, the environment's is the opposite.
		if s.Default == "yes" {
			return Scalar("TRUE"), Scalar("no")
		}
		return Scalar("False"), Scalar("yes")
	case Enum:
		var alt []string
		for _, v := range s.Allowed {
			if v != s.Default {
				alt = append(alt, v)
			}
		}
		if len(alt) == 1 {
			return Scalar(s.Default), Scalar(alt[0])
		}
		return Scalar(alt[0]), Scalar(alt[1])
	case List:
		return Raw{Values: []string{"pkg-a", "pkg-c"}, IsList: true}, Scalar("pkg-b")
	}
	v := map[string][2]string{
		"nvidia_driver_version":                 {"535", "550.163.01"},
		"nvidia_cuda_repo_url":                  {"https://mirror.example/cuda/", "file:///srv/cuda"},
		"nvidia_cuda_repo_keyring":              {"/keys/a.gpg", "/keys/b.gpg"},
		"nvidia_container_toolkit_version":      {"1.17.8-1", "1.16.2-1"},
		"nvidia_container_toolkit_repo_url":     {"https://mirror.example/nct", "file:///srv/nct"},
		"nvidia_container_toolkit_repo_keyring": {"/keys/c.gpg", "/keys/d.gpg"},
		"kernels":                               {"all", "6.12.1-amd64"},
		"local_repo_path":                       {"/srv/repo", "/var/lib/repo"},
		"local_repo_signing_key":                {"/keys/sign.asc", "/keys/other.asc"},
		"local_repo_passphrase_env":             {"PASS_A", "PASS_B"},
		"local_repo_keyring":                    {"/etc/apt/keyrings/a.gpg", "/etc/apt/keyrings/b.gpg"},
		"output_dir":                            {"out-a", "out-b"},
		"local_repo_expose_path":                {"/run/nvidia/repo-a", "none"},
		"source_date_epoch":                     {"1700000000", "1600000000"},
		"nvidia_module_signing_key":             {"/keys/a.key", "/keys/b.key"},
		"nvidia_module_signing_cert":            {"/keys/a.pem", "/keys/b.der"},
		"nvidia_module_signing_passphrase_env":  {"MODPASS_A", "MODPASS_B"},
		"build_cache_dir":                       {"/srv/cache-a", "/srv/cache-b"},
		"build_cache_max_size":                  {"500MiB", "0"},
		"gpu_operator_namespace":                {"nvidia-gpu-operator", "gpu-ops"},
		"gpu_operator_driver_repository":        {"mirror.example:5000/nvidia", "mirror.example/nv"},
		"gpu_operator_driver_image":             {"driver", "nvidia/driver"},
		"gpu_operator_driver_version":           {"595.91.07", "570.172.08"},
		"podvm_binaries":                        {agentTreeSamples[0], agentTreeSamples[1]},
	}[s.Key]
	return Scalar(v[0]), Scalar(v[1])
}

// TestPrecedence checks explicit > environment > default for every setting
// and for both explicit bindings (HCL and flags).
func TestPrecedence(t *testing.T) {
	agentTreeSamples = [2]string{agentTree(t), agentTree(t)}
	for i := range Table {
		s := &Table[i]
		explicit, fromEnv := samples(s)
		for _, src := range []Source{FromHCL, FromFlag} {
			t.Run(fmt.Sprintf("%s/%s", s.Key, src), func(t *testing.T) {
				base := map[string]string{}
				if s.Key == "local_repo_passphrase_env" { // needs a key to be valid
					base["LOCAL_REPO_SIGNING_KEY"] = "/keys/k.asc"
				}
				// The module key's settings need key mode and both files.
				moduleKey := strings.HasPrefix(s.Key, "nvidia_module_signing_")
				if moduleKey {
					base["NVIDIA_MODULE_SIGNING"] = "key"
					base["NVIDIA_MODULE_SIGNING_KEY"] = "/keys/m.key"
					base["NVIDIA_MODULE_SIGNING_CERT"] = "/keys/m.pem"
				}
				run := func(ex map[string]Raw, e map[string]string) Resolved {
					t.Helper()
					all := map[string]string{}
					for k, v := range base {
						all[k] = v
					}
					for k, v := range e {
						all[k] = v
					}
					if src == FromFlag && ex != nil {
						fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
						collect := BindFlags(fs)
						var args []string
						for k, r := range ex {
							st, _ := Lookup(k)
							args = append(args, "--"+st.Flag+"="+strings.Join(r.Values, ","))
						}
						if err := fs.Parse(args); err != nil {
							t.Fatal(err)
						}
						ex = collect()
					}
					r, err := Resolve(Input{Explicit: ex, ExplicitFrom: src, LookupEnv: env(all)})
					if err != nil {
						t.Fatal(err)
					}
					// The resolve time is not a setting: compare settings only.
					r.Options.resolvedAt = time.Time{}
					return r
				}
				def := run(nil, nil)
				viaEnv := run(nil, map[string]string{s.Env: strings.Join(fromEnv.Values, ",")})
				both := run(map[string]Raw{s.Key: explicit}, map[string]string{s.Env: strings.Join(fromEnv.Values, ",")})

				if def.Origin[s.Key] != FromDefault && s.Key != "local_repo_signing_key" && !moduleKey {
					t.Errorf("no input: origin %v, want default", def.Origin[s.Key])
				}
				if viaEnv.Origin[s.Key] != FromEnv {
					t.Errorf("env only: origin %v, want environment", viaEnv.Origin[s.Key])
				}
				if both.Origin[s.Key] != src {
					t.Errorf("explicit and env: origin %v, want %v", both.Origin[s.Key], src)
				}
				if fmt.Sprint(viaEnv.Options) == fmt.Sprint(def.Options) {
					t.Errorf("env value %v did not change the options", fromEnv.Values)
				}
				if fmt.Sprint(both.Options) == fmt.Sprint(viaEnv.Options) && !slices.Equal(explicit.Values, fromEnv.Values) {
					t.Errorf("explicit value %v did not win over env %v", explicit.Values, fromEnv.Values)
				}
			})
		}
	}
}

func TestBoolSpellings(t *testing.T) {
	for _, v := range []string{"yes", "YES", "True", "1", "on", "no", "No", "FALSE", "0", "off"} {
		r, err := Resolve(Input{LookupEnv: env(map[string]string{"ENABLE_NVIDIA_GPU": v})})
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		want, _ := ParseBool(v)
		if r.Options.EnableGPU != want {
			t.Errorf("%s: EnableGPU %v", v, r.Options.EnableGPU)
		}
	}
}

func TestTimestampStable(t *testing.T) {
	r, err := Resolve(Input{LookupEnv: env(nil)})
	if err != nil {
		t.Fatal(err)
	}
	first := r.Options.Timestamp()
	time.Sleep(1100 * time.Millisecond)
	if got := r.Options.Timestamp(); !got.Equal(first) {
		t.Errorf("Timestamp moved from %s to %s within one build", first, got)
	}
	r, err = Resolve(Input{LookupEnv: env(map[string]string{"SOURCE_DATE_EPOCH": "1700000000"})})
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Options.Timestamp(); got.Unix() != 1700000000 {
		t.Errorf("SOURCE_DATE_EPOCH ignored: %s", got)
	}
}

func TestDefaults(t *testing.T) {
	r, err := Resolve(Input{LookupEnv: env(nil)})
	if err != nil {
		t.Fatal(err)
	}
	o := r.Options
	if !o.EnableGPU || !o.RepoEnabled() || o.RepoPath != "/opt/local-packages" || o.HookMode != HookBoth ||
		o.DriverSource != SourceAuto || o.KernelModules != ModulesAuto || !o.Verify || o.SourceDateEpoch != -1 {
		t.Errorf("defaults: %+v", o)
	}
}

func TestHCLTypes(t *testing.T) {
	// HCL users write booleans and numbers bare; both reach the same parser.
	ex := decodeHCL(t, "enable_nvidia_gpu = false\nnvidia_driver_version = 550\nlocal_repo_extra_packages = [\"gcc\", \"make\"]\n")
	r, err := Resolve(Input{Explicit: ex, ExplicitFrom: FromHCL, LookupEnv: env(map[string]string{"ENABLE_NVIDIA_GPU": "yes"})})
	if err != nil {
		t.Fatal(err)
	}
	if r.Options.EnableGPU || r.Options.DriverVersion != "550" || !slices.Equal(r.Options.RepoExtraPackages, []string{"gcc", "make"}) {
		t.Errorf("options: %+v", r.Options)
	}
}

// A huge value is quoted only in part; the message still names the
// setting, the start of the value, its size and what is allowed.
func TestLongValueClipped(t *testing.T) {
	long := strings.Repeat("x", 100_000)
	_, err := Resolve(Input{LookupEnv: env(map[string]string{"NVIDIA_DRIVER_VERSION": long})})
	if err == nil {
		t.Fatal("accepted")
	}
	msg := err.Error()
	if len(msg) > 1000 || !strings.Contains(msg, "NVIDIA_DRIVER_VERSION: invalid value \"xxxx") || !strings.Contains(msg, "(100000 bytes in all)") || !strings.Contains(msg, "allowed:") {
		t.Errorf("%d-byte message: %.300s", len(msg), msg)
	}
}
