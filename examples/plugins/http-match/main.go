// Command http-match is an example probed plugin serving the probe kind
// "http-match": an HTTP GET whose answer must match a status code or
// range, a header, a body regular expression and/or a JSON field — checks
// the kubelet's httpGet probe does not offer (kubernetes#55405).
//
// Build it, put the binary in probed's plugin directory (or list it in the
// plugin configuration) and declare probes in the probed.io/probes
// annotation:
//
//	go build -o /usr/lib/probed/plugins/http-match ./examples/plugins/http-match
//
//	probed.io/probes: |
//	  [{"container": "app", "type": "readiness", "periodSeconds": 5,
//	    "plugin": {"name": "http-match", "port": 8080,
//	               "params": {"path": "/ready", "status": "200-299", "body": "ok"}}}]
//
// Parameters (all optional): see Params.
package main

import (
	"github.com/probed/probed/plugins/sdk"
)

// version is set with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	sdk.Serve(sdk.Plugin{
		Name:    "http-match",
		Version: version,
		// Every connection goes through sdk.Dialer, and the outputs
		// withhold what the target sent under the agent's egress policy
		// (runtime/egress; cluster mode).
		EnforcesEgress: true,
		Kinds: []sdk.Kind{{
			Name:        Kind,
			Description: "HTTP GET whose status, header, body or JSON field must match",
			Params:      Params,
			Handler:     Handler{},
		}},
	})
}
