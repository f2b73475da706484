package mkosi

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestPassphraseOnlyToTheSigner: mkosi's Environment= hands a passphrase
// to every script, and mkosi-chroot hands it on to every command in the
// image (package maintainer scripts, DKMS). Each generated script moves
// it into a shell variable that is not exported before it runs anything,
// and only the commands that sign get it back.
func TestPassphraseOnlyToTheSigner(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "m.key")
	cert := filepath.Join(dir, "m.pem")
	for _, f := range []string{key, cert} {
		if err := os.WriteFile(f, []byte("placeholder\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p := plan(t, "debian", "13", map[string]string{
		"build_cache":                           "no",
		"nvidia_container_toolkit_repo_keyring": filepath.Join("testdata", "toolkit-key.asc"),
		"nvidia_module_signing":                 "key",
		"nvidia_module_signing_key":             key,
		"nvidia_module_signing_cert":            cert,
		"nvidia_module_signing_passphrase_env":  "MODPASS",
		"local_repo":                            "yes",
		"local_repo_signing_key":                key,
		"local_repo_passphrase_env":             "REPOPASS",
	})
	files, err := Render(context.Background(), Config{Plan: p, Bin: "/usr/local/bin/packer-plugin-podvm", HTTPClient: noNetwork})
	if err != nil {
		t.Fatal(err)
	}
	signers := map[string]*regexp.Regexp{
		// run-steps signs the modules and the repository, and keeps both
		// passphrases from the commands it runs in the image.
		"MODPASS":  regexp.MustCompile(`^MODPASS="\$podvm_secret_MODPASS" REPOPASS="\$podvm_secret_REPOPASS" "\$podvm_bin" mkosi run-steps .*--phase install .*--secret-env MODPASS`),
		"REPOPASS": regexp.MustCompile(`^(MODPASS="\$podvm_secret_MODPASS" )?REPOPASS="\$podvm_secret_REPOPASS" "\$podvm_bin" mkosi (run-steps .*--phase install .*--secret-env REPOPASS|record-disk )`),
	}
	var scripts int
	for _, f := range files {
		// mkosi's scripts, not files of the image or the sandbox.
		if !mkosiScript.MatchString(f.Path) {
			continue
		}
		scripts++
		text := string(f.Data)
		for name, signer := range signers {
			save := "podvm_secret_" + name + "=${" + name + "-}\nunset " + name + "\n"
			i := strings.Index(text, save)
			// The first command: the prelude's die(), or in a script
			// without the prelude (post-output) the first assignment.
			first := strings.Index(text, "die()")
			if first < 0 {
				first = strings.Index(text, "podvm_bin=")
			}
			if i < 0 || i > first {
				t.Errorf("%s does not move $%s out of the environment before its first command:\n%.600s", f.Path, name, text)
				continue
			}
			for _, line := range strings.Split(text, "\n") {
				if strings.Contains(line, "$"+name) || strings.Contains(line, name+"=") {
					if !signer.MatchString(line) && !strings.HasPrefix(line, "podvm_secret_"+name+"=") {
						t.Errorf("%s: $%s reaches a command that does not sign: %s", f.Path, name, line)
					}
				}
			}
		}
	}
	if scripts == 0 {
		t.Fatal("no script rendered")
	}
	var signed int
	for _, f := range files {
		if strings.HasSuffix(f.Path, "mkosi.postinst.d/50-podvm.sh") {
			for _, re := range signers {
				if lineMatching(string(f.Data), re) != "" {
					signed++
				}
			}
		}
	}
	if signed != len(signers) {
		t.Errorf("the post-installation script gives the passphrase to %d signing commands, want %d", signed, len(signers))
	}
}

var mkosiScript = regexp.MustCompile(`(^|/)mkosi\.(sync|prepare|build|postinst|finalize|postoutput|clean)(\.d/[^/]+)?$`)

func lineMatching(text string, re *regexp.Regexp) string {
	for _, l := range strings.Split(text, "\n") {
		if re.MatchString(l) {
			return l
		}
	}
	return ""
}
