// Package gpustack is the Plan: from the validated settings (package
// settings) and the facts of the target image, the ordered, declarative
// steps that turn a plain Debian or Ubuntu image into a GPU-ready pod VM
// image. The release and package knowledge of each distro family lives here,
// one file per family; the back ends (the Packer provisioner and the mkosi
// generator) run a Plan's steps through package imagestep.
package gpustack
