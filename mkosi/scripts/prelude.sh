
die() { echo "podvm: $*" >&2; exit 1; }

# repo_files_only DIR: the repository holds packages, its index, the
# public keyring and the manifest, nothing else.
repo_files_only() {
	for f in "$BUILDROOT$1"/* "$BUILDROOT$1"/.[!.]*; do
		[ -e "$f" ] || continue
		case "${f##*/}" in
		*.deb | Packages | Packages.gz | Release | InRelease | Release.gpg | keyring.gpg | keyring.asc | manifest.json) ;;
		*) die "unexpected file in the local repository: ${f#"$BUILDROOT"}" ;;
		esac
	done
}
