# A GPU-ready pod VM image on AWS: Ubuntu 22.04 or 24.04 from Canonical's
# AMIs, the NVIDIA driver built for the image's own kernel, the container
# toolkit with the kata guest prestart hook, and the signed node-local apt
# repository in /opt/local-packages.
#
#   make image PROVIDER=aws                       (from the repository root)
#   make image PROVIDER=aws ENABLE_NVIDIA_GPU=no  the same image without NVIDIA
#   packer build -var ubuntu_release=24.04 .      (from this directory)
#
# The GPU settings are deliberately not written below: the provisioner
# reads every setting it is not given in HCL from the environment of the
# packer process (ENABLE_NVIDIA_GPU, NVIDIA_DRIVER_VERSION, ...; run
# `packer-plugin-podvm options` for the list). Writing one here would
# override the environment. Only output_dir is set, from a variable, so the
# host-side artifacts land beside this template's other outputs.
#
# AWS credentials come from the usual places (AWS_PROFILE, AWS_ACCESS_KEY_ID,
# instance role, ...). The build machine needs no GPU.

packer {
  required_plugins {
    amazon = {
      source  = "github.com/hashicorp/amazon"
      version = ">= 1.8.2"
    }
    podvm = {
      source  = "github.com/podvm-gpu/podvm"
      version = ">= 0.1.0"
    }
  }
}

locals {
  # Canonical's AMI names per release.
  ubuntu_ami_names = {
    "22.04" = "ubuntu/images/hvm-ssd/ubuntu-jammy-22.04-${var.arch}-server-*"
    "24.04" = "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-${var.arch}-server-*"
  }
  source_ami_name = var.source_ami_name != "" ? var.source_ami_name : local.ubuntu_ami_names[var.ubuntu_release]
  timestamp       = formatdate("YYYYMMDDhhmmss", timestamp())
  image_name      = "${var.image_name_prefix}-ubuntu-${var.ubuntu_release}-${local.timestamp}"
}

source "amazon-ebs" "ubuntu" {
  region        = var.region
  instance_type = var.instance_type
  ami_name      = local.image_name
  ssh_username  = "ubuntu"

  source_ami_filter {
    filters = {
      name                = local.source_ami_name
      architecture        = var.arch == "arm64" ? "arm64" : "x86_64"
      root-device-type    = "ebs"
      virtualization-type = "hvm"
    }
    owners      = var.source_ami_owners
    most_recent = true
  }

  launch_block_device_mappings {
    device_name           = "/dev/sda1"
    volume_size           = var.volume_size
    volume_type           = "gp3"
    delete_on_termination = true
  }

  subnet_id = var.subnet_id != "" ? var.subnet_id : null
  vpc_id    = var.vpc_id != "" ? var.vpc_id : null

  tags = {
    Name           = local.image_name
    ubuntu_release = var.ubuntu_release
    built_by       = "packer-plugin-podvm"
  }
}

build {
  sources = ["source.amazon-ebs.ubuntu"]

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
}
