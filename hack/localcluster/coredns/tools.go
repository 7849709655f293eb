//go:build tools

// Package tools pins the CoreDNS command the local cluster runs.
package tools

import _ "github.com/coredns/coredns"
