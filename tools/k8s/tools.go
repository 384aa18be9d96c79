//go:build tools

// Package tools pins the Kubernetes control-plane commands the e2e suite runs:
// kube-apiserver, kube-controller-manager and kubectl, all built from k8s.io/kubernetes.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
