package manager

import (
	"context"

	"github.com/probed/probed/plugins/exec"
	"github.com/probed/probed/plugins/grpc"
	"github.com/probed/probed/plugins/http"
	"github.com/probed/probed/plugins/tcp"
	"github.com/probed/probed/runtime"
)

// ExecRunner runs exec probes: the shape of the kubelet's CommandRunner.
//
// This file is the manager's one import of the built-in handler packages,
// so that New with no runtime gives the kubelet's four handlers (DESIGN).
type ExecRunner = exec.Runner

// RegisterBuiltins registers the built-in http, tcp, exec and grpc handlers
// on rt; exec commands go to runner (nil: run on this host).
func RegisterBuiltins(rt *runtime.Runtime, runner ExecRunner) error {
	if runner == nil {
		runner = &exec.LocalRunner{}
	}
	for kind, h := range map[string]runtime.Handler{
		runtime.KindHTTP: http.New(),
		runtime.KindTCP:  tcp.New(),
		runtime.KindExec: exec.New(runner),
		runtime.KindGRPC: grpc.New(),
	} {
		if err := rt.Register(kind, h); err != nil {
			return err
		}
	}
	return nil
}

// newDefaultRuntime builds the runtime New uses when none is given.
func newDefaultRuntime(opts Options) (*runtime.Runtime, error) {
	rt, err := runtime.New(runtime.Options{
		PoolSize:     opts.PoolSize,
		SlowPoolSize: opts.SlowPoolSize,
		ExecPoolSize: opts.ExecPoolSize,
		Recorder:     opts.Recorder,
		Logger:       opts.Logger,
	})
	if err != nil {
		return nil, err
	}
	if err := RegisterBuiltins(rt, opts.ExecRunner); err != nil {
		_ = rt.Close(context.Background())
		return nil, err
	}
	return rt, nil
}
