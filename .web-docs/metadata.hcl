# The plugin's entry in HashiCorp's integrations registry. README.md and
# components/ beside this file are generated from docs/ (make web-docs);
# this file is written by hand.
integration {
  name        = "podvm"
  description = "GPU-ready pod VM images: the NVIDIA driver built for the image kernel, the container toolkit with the kata guest hook, and a signed node-local apt repository for the GPU Operator."
  identifier  = "packer/podvm-gpu/podvm"
  docs {
    process_docs    = true
    readme_location = "./README.md"
    external_url    = "https://github.com/podvm-gpu/packer-plugin-podvm"
  }
  component {
    type = "builder"
    name = "podvm-rootfs"
    slug = "rootfs"
  }
  component {
    type = "provisioner"
    name = "podvm-gpu"
    slug = "gpu"
  }
  component {
    type = "post-processor"
    name = "podvm-record"
    slug = "record"
  }
}
