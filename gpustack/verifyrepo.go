package gpustack

import _ "embed"

// VerifyRepoShell defines the shell function verify_repo_apt, which runs
// the apt half of VerifyRepo. Both back ends define it and call it, so the
// provisioner and the mkosi scripts verify the baked repository with the
// same apt command line; written twice, the two had drifted (one of them
// let installed headers pass without the repository holding them).
//
//go:embed scripts/verify-repo-apt.sh
var VerifyRepoShell string

// ImageStatus reports whether the self-test's apt starts from the image's
// own dpkg status, which supplies what the repository leaves out. With the
// full closure it starts from an empty one, as a driver container does.
func (a VerifyRepo) ImageStatus() bool { return !a.Closure }
