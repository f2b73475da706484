package imagestep

import (
	"github.com/podvm-gpu/packer-plugin-podvm/gpustack"
	"github.com/podvm-gpu/packer-plugin-podvm/shellquote"
)

// Download is how apt fetches a repository's packages into Dir, the same
// commands on both back ends: the Packer path runs them in the image, the
// mkosi path in its sandbox, whose apt acts on the image. Each is a shell
// command line; apt-get's is the caller's (its noninteractive prefix, or
// the sandbox's apt-get).
type Download struct {
	// Prep makes Dir afresh, with apt's scratch state in Dir/.apt.
	Prep string
	// Fetch is the apt-get command that downloads into Archives.
	Fetch string
	// Archives is where Fetch leaves the .debs (a .deb cache can fill it
	// before and take from it after).
	Archives string
	// Finish moves the .debs into Dir, drops the scratch state and makes
	// everything readable: the .debs travel as the communicator's user, who
	// cannot read what root wrote under a restrictive umask.
	Finish string
}

// DownloadCommands fetches b's packages into dir. With the full closure,
// apt-get install --download-only resolves against an empty dpkg status:
// apt's own resolver picks exactly what a consumer with nothing installed
// needs, alternatives and virtual packages included, which no hand-walk of
// apt-cache depends gets right; -y, whatever the caller's apt-get says, as
// nobody answers a prompt. Recommends are left out: a consumer
// installing headers does not need them. The package caches are disabled
// so that the image's apt state is not touched. Without the closure,
// apt-get download fetches the named packages alone, into the current
// directory. apt names a file with an epoch's colon as %3a: the bake's
// pool names take it out (bake.PoolName).
func DownloadCommands(b gpustack.BakeRepo, dir, aptGet string) Download {
	n := shellquote.Word(dir)
	t := shellquote.Word(dir + "/.apt")
	d := Download{
		Prep:   "rm -rf " + n + " && mkdir -p " + t + "/archives/partial && : > " + t + "/status",
		Finish: "rm -rf " + t + " && chmod -R u=rwX,go=rX " + n,
	}
	if b.Closure {
		d.Fetch = aptGet + " -o Dir::State::status=" + t + "/status -o Dir::Cache::archives=" + t + "/archives" +
			" -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache= -o APT::Sandbox::User=root" +
			" -o APT::Install-Recommends=false --download-only -y install " + shellquote.JoinWords(b.Packages...)
		d.Archives = dir + "/.apt/archives"
		d.Finish = "mv " + t + "/archives/*.deb " + n + "/ && " + d.Finish
		return d
	}
	d.Fetch = "cd " + n + " && " + aptGet + " -o APT::Sandbox::User=root download " + shellquote.JoinWords(b.Packages...)
	d.Archives = dir
	return d
}

// Script is the download as one script.
func (d Download) Script() string {
	return "set -eu\n" + d.Prep + "\n" + d.Fetch + "\n" + d.Finish + "\n"
}
