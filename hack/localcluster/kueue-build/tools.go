//go:build tools

// Package tools pins the Kueue release the local cluster runs (see hack/localcluster/kueue.py).
package tools

import _ "sigs.k8s.io/kueue/cmd/kueue"
