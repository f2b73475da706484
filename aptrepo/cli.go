package aptrepo

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"github.com/podvm-gpu/packer-plugin-podvm/cmdflags"
	"github.com/spf13/pflag"
)

// RunCommand implements the "repo" subcommand: it parses args (flags as in
// the usage text below), builds the repository and prints a summary to
// stdout. It returns the process exit status: 0 on success, 1 when the
// build fails, 2 for bad usage.
func RunCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("repo", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		debs          = fs.String("debs", "", "directory holding the .deb files (required)")
		out           = fs.String("out", "", "repository directory to create or replace")
		inPlace       = fs.Bool("in-place", false, "write the index beside the .debs in --debs instead of into --out")
		link          = fs.Bool("link", false, "hard-link the .debs into --out instead of copying them (copies across file systems)")
		keyFile       = fs.String("key", "", "armored OpenPGP private key file (default: a fresh Ed25519 key, discarded after signing)")
		passphraseEnv = fs.String("passphrase-env", "", "name of the environment variable holding the --key passphrase")
		origin        = fs.String("origin", "podvm", "Origin field of Release")
		label         = fs.String("label", "podvm local packages", "Label field of Release")
		allDigests    = fs.Bool("all-digests", false, "also write MD5, SHA1 and SHA512 into Packages and Release, for consumers older than apt's SHA256")
	)
	fs.Usage = func() {
		fmt.Fprint(stderr, `Usage: packer-plugin-podvm repo --debs DIR (--out DIR | --in-place) [flags]

Indexes the .debs in DIR as a flat apt repository (Packages, Packages.gz,
Release, InRelease, Release.gpg, keyring.gpg, keyring.asc) and signs it.
Release's Date comes from SOURCE_DATE_EPOCH when set, else the current time;
the same .debs, key and SOURCE_DATE_EPOCH give byte-identical output.

Flags:
`)
		fs.PrintDefaults()
	}
	if code, ok := cmdflags.Parse(fs, args, true, stderr); !ok {
		return code
	}
	usageErr := func(msg string) int {
		fmt.Fprintf(stderr, "repo: %s\n", msg)
		fs.Usage()
		return 2
	}
	switch {
	case fs.NArg() > 0:
		return usageErr(fmt.Sprintf("unexpected argument %q", fs.Arg(0)))
	case *debs == "":
		return usageErr("--debs is required")
	case *inPlace && *link:
		return usageErr("--link makes no sense with --in-place")
	case *inPlace && *out != "" && filepath.Clean(*out) != filepath.Clean(*debs):
		return usageErr("--in-place writes into --debs; --out must be omitted or the same directory")
	case !*inPlace && *out == "":
		return usageErr("--out is required (or --in-place)")
	case *passphraseEnv != "" && *keyFile == "":
		return usageErr("--passphrase-env needs --key")
	case len(*origin) > MaxReleaseField:
		return usageErr(fmt.Sprintf("--origin of %d bytes: at most %d are allowed (a line of Release; gpgv and apt fail on one near 20,000 bytes)", len(*origin), MaxReleaseField))
	case len(*label) > MaxReleaseField:
		return usageErr(fmt.Sprintf("--label of %d bytes: at most %d are allowed (a line of Release; gpgv and apt fail on one near 20,000 bytes)", len(*label), MaxReleaseField))
	}

	fail := func(err error) int {
		fmt.Fprintf(stderr, "repo: %v\n", err)
		return 1
	}
	date, err := DateFromEnvironment()
	if err != nil {
		return fail(err)
	}
	var signer *Signer
	if *keyFile != "" {
		signer, err = LoadSigner(*keyFile, *passphraseEnv, date)
	} else {
		signer, err = NewEphemeralSigner("podvm local packages, ephemeral key", date)
	}
	if err != nil {
		return fail(err)
	}
	defer signer.Discard()

	opts := Options{
		DebDir: *debs,
		Out:    *out,
		Origin: *origin,
		Label:  *label,
		Date:   date,
		Signer: signer,

		AllDigests: *allDigests,
	}
	switch {
	case *inPlace:
		opts.Out, opts.Placement = *debs, IndexOnly
	case *link:
		opts.Placement = HardLink
	}

	res, err := Build(ctx, opts)
	if err != nil {
		return fail(err)
	}
	for _, p := range res.Packages {
		fmt.Fprintf(stdout, "  %s %s %s  %s\n", p.Name, p.Version, p.Architecture, p.SHA256)
	}
	fmt.Fprintf(stdout, "repo: %d packages, %s, key %s, %.2fs -> %s\n",
		len(res.Packages), humanBytes(res.TotalBytes), res.Fingerprint, res.Elapsed.Seconds(), res.Dir)
	return 0
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
