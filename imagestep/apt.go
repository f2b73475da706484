package imagestep

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/podvm-gpu/packer-plugin-podvm/aptsource"
	"github.com/podvm-gpu/packer-plugin-podvm/bake"
	"github.com/podvm-gpu/packer-plugin-podvm/gpustack"
	"github.com/podvm-gpu/packer-plugin-podvm/repokey"
	"github.com/podvm-gpu/packer-plugin-podvm/shellquote"
)

// ComponentsSources is the file that enables more components of the
// image's own archive. The image's files are left alone; its "podvm-" name
// keeps it out of aptsource.ArchiveOf on a rerun.
const ComponentsSources = "/etc/apt/sources.list.d/podvm-archive-components.sources"

// ListSourcesCommand prints every apt source file of the image, each after a
// marker line naming it, so one round trip reads them all.
const ListSourcesCommand = `for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do ` +
	`[ -f "$f" ] || continue; echo "` + SourceMarker + `$f"; cat "$f"; echo; done`

// SourceMarker starts the line that names a file in ListSourcesCommand's
// output.
const SourceMarker = "#### podvm-gpu source file: "

// parseSourceFiles splits the output of ListSourcesCommand and parses each file.
func parseSourceFiles(out string) ([]aptsource.Source, error) {
	var sources []aptsource.Source
	var file string
	var body strings.Builder
	finish := func() error {
		if file == "" {
			return nil
		}
		srcs, err := aptsource.ParseFile(file, body.String())
		sources = append(sources, srcs...)
		body.Reset()
		return err
	}
	for _, l := range strings.SplitAfter(out, "\n") {
		if name, ok := strings.CutPrefix(l, SourceMarker); ok {
			if err := finish(); err != nil {
				return nil, err
			}
			file = strings.TrimSpace(name)
			continue
		}
		body.WriteString(l)
	}
	return sources, finish()
}

// componentsFile is the extra sources file that adds the wanted components
// the image's archive entries lack; "" when nothing is missing.
func componentsFile(archive []aptsource.Source, want []string) string {
	missing := aptsource.MissingComponents(archive, want)
	if len(missing) == 0 {
		return ""
	}
	return aptsource.Render("Written by podvm-gpu: components of the image's archive the GPU stack needs.", missing)
}

// aptComponents enables components of the image's own archive by writing
// one extra deb822 source for the same URIs and suites.
func (e *Executor) aptComponents(ctx context.Context, a gpustack.AptComponents) error {
	out, err := e.Target.Output(ctx, ListSourcesCommand)
	if err != nil {
		return fmt.Errorf("reading the image's apt sources: %w", err)
	}
	entries, err := parseSourceFiles(out)
	if err != nil {
		return fmt.Errorf("reading the image's apt sources: %w", err)
	}
	archive := aptsource.ArchiveOf(entries, a.Keyring, e.Codename)
	if len(archive) == 0 {
		return fmt.Errorf("no apt source of the image's own archive found (signed by %s, or unsigned with suites %s*) in /etc/apt/sources.list or /etc/apt/sources.list.d",
			a.Keyring, e.Codename)
	}
	text := componentsFile(archive, a.Components)
	if text == "" {
		e.Say(fmt.Sprintf("components %s already enabled", strings.Join(a.Components, " ")))
		return e.Target.Run(ctx, "rm -f "+ComponentsSources)
	}
	return e.Target.Put(ctx, ComponentsSources, []byte(text), 0o644, "root:root")
}

// aptSource installs a repository's keyring, then its source file. A key
// named by URL is fetched on the build host, over https, and must have one
// of the plan's fingerprints.
func (e *Executor) aptSource(ctx context.Context, a gpustack.AptSource) error {
	var keyring []byte
	var err error
	switch k := a.Key; {
	case k.InImage:
	case k.File != "":
		if keyring, err = repokey.ReadFile(k.File, "the key of apt source "+a.Name); err != nil {
			return err
		}
	case k.URL != "":
		if keyring, err = e.fetchKey(ctx, k); err != nil {
			return err
		}
	default:
		return fmt.Errorf("apt source %s: no key", a.Name)
	}
	if keyring != nil {
		if err := e.Target.Put(ctx, a.Keyring, keyring, 0o644, "root:root"); err != nil {
			return err
		}
	}
	return e.Target.Put(ctx, a.SourcesPath(), []byte(a.Deb822()), 0o644, "root:root")
}

// fetchKey fetches a key once a build: several sources may share one.
func (e *Executor) fetchKey(ctx context.Context, k gpustack.Key) ([]byte, error) {
	if kr := e.keys[k.URL]; kr != nil {
		return kr, nil
	}
	e.Say(fmt.Sprintf("fetching %s on the build host (fingerprint %s)", k.URL, strings.Join(k.Fingerprints, " or ")))
	client := e.HTTP
	if client == nil {
		client = &http.Client{Timeout: 60 * time.Second}
	}
	kr, err := repokey.Fetch(ctx, client, k.URL, k.Fingerprints)
	if err != nil {
		return nil, err
	}
	if e.keys == nil {
		e.keys = map[string][]byte{}
	}
	e.keys[k.URL] = kr
	return kr, nil
}

// signModules signs (or verifies) the modules in the image. A user's key
// is read on the build host and piped into the command, so it reaches the
// image's tmpfs and never a file of the image.
func (e *Executor) signModules(ctx context.Context, a gpustack.SignModules) error {
	cmd := a.Command() + " " + shellquote.JoinWords(a.Kernels...)
	if a.Key == nil || a.Verify {
		return e.Target.Run(ctx, cmd)
	}
	k := *a.Key
	if e.HostPath != nil {
		k.File, k.Cert = e.HostPath(k.File), e.HostPath(k.Cert)
	}
	in, err := bake.ModuleKeyInput(k)
	if err != nil {
		return err
	}
	return e.Target.RunInput(ctx, cmd, bytes.NewReader(in))
}

// verifyRepoApt defines the shell function verify_repo_apt, the apt half
// of the self-test.
//
//go:embed scripts/verify-repo-apt.sh
var verifyRepoApt string

// VerifyRepoCommand is the offline self-test of the baked repository: apt
// with it as its only source must accept the signature and take the
// packages from it. The image's dpkg status is at imageStatus, so that a
// test can run the command on a host with a status of its own.
func VerifyRepoCommand(a gpustack.VerifyRepo, imageStatus string) string {
	src := bake.Sources(a.Dir, a.Keyring)
	status := `: > "$d/status"`
	// With the full closure apt starts from an empty dpkg status, as a
	// driver container does; otherwise the image's supplies what the
	// repository leaves out.
	if !a.Closure {
		status = `cp ` + shellquote.Word(imageStatus) + ` "$d/status"`
	}
	return verifyRepoApt +
		`d=$(mktemp -d) && trap 'rm -rf "$d"' EXIT && ` +
		`mkdir -p "$d/lists/partial" "$d/archives/partial" "$d/sources.list.d" "$d/preferences.d" && ` + status + ` && ` +
		`printf '%s' ` + shellquote.Word(src) + ` > "$d/sources.list.d/local.sources" && ` +
		`verify_repo_apt apt-get "$d" ` + shellquote.JoinWords(a.Packages...)
}
