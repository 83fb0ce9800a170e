//go:build tools

// Package tools pins the API server's main packages for `go build`: kube-apiserver, and
// kube-controller-manager (the namespace controller finalizes deleted namespaces).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
)
