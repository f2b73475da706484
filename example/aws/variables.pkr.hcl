variable "region" {
  type        = string
  default     = "us-east-1"
  description = "AWS region to build in; the AMI is registered there."
}

variable "instance_type" {
  type        = string
  default     = "m6i.large"
  description = "Instance type of the build machine. It needs no GPU: the driver is built with DKMS for the image kernel."
}

variable "ubuntu_release" {
  type        = string
  default     = "22.04"
  description = "Ubuntu release of the image: 22.04 or 24.04."

  validation {
    condition     = contains(["22.04", "24.04"], var.ubuntu_release)
    error_message = "The ubuntu_release must be 22.04 or 24.04."
  }
}

variable "arch" {
  type        = string
  default     = "amd64"
  description = "Image architecture: amd64 or arm64 (pick an instance_type of the same architecture)."

  validation {
    condition     = contains(["amd64", "arm64"], var.arch)
    error_message = "The arch must be amd64 or arm64."
  }
}

variable "source_ami_name" {
  type        = string
  default     = ""
  description = "AMI name filter of the source image; empty picks Canonical's server image for ubuntu_release and arch."
}

variable "source_ami_owners" {
  type        = list(string)
  default     = ["099720109477"]
  description = "Owners of the source AMI; the default is Canonical's account."
}

variable "volume_size" {
  type        = number
  default     = 30
  description = "Root volume size in GiB; the driver build and the baked repository need room."
}

variable "subnet_id" {
  type        = string
  default     = ""
  description = "Subnet of the build machine; empty uses the default VPC."
}

variable "vpc_id" {
  type        = string
  default     = ""
  description = "VPC of the build machine; empty uses the default VPC."
}

variable "image_name_prefix" {
  type        = string
  default     = "podvm-gpu"
  description = "AMI name prefix; the release and a timestamp are appended."
}

variable "artifacts_directory" {
  type        = string
  default     = "output-podvm-artifacts"
  description = "Directory on this machine for local-packages.sources, the GPU Operator ConfigMap and Helm values, gpu-operator-nvidiadriver.yaml (only with a driver repository and version), keyring.asc, manifest.json, sbom.cdx.json, their signatures (.asc) and module-signing.{der,pem} (when the NVIDIA modules are signed)."
}

variable "podvm_binaries" {
  type        = string
  default     = env("PODVM_BINARIES")
  description = "A pod VM binaries tree on this machine: a directory laid out as the image's root, as cloud-api-adaptor's `make podvm-binaries` exports to resources/binaries-tree (docs/pod-vm.md). Empty, the default, builds a GPU base image, not a pod VM."
}
