#!/bin/sh
# Runs inside a booted pod VM image (no network, no GPU) as a transient
# check unit that the test passes in as systemd credentials, so the image
# under test carries nothing of it. Every check prints one line
#   PODVM-CHECK <name> ok|FAIL <detail>
# on the second serial port; the test fails on a FAIL and on a check that
# did not report at all, and needs the END line to trust the run.
set -u
exec >/dev/ttyS1 2>&1
# However the script ends, the VM powers off; an early end says so and
# leaves out the END line, which the test needs to trust the run.
finished=0
trap '[ "$finished" = 1 ] || echo "PODVM-CHECK-ABORTED the check script stopped early"; systemctl --no-block poweroff' EXIT
creds=${CREDENTIALS_DIRECTORY:?no credentials}
# MODULE, GPU_UNITS, HEADERS_PREFIX, INITRD, EXPOSE, AGENT_UNITS, VERITY and
# GROW_MIN come from the test.
. "$creds/podvm.bootcheck.env"
: "${MODULE:=}" "${GPU_UNITS:=}" "${HEADERS_PREFIX:=linux-headers-}" "${INITRD:=image}" "${EXPOSE:=}" "${AGENT_UNITS:=}" "${VERITY:=}" "${GROW_MIN:=0}"

failures=0
ok() { echo "PODVM-CHECK $1 ok ${2:-}"; }
fail() { echo "PODVM-CHECK $1 FAIL $2"; failures=$((failures + 1)); }
# show prints evidence with a prefix the test can log.
show() { sed 's/^/PODVM-LOG /'; }

kver=$(uname -r)
echo "PODVM-LOG kernel $kver"

# 1. Boot reaches the default target with zero failed units.
state=$(systemctl is-system-running --wait 2>&1)
failed=$(systemctl list-units --failed --no-legend --plain 2>&1 | grep -v podvm-bootcheck)
if [ "$state" = running ] && [ -z "$failed" ]; then
	ok boot "running, no failed units"
else
	fail boot "state $state; failed units: $(echo "$failed" | tr '\n' ';')"
	systemctl list-units --failed --no-pager 2>&1 | show
fi
systemd-analyze 2>&1 | head -1 | show
echo "PODVM-TIME $(systemd-analyze 2>/dev/null | head -1)"

# 1b. Given a disk larger than the image, the root grew to it: its
#     partition (systemd-repart) and its file system (systemd-growfs).
if [ "$GROW_MIN" -gt 0 ]; then
	disk=$(lsblk -b -n -d -o SIZE /dev/vda 2>&1)
	rootsize=$(df -B1 --output=size / 2>&1 | tail -n 1 | tr -d ' ')
	if [ "${rootsize:-0}" -ge "$GROW_MIN" ] 2>/dev/null; then
		ok grown "root file system $((rootsize >> 20)) MiB on a disk of $((disk >> 20)) MiB"
	else
		fail grown "root file system '$rootsize' bytes, want at least $GROW_MIN on a disk of $disk"
		systemctl status systemd-repart.service systemd-growfs-root.service --no-pager 2>&1 | tail -20 | show
		lsblk -b /dev/vda 2>&1 | show
	fi
fi

# 2. No network device at all: the repository check below is offline.
nics=$(ls /sys/class/net | grep -vx lo | tr '\n' ' ')
if [ -z "$nics" ]; then ok offline; else fail offline "network devices: $nics"; fi

# 3. Every GPU unit is skipped by its condition on a VM without a GPU.
for u in $GPU_UNITS; do
	active=$(systemctl show -P ActiveState "$u")
	result=$(systemctl show -P Result "$u")
	enabled=$(systemctl is-enabled "$u" 2>&1)
	if [ "$enabled" = enabled ] && [ "$active" = inactive ] && [ "$result" = exec-condition ]; then
		ok "unit:$u" "skipped by ExecCondition"
	else
		fail "unit:$u" "enabled=$enabled active=$active result=$result"
		journalctl -b -u "$u" --no-pager 2>&1 | tail -5 | show
	fi
done

# 3b. nvidia-persistenced, where the image has it, keeps UVM persistence
#     as NVIDIA's guest init for kata runs it.
case " $GPU_UNITS " in
*" nvidia-persistenced.service "*)
	exec_start=$(systemctl show -P ExecStart nvidia-persistenced.service 2>&1)
	case "$exec_start" in
	*--uvm-persistence-mode*) ok persistenced-uvm "$(echo "$exec_start" | sed -n 's/.*argv\[\]=\([^;]*\);.*/\1/p')" ;;
	*) fail persistenced-uvm "ExecStart has no --uvm-persistence-mode: $exec_start" ;;
	esac
	;;
esac

# 4. The NVIDIA module is built for the running kernel: loading it fails
#    only because there is no GPU.
if [ -n "$MODULE" ]; then
	vermagic=$(modinfo -F vermagic "$MODULE" 2>&1)
	out=$(modprobe "$MODULE" 2>&1); rc=$?
	kmsg=$(dmesg 2>&1 | grep -iE 'nvidia|NVRM' | tail -20)
	bad=$(echo "$out $kmsg" | grep -E 'Unknown symbol|Exec format error|Key was rejected|disagrees about version|Invalid module format')
	case "$vermagic" in "$kver "*) vm=ok ;; *) vm=bad ;; esac
	if [ "$rc" -ne 0 ] && [ -z "$bad" ] && [ "$vm" = ok ] && echo "$kmsg" | grep -q 'NVRM: No NVIDIA GPU found'; then
		ok module "$MODULE: vermagic $kver, refused with 'No NVIDIA GPU found'"
	else
		fail module "$MODULE: modprobe rc=$rc vermagic='$vermagic' bad='$bad'"
		echo "$out" | show
		echo "$kmsg" | show
	fi
fi

# 5. nouveau is neither loaded nor in the initramfs.
if [ -n "$MODULE" ]; then
	loaded=$(grep -w '^nouveau' /proc/modules)
	if [ -n "$loaded" ]; then
		fail nouveau "loaded: $loaded"
	elif [ "${INITRD:-}" = host ]; then
		# A unified kernel image carries its initrd; the test reads it on the host.
		ok nouveau "not loaded (initrd checked on the host)"
	elif ! list=$(lsinitramfs "/boot/initrd.img-$kver" 2>&1); then
		fail nouveau "cannot list /boot/initrd.img-$kver: $list"
	elif echo "$list" | grep -q 'nouveau\.ko'; then
		fail nouveau "in /boot/initrd.img-$kver: $(echo "$list" | grep 'nouveau\.ko')"
	else
		ok nouveau "not loaded, not in /boot/initrd.img-$kver ($(echo "$list" | wc -l) files)"
	fi
fi

# 6. The repository is bound read-only where the GPU Operator's driver
#    container sees it (below the host's /run/nvidia).
if [ -n "${EXPOSE:-}" ]; then
	unit=$(systemd-escape --path --suffix=mount "$EXPOSE")
	opts=$(findmnt -n -o OPTIONS --mountpoint "$EXPOSE" 2>&1)
	if [ "$(systemctl is-active "$unit")" = active ] && echo ",$opts," | grep -q ',ro,' &&
		! touch "$EXPOSE/.podvm-write-test" 2>/dev/null && [ -e "$EXPOSE/InRelease" ]; then
		ok expose "$EXPOSE: $unit active, mounted $opts"
	else
		fail expose "$EXPOSE: unit $(systemctl is-active "$unit"), options '$opts'"
		systemctl status "$unit" podvm-local-packages.service --no-pager 2>&1 | show
		ls -la "$(systemctl show -P What "$unit")" 2>&1 | head -5 | show
	fi
fi

# 7. A pod VM: the agent stack's units are enabled as its binaries tree
#    says; process-user-data ran, kata-agent.path started kata-agent, and
#    agent-protocol-forwarder followed its socket; every GPU unit ordered
#    before kata-agent.service (the CDI one among them) finished before
#    kata-agent started. The stand-ins' units are among those that must
#    not fail (check 1).
if [ -n "$AGENT_UNITS" ]; then
	bad=""
	for u in $AGENT_UNITS; do
		e=$(systemctl is-enabled "$u" 2>&1)
		[ "$e" = enabled ] || bad="$bad $u=$e"
	done
	if [ -z "$bad" ]; then ok agent-enabled "$AGENT_UNITS"; else fail agent-enabled "not enabled:$bad"; fi

	# The forwarder starts last, once kata-agent made its socket, which may
	# be after the boot counts as finished.
	i=0
	while [ "$i" -lt 60 ] && [ "$(systemctl is-active agent-protocol-forwarder.service)" != active ]; do
		sleep 1
		i=$((i + 1))
	done
	prop() { systemctl show -P "$1" "$2" 2>&1; }
	pud="$(prop ActiveState process-user-data.service)/$(prop Result process-user-data.service)"
	path=$(prop ActiveState kata-agent.path)
	agent=$(prop ActiveState kata-agent.service)
	by=$(prop TriggeredBy kata-agent.service)
	apf=$(prop ActiveState agent-protocol-forwarder.service)
	ran=$(journalctl -b -u kata-agent.service -o cat 2>&1 | grep -c 'up with /etc/agent-config.toml')
	if [ "$pud" = active/success ] && [ "$path" = active ] && [ "$agent" = active ] &&
		[ "$by" = kata-agent.path ] && [ "$apf" = active ] && [ "$ran" -ge 1 ]; then
		ok agent-chain "process-user-data $pud, kata-agent.path $path, kata-agent $agent (triggered by $by), agent-protocol-forwarder $apf"
	else
		fail agent-chain "process-user-data $pud, kata-agent.path $path, kata-agent $agent (triggered by '$by', ran $ran), agent-protocol-forwarder $apf"
		journalctl -b -u process-user-data.service -u kata-agent.path -u kata-agent.service -u agent-protocol-forwarder.service --no-pager 2>&1 | tail -20 | show
	fi

	# The tree's links landed as links: the agent policy's absolute link
	# into /run resolves once tmpfiles made its target at boot, and the
	# wants link to a unit the image may lack is a link, not a copy.
	policy=/etc/kata-opa/default-policy.rego
	mountlink='/etc/systemd/system/multi-user.target.wants/run-kata\x2dcontainers.mount'
	if [ "$(readlink "$policy")" = /run/peerpod/policy.rego ] && [ -s "$policy" ] && [ -L "$mountlink" ]; then
		ok agent-links "$policy -> $(readlink "$policy") (made at boot); $mountlink -> $(readlink "$mountlink")"
	else
		fail agent-links "$policy -> '$(readlink "$policy")' (exists: $([ -e "$policy" ] && echo yes || echo no)); $mountlink: $(ls -l "$mountlink" 2>&1)"
	fi

	after=" $(prop After kata-agent.service) "
	kstart=$(prop InactiveExitTimestampMonotonic kata-agent.service)
	ordered="" bad=""
	for u in $GPU_UNITS; do
		case " $(prop Before "$u") " in *" kata-agent.service "*) ;; *) continue ;; esac
		began=$(prop InactiveExitTimestampMonotonic "$u")
		ended=$(prop InactiveEnterTimestampMonotonic "$u")
		if [ "${began:-0}" -gt 0 ] && [ "${ended:-0}" -le "${kstart:-0}" ]; then
			ordered="$ordered $u"
		else
			bad="$bad $u(began=$began ended=$ended)"
		fi
	done
	case "$after" in *" nvidia-cdi-generate.service "*) cdi=yes ;; *) cdi=no ;; esac
	if [ -z "$bad" ] && [ "$cdi" = yes ] && [ -n "$ordered" ] && [ "${kstart:-0}" -gt 0 ]; then
		ok agent-order "done before kata-agent.service started:$ordered"
	else
		fail agent-order "kata-agent.service started at $kstart, After has nvidia-cdi-generate.service: $cdi; not done before it:$bad"
	fi
fi

# 8. The baked repository works under the kernel that runs, for a consumer
#    that has only the GPU Operator ConfigMap's sources entry and an empty
#    dpkg status, as a driver container has.
c=$(mktemp -d)
mkdir -p "$c/prefs" "$c/sources.list.d" "$c/state/lists/partial" "$c/cache/archives/partial" "$c/unpacked" "$c/download"
cp "$creds/podvm.sources" "$c/sources.list.d/local-packages.sources"
: >"$c/status"
apt() {
	apt-get -q -o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$c/sources.list.d" \
		-o Dir::Etc::Preferences=/dev/null -o Dir::Etc::PreferencesParts="$c/prefs" \
		-o Dir::State="$c/state" -o Dir::State::status="$c/status" -o Dir::Cache="$c/cache" \
		-o APT::Sandbox::User=root -o Debug::NoLocking=1 "$@"
}
if upd=$(apt update 2>&1) && ! echo "$upd" | grep -qE '^(W|E|N):'; then
	ok repo-update "$(echo "$upd" | grep -c '^Get:') index files"
else
	fail repo-update "$(echo "$upd" | tail -3 | tr '\n' ';')"
fi
headers="$HEADERS_PREFIX$kver"
# apt reads file: repositories in place and copies nothing into its cache,
# so the closure is resolved from the empty status, then downloaded.
if closure=$(apt install -s -y --no-install-recommends "$headers" 2>&1 | awk '/^Inst /{print $2}') && [ -n "$closure" ] &&
	(cd "$c/download" && apt download $closure >/dev/null 2>&1); then
	n=$(echo "$closure" | wc -l)
	got=$(ls "$c"/download/*.deb | wc -l)
	for d in "$c"/download/linux-headers-*.deb "$c"/download/linux-kbuild-*.deb; do
		[ -e "$d" ] && dpkg-deb -x "$d" "$c/unpacked"
	done
	if [ "$got" -eq "$n" ] && { [ -e "$c/unpacked/usr/src/linux-headers-$kver/Makefile" ] || [ -e "$c/unpacked/usr/lib/modules/$kver/build" ]; }; then
		ok repo-headers "$headers: $n packages of its closure downloaded, headers unpacked"
	else
		fail repo-headers "closure of $n packages, $got downloaded, no headers for $kver unpacked"
	fi
else
	fail repo-headers "$(echo "$closure" | tail -3 | tr '\n' ';')"
fi
rm -f "$c"/download/*.deb
if (cd "$c/download" && apt download "linux-image-$kver" >/dev/null 2>&1) && ls "$c"/download/linux-image-*.deb >/dev/null 2>&1; then
	ok repo-image "linux-image-$kver downloaded"
else
	fail repo-image "apt-get download linux-image-$kver failed"
fi
rm -rf "$c"

# 9. With VERITY=1: the root is a dm-verity device (libcryptsetup names
#    its devices CRYPT-VERITY-...), mounted read-only, and nothing writes it.
if [ "$VERITY" = 1 ]; then
	src=$(findmnt -n -o SOURCE /)
	# /dev/mapper/root may be a node, not a link: the device by number.
	dev=/sys/dev/block/$(mountpoint -d /)
	uuid=$(cat "$dev/dm/uuid" 2>/dev/null)
	opts=$(findmnt -n -o OPTIONS /)
	case "$uuid" in
	CRYPT-VERITY-*)
		if echo ",$opts," | grep -q ',ro,' && [ "$(cat "$dev/ro")" = 1 ] && ! touch /.podvm-write-test 2>/dev/null; then
			ok verity "/ is $src ($uuid), mounted $opts"
		else
			fail verity "/ is $src, mounted '$opts', device ro=$(cat "$dev/ro")"
		fi
		;;
	*)
		fail verity "/ is $src, not a dm-verity device (dm uuid '$uuid')"
		ls -l "$dev/" /dev/mapper 2>&1 | show
		;;
	esac
fi

finished=1
echo "PODVM-CHECK-END failures=$failures"
