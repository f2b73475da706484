// Package aptrepo builds signed flat apt repositories in pure Go.
//
// A flat repository is one directory holding .deb files beside their index:
// Packages, Packages.gz, Release, InRelease (clearsigned) and Release.gpg
// (detached signature), plus the public key as keyring.gpg (binary) and
// keyring.asc (armored). apt reads it with a deb822 source such as
//
//	Types: deb
//	URIs: file:///opt/local-packages
//	Suites: ./
//	Signed-By: /usr/share/keyrings/podvm-local-packages.gpg
//
// (no Components line: apt rejects one on a flat repository).
//
// Nothing here runs gpg, dpkg or apt: .deb files are read with a streaming
// ar parser, and signing uses github.com/ProtonMail/go-crypto. Output is
// written into a temporary directory beside the target and renamed into
// place, and it is byte-for-byte reproducible for the same .debs, key and
// Date.
package aptrepo
