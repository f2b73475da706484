//go:build deps

// This file only pins modules that packages landing in parallel need, so
// that go.mod does not churn under concurrent work. Remove once all import them.
package main

import (
	_ "github.com/BurntSushi/toml"
	_ "github.com/ProtonMail/go-crypto/openpgp"
	_ "github.com/hashicorp/hcl/v2/hcldec"
	_ "github.com/hashicorp/packer-plugin-sdk/packer"
	_ "github.com/hashicorp/packer-plugin-sdk/template/config"
	_ "github.com/klauspost/compress/zstd"
	_ "github.com/spf13/pflag"
	_ "github.com/ulikunitz/xz"
	_ "github.com/zclconf/go-cty/cty"
	_ "gopkg.in/yaml.v3"
)
