# A GPU-ready pod VM image on Azure: Ubuntu 22.04 or 24.04 from Canonical's
# marketplace images, the NVIDIA driver built for the image's own kernel, the
# container toolkit with the kata guest prestart hook, and the signed
# node-local apt repository in /opt/local-packages. The result is a managed
# image in managed_image_resource_group_name.
#
#   make image PROVIDER=azure                       (from the repository root)
#   make image PROVIDER=azure ENABLE_NVIDIA_GPU=no  the same image without NVIDIA
#   packer build -var resource_group=my-rg -var ubuntu_release=24.04 .
#
# The GPU settings are deliberately not written below: the provisioner
# reads every setting it is not given in HCL from the environment of the
# packer process (ENABLE_NVIDIA_GPU, NVIDIA_DRIVER_VERSION, ...; run
# `packer-plugin-podvm options` for the list). Writing one here would
# override the environment. Only output_dir is set, from a variable, so the
# host-side artifacts land beside this template's other outputs.
#
# Authentication: set use_azure_cli_auth = true after `az login`, or
# subscription_id, client_id and client_secret for a service principal (the
# ARM_* variables below); with none of them set the builder uses the managed
# identity of the machine it runs on. The build machine needs no GPU.

packer {
  required_plugins {
    azure = {
      source  = "github.com/hashicorp/azure"
      version = ">= 1.4.5"
    }
    podvm = {
      source  = "github.com/podvm-gpu/podvm"
      version = ">= 0.1.0"
    }
  }
}

locals {
  # Canonical's marketplace images per release (generation 2 VMs).
  ubuntu_images = {
    "22.04" = { offer = "0001-com-ubuntu-server-jammy", sku = "22_04-lts-gen2" }
    "24.04" = { offer = "ubuntu-24_04-lts", sku = "server" }
  }
  image_offer = var.image_offer != "" ? var.image_offer : local.ubuntu_images[var.ubuntu_release].offer
  image_sku   = var.image_sku != "" ? var.image_sku : local.ubuntu_images[var.ubuntu_release].sku
  timestamp   = formatdate("YYYYMMDDhhmmss", timestamp())
  image_name  = "${var.image_name_prefix}-ubuntu-${replace(var.ubuntu_release, ".", "")}-${local.timestamp}"
}

source "azure-arm" "ubuntu" {
  use_azure_cli_auth = var.use_azure_cli_auth
  subscription_id    = var.subscription_id != "" ? var.subscription_id : null
  tenant_id          = var.tenant_id != "" ? var.tenant_id : null
  client_id          = var.client_id != "" ? var.client_id : null
  client_secret      = var.client_secret != "" ? var.client_secret : null

  location = var.location
  vm_size  = var.vm_size

  os_type         = "Linux"
  image_publisher = var.image_publisher
  image_offer     = local.image_offer
  image_sku       = local.image_sku
  image_version   = var.image_version
  os_disk_size_gb = var.os_disk_size_gb

  managed_image_name                = local.image_name
  managed_image_resource_group_name = var.resource_group

  azure_tags = {
    ubuntu_release = var.ubuntu_release
    built_by       = "packer-plugin-podvm"
  }
}

build {
  sources = ["source.azure-arm.ubuntu"]

  # cloud-init runs apt on first boot; wait for it so the two do not race
  # for the dpkg lock. sh runs the script: /tmp may be mounted noexec.
  provisioner "shell" {
    execute_command = "{{ .Vars }} sh '{{ .Path }}'"
    inline          = ["cloud-init status --wait >/dev/null || true"]
  }

  # With podvm_binaries, podvm-gpu carries the pod VM's agent stack onto
  # the image's root first: one archive streamed over SSH and unpacked by
  # root, links kept as links (a file upload would follow them on this
  # machine), the image's own directories keeping their modes
  # (docs/pod-vm.md).
  provisioner "podvm-gpu" {
    # The SSH user is not root: run every command through sudo.
    # {{.Command}} is already quoted as one shell word: do not quote it again.
    execute_command = "sudo -n sh -c {{.Command}}"
    output_dir      = var.artifacts_directory
    podvm_binaries  = var.podvm_binaries == "" ? "" : abspath(var.podvm_binaries)
  }

  # Generalize the VM so Azure can create new VMs from the image.
  provisioner "shell" {
    execute_command = "chmod +x {{ .Path }}; {{ .Vars }} sudo -E sh '{{ .Path }}'"
    inline          = ["/usr/sbin/waagent -force -deprovision+user && export HISTSIZE=0 && sync"]
    skip_clean      = true
  }
}
