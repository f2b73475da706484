echo "  downloading$pkgs"
# shellcheck disable=SC2086 # $pkgs splits into package names.
(cd "$repo" && apt-get -q download $pkgs)
