#!/bin/sh
# Generates the NVIDIA CDI spec that kata-agent injects GPUs from, and
# refuses one that CUDA cannot use. Installed by podvm-gpu and run by
# nvidia-cdi-generate.service, only where an NVIDIA GPU is present.
#
# Usage: nvidia-cdi-generate SPEC MODULE...
#
# MODULE... are the driver's modules in the order kata's NVRC loads them:
# the core module, UVM, then modeset where the driver has it. nvidia-ctk
# lists /dev/nvidia-uvm, /dev/nvidia-uvm-tools, /dev/nvidiactl and
# /dev/nvidia-modeset only if they exist when it runs, so the modules and
# the control device nodes come first. Without /dev/nvidia-uvm in the spec
# nvidia-smi works in a container and CUDA finds no device.
set -eu

prog=nvidia-cdi-generate

# Under systemd, "<3>" makes journald record the line at error priority, so
# the failure shows in `journalctl -p err` and not only in the unit's log.
fail() {
	printf '%s%s: %s\n' "${JOURNAL_STREAM:+<3>}" "$prog" "$*" >&2
	exit 1
}

[ $# -ge 2 ] || fail "usage: $prog SPEC MODULE..."
spec=$1
shift

for m; do
	modprobe "$m" || fail "cannot load kernel module $m"
done
nvidia-ctk system create-device-nodes --control-devices || fail "cannot create the NVIDIA control device nodes"
mkdir -p "$(dirname "$spec")"
nvidia-ctk cdi generate --output="$spec" || fail "nvidia-ctk cdi generate failed"

# names PATTERN: the spec has a device node whose path matches the
# extended regular expression PATTERN, as nvidia-ctk writes it
# ("- path: /dev/nvidia0", quoted or not).
names() {
	grep -Eq "^[[:space:]]*(-[[:space:]]+)?path:[[:space:]]*[\"']?$1[\"']?[[:space:]]*\$" "$spec"
}
missing=
names '/dev/nvidia[0-9]+' || missing="$missing, a GPU device node (/dev/nvidiaN)"
names /dev/nvidiactl || missing="$missing, /dev/nvidiactl"
names /dev/nvidia-uvm || missing="$missing, /dev/nvidia-uvm"
if [ -n "$missing" ]; then
	# CDI readers load only *.json and *.yaml: renamed, the spec is kept for
	# whoever debugs this, and a GPU pod fails to start instead of running
	# without CUDA.
	mv -f "$spec" "$spec.rejected" || rm -f "$spec"
	fail "the CDI spec lacks ${missing#, }; CUDA would not work in containers. Moved it to $spec.rejected; modules loaded: $*"
fi
gpus=$(grep -Eo '/dev/nvidia[0-9]+' "$spec" | sort -u | tr '\n' ' ')
echo "$prog: $spec names $gpus/dev/nvidiactl and /dev/nvidia-uvm (modules loaded: $*)"
