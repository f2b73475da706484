# A GPU-ready pod VM root filesystem built locally: Debian trixie with a
# kernel, the NVIDIA driver built for that kernel, the container toolkit with
# the kata guest prestart hook, and the signed node-local apt repository.
#
#   sudo make image                          (from the repository root)
#   sudo make image ENABLE_NVIDIA_GPU=no     the same image without NVIDIA
#   sudo make image PODVM_BINARIES=DIR       a pod VM: the agent stack from DIR
#                                            and the GPU layer (docs/pod-vm.md)
#
# Without PODVM_BINARIES (or -var podvm_binaries=DIR) it is a GPU base image,
# not a pod VM: no kata-agent, agent-protocol-forwarder or process-user-data.
#
# It leaves the tree in output-podvm, a bootable disk output-podvm.qcow2
# and the host artefacts in output-podvm-artifacts: local-packages.sources,
# the GPU Operator ConfigMap and Helm values, gpu-operator-nvidiadriver.yaml
# (only with GPU_OPERATOR_DRIVER_REPOSITORY and GPU_OPERATOR_DRIVER_VERSION),
# keyring.asc, manifest.json, sbom.cdx.json, their signatures (.asc), and
# module-signing.der and .pem (the
# certificate the NVIDIA modules are signed with, when they are).
#
# Every podvm-gpu setting not written below comes from the environment
# (ENABLE_NVIDIA_GPU, NVIDIA_DRIVER_VERSION, ...): `packer-plugin-podvm
# options` lists them.

packer {
  required_plugins {
    podvm = {
      source  = "github.com/podvm-gpu/podvm"
      version = ">= 0.1.0"
    }
  }
}

variable "suite" {
  type        = string
  default     = "trixie"
  description = "Debian suite to bootstrap."
}

variable "mirror" {
  type        = string
  default     = ""
  description = "Debian mirror; empty takes the host's apt configuration."
}

variable "output_directory" {
  type    = string
  default = "output-podvm"
}

variable "artifacts_directory" {
  type        = string
  default     = "output-podvm-artifacts"
  description = "Where the sources file, GPU Operator ConfigMap and Helm values, gpu-operator-nvidiadriver.yaml (only with a driver repository and version), keyring.asc, manifest.json, sbom.cdx.json, their signatures (.asc) and module-signing.{der,pem} (when the NVIDIA modules are signed) go."
}

variable "output_tarball" {
  type    = string
  default = ""
}

variable "format" {
  type        = string
  default     = "qcow2"
  description = "qcow2, raw or vhd: a bootable disk of the tree; directory or tar: the tree only."
}

variable "output_image" {
  type        = string
  default     = ""
  description = "The disk image; empty for <output_directory>.<format>."
}

variable "disk_size" {
  type        = string
  default     = ""
  description = "The disk's virtual size with a disk format: empty or auto (the tree plus a quarter and 1 GiB), or a size such as 8G or 3072M. Leave it empty with directory or tar."
}

variable "podvm_binaries" {
  type        = string
  default     = env("PODVM_BINARIES")
  description = "A pod VM binaries tree on this machine: a directory laid out as the image's root, as cloud-api-adaptor's `make podvm-binaries` exports to resources/binaries-tree (docs/pod-vm.md). Empty, the default, builds a GPU base image, not a pod VM."
}

variable "root_password" {
  type        = string
  default     = ""
  sensitive   = true
  description = "A root password, to log in on a test machine's console (docs/booting.md). Empty (the default) leaves root locked, as Debian's base system has it. The image keeps the password's hash: set it only for images you do not share."
}

source "podvm-rootfs" "debian" {
  suite      = var.suite
  mirror     = var.mirror
  variant    = "minbase"
  components = ["main"]
  # No kernel here: debootstrap only sees the release's main suite, so it
  # would install the release's kernel and the upgrade a second, newer one.
  # The kernel comes after the upgrade, from the update and security suites
  # the builder's apt_sources adds (on by default, as is upgrade).
  include          = ["ca-certificates", "systemd-sysv", "kmod"]
  output_directory = var.output_directory
  output_tarball   = var.output_tarball
  # A disk that boots under UEFI with a serial console, as QEMU, libvirt
  # and cloud-api-adaptor's libvirt provider take it (docs/booting.md).
  format       = var.format
  output_image = var.output_image
  disk_size    = var.disk_size
}

build {
  sources = ["source.podvm-rootfs.debian"]

  # The image's own kernel, exactly one and current: the driver is built for
  # it, not for the host's. systemd-boot-efi gives the disk the image's own
  # boot loader; systemd-repart grows its root to the disk it boots from.
  # The kernel's initramfs is generated once, by the last provisioner, after
  # everything that changes what goes into it (the GPU layer's modules and
  # hooks): INITRD=No skips the kernel package's own, and initramfs-tools
  # goes first, so that its trigger finds no kernel.
  provisioner "shell" {
    environment_vars = ["DEBIAN_FRONTEND=noninteractive"]
    inline = [
      "apt-get install -y --no-install-recommends initramfs-tools",
      "INITRD=No apt-get install -y --no-install-recommends linux-image-amd64 systemd-boot-efi systemd-repart",
    ]
  }

  # Only with -var root_password=...: a root password for logging in on a
  # test machine. Empty, the default, changes nothing.
  provisioner "shell" {
    environment_vars = ["ROOT_PASSWORD=${var.root_password}"]
    inline = [
      "if [ -n \"$ROOT_PASSWORD\" ]; then printf 'root:%s\\n' \"$ROOT_PASSWORD\" | chpasswd; fi",
    ]
  }

  # With podvm_binaries, podvm-gpu carries the pod VM's agent stack onto
  # the image's root first (one archive, links kept as links), enables its
  # units by its *.wants links, and orders the GPU units before
  # kata-agent.service.
  provisioner "podvm-gpu" {
    output_dir     = var.artifacts_directory
    podvm_binaries = var.podvm_binaries == "" ? "" : abspath(var.podvm_binaries)
  }

  # The initramfs of every kernel that has none yet: all of them here (see
  # the kernel's provisioner). podvm-gpu updates only existing ones.
  provisioner "shell" {
    inline = [
      "for k in $(linux-version list); do [ -e \"/boot/initrd.img-$k\" ] || update-initramfs -c -k \"$k\"; done",
    ]
  }

  # The disk's SHA-256 beside the manifest (disk.json), once the disk exists.
  post-processor "podvm-record" {
    artifacts_directory = var.artifacts_directory
  }
}
