package mkosi

import _ "embed"

// Shell text of the generated scripts and of run-steps' download. They
// run under /bin/sh in mkosi's sandbox on the build host: apt-get and dpkg
// there are mkosi's wrappers that act on the image ($BUILDROOT), and
// mkosi-chroot runs a command inside the image.

// prelude defines the helpers the scripts call.
//
//go:embed scripts/prelude.sh
var prelude string

// noPrivateKeys fails the build on private key material of any kind in
// any file of the image (packer-plugin-podvm mkosi check-keys: PEM, OpenSSH,
// OpenPGP, DER; files a package shipped unchanged aside). The repository's
// key is made and discarded on the host, the module signing key on a tmpfs.
//
//go:embed scripts/no-private-keys.sh
var noPrivateKeys string

// buildLeftovers removes, last in the finalize script, what the layer's
// commands in the image leave that differs from build to build, so that
// the same inputs give the same disk (TestReproducibleMkosi).
//
//go:embed scripts/build-leftovers.sh
var buildLeftovers string

// layerSize prints, at the end of a layer's post-installation, the size of
// the root and the layer's share of it, for sizing a verity partition.
//
//go:embed scripts/layer-size.sh
var layerSize string

// configure is the standalone tree's mkosi.configure: it sets mke2fs's
// directory hash seed from Seed=, which systemd-repart leaves random, so
// that a fixed seed gives the same root file system.
//
//go:embed scripts/configure.sh
var configure string
