# shellcheck shell=sh
# verify_repo_apt APT DIR PACKAGE...: the apt half of the baked
# repository's offline self-test, which imagestep runs in the image for
# both back ends.
#
# APT is the apt-get command, split on blanks. DIR is a private directory:
# it holds sources.list.d/ with the repository as the only source,
# preferences.d/, lists/partial/, archives/partial/ and status, the dpkg
# status apt starts from (empty when the repository holds the full
# closure, else a copy of the image's).
#
# apt must read the repository without a warning (some apt versions only
# warn about a bad signature), and must take every PACKAGE from it.
# --reinstall makes apt choose the repository's copy of a package the
# image has installed already; yet where the repository lacks it apt only
# notes that it cannot be downloaded and exits 0, so each PACKAGE must
# also show up as an Inst line of the simulation.
verify_repo_apt() {
	vra_apt=$1 vra_dir=$2
	shift 2
	vra_out=$(verify_repo_apt_run update 2>&1) || {
		printf '%s\n' "$vra_out"
		echo "apt refused the local repository" >&2
		return 1
	}
	printf '%s\n' "$vra_out"
	if printf '%s\n' "$vra_out" | grep -q '^[WE]:'; then
		echo "apt reported problems reading the local repository" >&2
		return 1
	fi
	for vra_p in "$@"; do
		vra_out=$(verify_repo_apt_run install -s --reinstall "$vra_p" 2>&1) || {
			printf '%s\n' "$vra_out"
			echo "apt cannot install $vra_p from the local repository" >&2
			return 1
		}
		case "
$vra_out" in
		*"
Inst $vra_p "*) echo "  apt: $vra_p installs from the local repository" ;;
		*)
			printf '%s\n' "$vra_out"
			echo "apt would not take $vra_p from the local repository: it lacks the package" >&2
			return 1
			;;
		esac
	done
}

# verify_repo_apt_run ARG...: apt confined to $vra_dir: its own sources,
# preferences, lists, dpkg status and caches. The image's apt state is
# neither read nor written.
verify_repo_apt_run() {
	# shellcheck disable=SC2086 # $vra_apt is a command and its arguments: split on purpose.
	$vra_apt -q -o Dir::Etc::SourceList="$vra_dir/none.list" -o Dir::Etc::SourceParts="$vra_dir/sources.list.d" \
		-o Dir::Etc::Preferences="$vra_dir/none.pref" -o Dir::Etc::PreferencesParts="$vra_dir/preferences.d" \
		-o Dir::State::Lists="$vra_dir/lists" -o Dir::State::status="$vra_dir/status" \
		-o Dir::Cache::archives="$vra_dir/archives" -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache= \
		-o APT::Sandbox::User=root -o Acquire::Languages=none -o Debug::NoLocking=1 "$@"
}
