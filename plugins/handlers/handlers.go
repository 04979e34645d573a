// Package handlers is the set of built-in probe handlers (http, tcp, exec,
// grpc): the one place that knows how to construct each built-in kind
// (runtime.BuiltinKinds). The manager registers them on a runtime
// (manager.RegisterBuiltins) and plugins/builtin serves them out of process;
// both go through New.
package handlers

import (
	"fmt"
	"strings"

	"github.com/probed/probed/plugins/exec"
	"github.com/probed/probed/plugins/grpc"
	"github.com/probed/probed/plugins/http"
	"github.com/probed/probed/plugins/tcp"
	"github.com/probed/probed/runtime"
)

// New returns a new handler of a built-in kind. Exec commands go to runner
// (nil: exec.LocalRunner, run on this host) and httpOpts configure the
// http handler (e.g. http.KeepAlive, the node's default for kept
// connections); the other kinds ignore them. It fails for a kind not in
// runtime.BuiltinKinds, naming the valid ones.
func New(kind string, runner exec.Runner, httpOpts ...http.Option) (runtime.Handler, error) {
	switch kind {
	case runtime.KindHTTP:
		return http.New(httpOpts...), nil
	case runtime.KindTCP:
		return tcp.New(), nil
	case runtime.KindExec:
		if runner == nil {
			runner = &exec.LocalRunner{}
		}
		return exec.New(runner), nil
	case runtime.KindGRPC:
		return grpc.New(), nil
	}
	return nil, fmt.Errorf("%q is not a built-in probe kind (want one of %s)", kind, strings.Join(runtime.BuiltinKinds(), ", "))
}

// Register registers a handler of every built-in kind on rt; exec commands
// go to runner (nil: run on this host), httpOpts to the http handler (New).
// It returns the first registration error (a kind already registered).
func Register(rt *runtime.Runtime, runner exec.Runner, httpOpts ...http.Option) error {
	for _, kind := range runtime.BuiltinKinds() {
		h, err := New(kind, runner, httpOpts...)
		if err != nil {
			return err
		}
		if err := rt.Register(kind, h); err != nil {
			return err
		}
	}
	return nil
}
