//go:build tools

// Package tools pins the BuildKit commands the local cluster builds.
package tools

import (
	_ "github.com/moby/buildkit/cmd/buildctl"
	_ "github.com/moby/buildkit/cmd/buildkitd"
)
