// Package examples holds the bundled example manifests. `probed run` with
// no --manifests runs them.
package examples

import "embed"

// Manifests is the manifests/ directory.
//
//go:embed manifests/*.yaml
var Manifests embed.FS
