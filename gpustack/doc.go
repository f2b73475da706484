// Package gpustack is the option model and the Plan: one settings table from
// which HCL, environment and flag bindings derive, the validated Options, the
// facts of the target image, and the ordered, declarative steps that turn a
// plain Debian or Ubuntu image into a GPU-ready pod VM image. All distro
// knowledge lives here, one file per family; the back ends (the Packer
// provisioner and the mkosi generator) execute or render a Plan.
package gpustack
