package gpustack

import (
	"fmt"

	"github.com/podvm-gpu/packer-plugin-podvm/settings"
)

// GPUOperator is what the objects written beside the image tell the
// NVIDIA GPU Operator of the nodes: where it runs and which driver
// container it pulls.
type GPUOperator struct {
	Namespace  string
	Repository string
	Image      string
	// Version is the driver container's driver version; "" for none, and
	// then no NVIDIADriver is written. So is Repository.
	Version string
}

// operatorOf is the operator part of the options.
func operatorOf(o settings.Options) GPUOperator {
	return GPUOperator{
		Namespace:  o.OperatorNamespace,
		Repository: o.OperatorDriverRepository,
		Image:      o.OperatorDriverImage,
		Version:    o.OperatorDriverVersion,
	}
}

// DriverContainerDistros are the distributions NVIDIA publishes GPU
// Operator driver containers for, by os-release ID. The operator takes the
// node's ID and VERSION_ID for the image tag, so a node of any other
// distribution pulls a tag that does not exist.
var DriverContainerDistros = []string{"ubuntu", "rhel"}

// TargetWarnings are the warnings that need the target as well as the
// options: a node image for a distribution with no driver container cannot
// get its driver from the operator. The provisioner shows them through the
// ui, plan on stderr.
func TargetWarnings(o settings.Options, t Target) []string {
	if !o.NodeProfile() {
		return nil
	}
	for _, d := range DriverContainerDistros {
		if t.Distro == d {
			return nil
		}
	}
	return []string{fmt.Sprintf("node image for %s %s (enable_nvidia_gpu=no, local_repo on): NVIDIA publishes no GPU Operator driver container for %s, so the operator's driver pod on these nodes pulls %s/%s:<version>-%s%s, which does not exist, and never starts. Driver containers exist for Ubuntu and RHEL only: build node images from Ubuntu (22.04 or 24.04).",
		t.Distro, t.Version, t.Distro, orDefault(o.OperatorDriverRepository, "<driver.repository>"), o.OperatorDriverImage, t.Distro, t.Version)}
}
