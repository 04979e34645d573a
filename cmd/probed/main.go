// Command probed runs Kubernetes liveness, readiness and startup probes with
// the kubelet's semantics. See README.md and docs/operations.md.
package main

import (
	"io"
	"log"
	"os"
)

func main() {
	// net/http reports some protocol errors through the standard log
	// package with the peer's bytes in the message ("Unsolicited response
	// received on idle HTTP channel starting with ..."): a probe target's
	// response must never reach the logs (BR-22), so that output is dropped.
	// probed's own logs go through log/slog.
	log.SetOutput(io.Discard)
	os.Exit(execute(os.Args[1:], os.Stdout, os.Stderr))
}
