package bake

import (
	"fmt"
	"time"

	"github.com/podvm-gpu/packer-plugin-podvm/aptrepo"
	"github.com/podvm-gpu/packer-plugin-podvm/gpustack"
	"github.com/podvm-gpu/packer-plugin-podvm/repokey"
	"github.com/podvm-gpu/packer-plugin-podvm/settings"
)

// CheckInputs makes the checks that need the build host's files and clock,
// for every entry point alike (packer validate, the mkosi generator, plan),
// so that a date apt would refuse, a wrong passphrase, an expired key or
// an unreadable keyring stop the build before it has spent its time on
// packages and DKMS. The signing key is loaded and its private half
// discarded at once; it is loaded again when the repository is signed.
func CheckInputs(o settings.Options, now time.Time) []error {
	var errs []error
	if o.RepoEnabled() {
		if err := aptrepo.CheckDate(o.Timestamp(), now); err != nil {
			errs = append(errs, fmt.Errorf("source_date_epoch (SOURCE_DATE_EPOCH): %d: %w; allowed: a time no later than now", o.SourceDateEpoch, err))
		}
		if o.SigningKey != "" {
			if _, err := SignerFingerprint(o.SigningKey, o.PassphraseEnv, o.Timestamp()); err != nil {
				errs = append(errs, fmt.Errorf("local_repo_signing_key: %w", err))
			}
		}
	}
	if o.EnableGPU && o.ModuleSigning == settings.SigningKey {
		if err := checkModuleKey(gpustack.ModuleKey{File: o.ModuleKey, Cert: o.ModuleCert, PassphraseEnv: o.ModulePassphraseEnv}); err != nil {
			errs = append(errs, err)
		}
	}
	if o.EnableGPU {
		for _, k := range []struct{ setting, path string }{
			{"nvidia_cuda_repo_keyring", o.CUDARepoKeyring},
			{"nvidia_container_toolkit_repo_keyring", o.ToolkitRepoKeyring},
		} {
			if k.path == "" {
				continue
			}
			if _, err := repokey.ReadFile(k.path, k.setting); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errs
}

// SignerFingerprint loads a signing key only to read its fingerprint; the
// private half is discarded at once.
func SignerFingerprint(path, passphraseEnv string, now time.Time) (string, error) {
	s, err := aptrepo.LoadSigner(path, passphraseEnv, now)
	if err != nil {
		return "", err
	}
	defer s.Discard()
	return s.Fingerprint(), nil
}
