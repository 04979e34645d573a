// Command probed runs Kubernetes liveness, readiness and startup probes with
// the kubelet's semantics. See README.md and docs/operations.md.
package main

import (
	"os"
)

func main() {
	os.Exit(execute(os.Args[1:], os.Stdout, os.Stderr))
}
