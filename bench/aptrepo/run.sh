#!/bin/bash
# Benchmark: aptrepo's builder against the tools people index apt
# repositories with today, on the same set of real Debian .debs.
#
#   bench/aptrepo/run.sh [RUNS]
#   bench/aptrepo/run.sh --fetch-only   # fill the cache, measure nothing
#
# Needs: go, apt-get/apt-cache (the host's apt sources, for the first run
# only), apt-ftparchive (apt-utils), dpkg-scanpackages (dpkg-dev), gpg,
# coreutils, python3 and GNU time (Debian package time). The .debs are
# fetched once with apt-get download through the host's apt configuration
# into ${PODVM_CACHE:-~/.cache/podvm}/debs/bench and reused afterwards; the
# host's own apt state is not touched. Results go to stdout as Markdown.
set -euo pipefail

FETCH_ONLY=false
if [ "${1:-}" = --fetch-only ]; then
	FETCH_ONLY=true
	shift
fi
RUNS=${1:-5}
REPO_ROOT=$(cd "$(dirname "$0")/../.." && pwd)
# The default matches os.UserCacheDir, which BenchmarkBuildIndexOnly reads.
CACHE=${PODVM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/podvm}
SET=$CACHE/debs/bench
# A realistic mix: kernel image and headers, two compilers with all their
# libraries, Go's toolchain and sources, Python. With their dependency
# closure this is about 140 .debs and 250 MiB on Debian 12.
ROOTS=(linux-image-amd64 linux-headers-amd64 gcc-12 g++-12 golang-1.19-go golang-1.19-src python3)
MIN_DEBS=100
MIN_MIB=200

tools=(apt-get apt-cache)
$FETCH_ONLY || tools+=(go apt-ftparchive dpkg-scanpackages gpg gzip sha256sum python3 /usr/bin/time)
for tool in "${tools[@]}"; do
	command -v "$tool" >/dev/null || { echo "run.sh: $tool is not installed" >&2; exit 1; }
done

apt_private=(
	-o "Dir::State::Lists=$CACHE/apt/lists"
	-o "Dir::Cache=$CACHE/apt/cache"
	-o Debug::NoLocking=true
	-o "APT::Sandbox::User=$(id -un)"
	-o Acquire::Languages=none
)

cached() {
	[ -s "$SET/manifest" ] || return 1
	while read -r f; do [ -f "$SET/$f" ] || return 1; done <"$SET/manifest"
}

if ! cached; then
	echo "Fetching the benchmark .debs into $SET ..." >&2
	mkdir -p "$SET" "$CACHE/apt/lists/partial" "$CACHE/apt/cache/archives/partial"
	apt-get "${apt_private[@]}" -q update >&2
	mapfile -t names < <(apt-cache "${apt_private[@]}" depends --recurse --no-recommends \
		--no-suggests --no-conflicts --no-breaks --no-replaces --no-enhances "${ROOTS[@]}" |
		grep -v '^ ' | grep -v '^<' | sort -u)
	(cd "$SET" && rm -f ./*.deb && apt-get "${apt_private[@]}" -q download "${names[@]}" >&2)
	(cd "$SET" && ls ./*.deb | sed 's|^\./||' >manifest)
fi

count=$(wc -l <"$SET/manifest")
bytes=$(cd "$SET" && xargs stat -c %s <manifest | awk '{s+=$1} END {print s}')
mib=$((bytes / 1048576))
if ((count < MIN_DEBS || mib < MIN_MIB)); then
	echo "run.sh: only $count .debs, $mib MiB; want >= $MIN_DEBS and >= $MIN_MIB MiB" >&2
	exit 1
fi

echo "$count .debs, $mib MiB in $SET" >&2
$FETCH_ONLY && exit 0

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
# Hard links: every tool reads the same inodes, hence the same page cache.
mkdir "$WORK/debs"
(cd "$SET" && xargs -I{} ln {} "$WORK/debs/{}" <manifest)

go build -o "$WORK/podvm" "$REPO_ROOT"

export GNUPGHOME=$WORK/gnupg
mkdir -m 0700 "$GNUPGHOME"
gpg --batch -q --passphrase '' --quick-gen-key 'bench <bench@example.org>' ed25519 sign never 2>/dev/null

# Each contender leaves its output outside the .deb directory, except the
# in-place runs, which are the point of --in-place.
cat >"$WORK/ftparchive.sh" <<SH
set -e
cd "$WORK/debs"
o="$WORK/ftp"; mkdir -p "\$o"
apt-ftparchive packages . >"\$o/Packages"
gzip -9n -c "\$o/Packages" >"\$o/Packages.gz"
cd "\$o"
apt-ftparchive release . >Release.new && mv Release.new Release
gpg --batch --yes -q --clearsign -o InRelease Release
gpg --batch --yes -q -abs -o Release.gpg Release
SH
cat >"$WORK/scanpackages.sh" <<SH
set -e
cd "$WORK/debs"
dpkg-scanpackages --multiversion . >"$WORK/scan-Packages" 2>/dev/null
SH

export SOURCE_DATE_EPOCH=$(date +%s)
names=(
	'podvm repo --in-place'
	'podvm repo --link'
	'podvm repo --in-place, GOMAXPROCS=1'
	'apt-ftparchive + gzip + gpg'
	'dpkg-scanpackages'
	'sha256sum (floor)'
	'cat (read only)'
)
cmds=(
	"$WORK/podvm repo --debs $WORK/debs --in-place >/dev/null"
	"$WORK/podvm repo --debs $WORK/debs --out $WORK/repo --link >/dev/null"
	"GOMAXPROCS=1 $WORK/podvm repo --debs $WORK/debs --in-place >/dev/null"
	"bash $WORK/ftparchive.sh"
	"bash $WORK/scanpackages.sh"
	"cd $WORK/debs && sha256sum ./*.deb >/dev/null"
	"cd $WORK/debs && cat ./*.deb >/dev/null"
)
# Rounds interleave the contenders, each round starting one further along,
# so that load from elsewhere on the host hits all of them alike; the
# report uses medians. Round 0 only warms the page cache.
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
: >"$WORK/times"
for ((round = 0; round <= RUNS; round++)); do
	for ((k = 0; k < ${#names[@]}; k++)); do
		i=$(((k + round) % ${#names[@]}))
		/usr/bin/time -f '%e %U %S' -o "$WORK/t" bash -c "${cmds[$i]}"
		if ((round > 0)); then
			printf '%s\t%s\n' "${names[$i]}" "$(cat "$WORK/t")" >>"$WORK/times"
		fi
	done
	echo "round $round of $RUNS done" >&2
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

# Sanity: the tools agree on what they indexed.
ours=$(grep -c '^Package:' "$WORK/debs/Packages")
ftp=$(grep -c '^Package:' "$WORK/ftp/Packages")
scan=$(grep -c '^Package:' "$WORK/scan-Packages")
if [ "$ours" != "$count" ] || [ "$ftp" != "$count" ] || [ "$scan" != "$count" ]; then
	echo "run.sh: package counts differ: ours $ours, apt-ftparchive $ftp, dpkg-scanpackages $scan, files $count" >&2
	exit 1
fi
diff <(grep '^SHA256:' "$WORK/debs/Packages" | sort) <(grep '^SHA256:' "$WORK/ftp/Packages" | sort) >/dev/null ||
	{ echo "run.sh: SHA256 fields differ from apt-ftparchive's" >&2; exit 1; }

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
echo "Measured $(date -u +%Y-%m-%d) on $(nproc) x $cpu, $(free -g | awk '/^Mem:/{print $2}') GiB RAM,"
echo "$(. /etc/os-release && echo "$PRETTY_NAME"), kernel $(uname -r), $(go version | cut -d' ' -f3),"
echo "apt-ftparchive $(dpkg-query -W -f '${Version}' apt-utils), dpkg-dev $(dpkg-query -W -f '${Version}' dpkg-dev), gpg $(gpg --version | head -1 | cut -d' ' -f3)."
echo "Input: $count .debs, $mib MiB, warm page cache; median of $RUNS interleaved rounds after one warm-up."
echo "Load average before and after: $load_before / $load_after."
echo
python3 - "$WORK/times" "${names[@]}" <<'PY'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
order = sys.argv[2:]
data = {n: [] for n in order}
for name, t in rows:
    e, u, s = map(float, t.split())
    data[name].append((e, u + s))
med = {n: statistics.median(e for e, _ in v) for n, v in data.items()}
cpu = {n: statistics.median(c for _, c in v) for n, v in data.items()}
floor, ours = med["sha256sum (floor)"], med["podvm repo --in-place"]
print("| | wall, median (min-max) | CPU, median | wall vs. sha256sum | wall vs. podvm --in-place |")
print("|---|---:|---:|---:|---:|")
for n in order:
    es = [e for e, _ in data[n]]
    print(f"| {n} | {med[n]:.2f} s ({min(es):.2f}-{max(es):.2f}) | {cpu[n]:.2f} s | {med[n]/floor:.2f}x | {med[n]/ours:.2f}x |")
PY
