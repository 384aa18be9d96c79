//go:build tools

// Package tools pins cert-manager's controller and cainjector, built by
// `make testbin-certmanager` for the optional real-cert-manager e2e test
// (v1.11.5 is the newest release whose commands are packages of the main
// module; later ones live in unpublished modules, see docs/cert-manager.md).
package tools

import (
	_ "github.com/cert-manager/cert-manager/cmd/cainjector"
	_ "github.com/cert-manager/cert-manager/cmd/controller"
)
