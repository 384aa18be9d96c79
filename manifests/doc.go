// Package manifests holds the Helm chart (chart/), the single source of every
// manifest, and its default rendering (install.yaml, `make manifests`). The
// tests here lint and render the chart with helm built from Go modules and
// check the rendering against the admission policy of DESIGN.md §4.
package manifests
