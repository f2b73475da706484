// Package mkosi renders a gpustack Plan as a configuration tree for mkosi
// 25 or newer: mkosi.conf with distro drop-ins, an nvidia-gpu profile with
// its packages, sandbox apt sources and keyrings, an extra tree and the
// scripts that build and check the modules for the image's kernels. The
// signed local repository is baked on the build host by this program
// itself (BakeRepo), called from the generated post-installation script,
// so the signing key never enters the tree or the image.
//
// The renderer switches on the Plan's action types only; everything it
// knows about distros comes from gpustack.
package mkosi
