//go:build tools

// Package tools pins the registry command the local cluster runs.
package tools

import _ "github.com/distribution/distribution/v3/cmd/registry"
