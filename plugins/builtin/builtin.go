// Package builtin serves the built-in probe handlers (http, tcp, exec,
// grpc; constructed by plugins/handlers) out of process over the plugin
// contract: `probed plugin serve http|tcp|exec|grpc` is Serve.
//
// Out of process, a built-in kind gives the same verdicts as in process:
// the host sends the container and the probe (pluginproto.SpecParam) and
// the plugin runs the very handler of plugins/http, plugins/tcp,
// plugins/exec (LocalRunner: the command runs on the plugin's host) or
// plugins/grpc on them.
package builtin

import (
	"fmt"
	"sort"
	"strings"

	"github.com/probed/probed/plugins/handlers"
	"github.com/probed/probed/plugins/sdk"
	"github.com/probed/probed/runtime"
)

var descriptions = map[string]string{
	runtime.KindHTTP: "the kubelet's httpGet probe",
	runtime.KindTCP:  "the kubelet's tcpSocket probe",
	runtime.KindExec: "the kubelet's exec probe, run on the plugin's host",
	runtime.KindGRPC: "the kubelet's grpc probe",
}

// Kinds returns the built-in kinds, sorted: exec, grpc, http, tcp.
func Kinds() []string {
	out := runtime.BuiltinKinds()
	sort.Strings(out)
	return out
}

// Handler returns a new in-process handler of a built-in kind; exec
// commands run on this host (exec.LocalRunner). It fails for other kinds.
func Handler(kind string) (runtime.Handler, error) {
	return handlers.New(kind, nil)
}

// Plugin describes a plugin serving the given built-in kinds (at least
// one, no duplicates).
func Plugin(version string, kinds ...string) (sdk.Plugin, error) {
	if len(kinds) == 0 {
		return sdk.Plugin{}, fmt.Errorf("no kind given (want one or more of %s)", strings.Join(Kinds(), ", "))
	}
	// The built-in handlers dial through plugins/internal/dialer, which
	// checks the egress policy the SDK puts on ctx, and withhold what a
	// target sent from their texts under it.
	p := sdk.Plugin{Name: "probed-builtin-" + strings.Join(kinds, "-"), Version: version, EnforcesEgress: true}
	seen := map[string]bool{}
	for _, k := range kinds {
		if seen[k] {
			return sdk.Plugin{}, fmt.Errorf("kind %q given twice", k)
		}
		seen[k] = true
		h, err := Handler(k)
		if err != nil {
			return sdk.Plugin{}, err
		}
		p.Kinds = append(p.Kinds, sdk.Kind{Name: k, Description: descriptions[k], Handler: h})
	}
	return p, nil
}

// Serve serves the given built-in kinds as a plugin and does not return
// (see sdk.Serve), unless the kinds are invalid: then it returns the error
// before writing anything to stdout.
func Serve(version string, kinds ...string) error {
	p, err := Plugin(version, kinds...)
	if err != nil {
		return err
	}
	sdk.Serve(p)
	return nil
}
