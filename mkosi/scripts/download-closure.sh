echo "  downloading$pkgs with their dependency closure"
status=$(mktemp)
# shellcheck disable=SC2086 # $pkgs splits into package names.
apt-get -q -o Dir::State::Status="$status" -o Dir::Cache::Archives="$repo/" -o APT::Get::Download-Only=true install $pkgs
rm -rf "$status" "$repo/partial" "$repo/lock"
