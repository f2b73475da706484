variable "resource_group" {
  type        = string
  description = "Existing resource group that receives the managed image."
}

variable "location" {
  type        = string
  default     = "eastus"
  description = "Azure region to build in; the image is created there."
}

variable "vm_size" {
  type        = string
  default     = "Standard_D2s_v5"
  description = "Size of the build VM. It needs no GPU: the driver is built with DKMS for the image kernel."
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

variable "image_publisher" {
  type        = string
  default     = "Canonical"
  description = "Marketplace publisher of the source image."
}

variable "image_offer" {
  type        = string
  default     = ""
  description = "Marketplace offer of the source image; empty picks Canonical's server offer for ubuntu_release."
}

variable "image_sku" {
  type        = string
  default     = ""
  description = "Marketplace SKU of the source image; empty picks the generation 2 server SKU for ubuntu_release."
}

variable "image_version" {
  type        = string
  default     = "latest"
  description = "Version of the source image."
}

variable "os_disk_size_gb" {
  type        = number
  default     = 30
  description = "OS disk size in GiB; the driver build and the baked repository need room."
}

variable "image_name_prefix" {
  type        = string
  default     = "podvm-gpu"
  description = "Managed image name prefix; the release and a timestamp are appended."
}

variable "artifacts_directory" {
  type        = string
  default     = "output-podvm-artifacts"
  description = "Directory on this machine for local-packages.sources, the GPU Operator ConfigMap and Helm values, gpu-operator-nvidiadriver.yaml (only with a driver repository and version), keyring.asc, manifest.json, sbom.cdx.json, their signatures (.asc) and module-signing.{der,pem} (when the NVIDIA modules are signed)."
}

variable "use_azure_cli_auth" {
  type        = bool
  default     = false
  description = "Authenticate with the Azure CLI's login (az login)."
}

variable "subscription_id" {
  type        = string
  default     = env("ARM_SUBSCRIPTION_ID")
  description = "Subscription to build in (service principal or interactive authentication)."
}

variable "tenant_id" {
  type        = string
  default     = env("ARM_TENANT_ID")
  description = "Tenant of the service principal; looked up from the subscription when empty."
}

variable "client_id" {
  type        = string
  default     = env("ARM_CLIENT_ID")
  description = "Service principal application (client) id."
}

variable "client_secret" {
  type        = string
  default     = env("ARM_CLIENT_SECRET")
  sensitive   = true
  description = "Service principal secret."
}

variable "podvm_binaries" {
  type        = string
  default     = env("PODVM_BINARIES")
  description = "A pod VM binaries tree on this machine: a directory laid out as the image's root, as cloud-api-adaptor's `make podvm-binaries` exports to resources/binaries-tree (docs/pod-vm.md). Empty, the default, builds a GPU base image, not a pod VM."
}
