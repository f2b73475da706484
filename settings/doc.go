// Package settings is the option model: one table of settings from which
// the HCL block, the environment variables, the CLI flags, --help and the
// docs derive; Resolve turns them into validated Options with typed enums.
// It knows no plan and no back end: gpustack plans from Options.
package settings
