#!/bin/sh
# OCI prestart hook run by kata-agent in the guest: lets the NVIDIA
# container toolkit inject the GPU into the container. Installed by podvm-gpu.
set -eu
exec /usr/bin/nvidia-container-toolkit -debug "$@" >>/var/log/nvidia-hook.log 2>&1
