package manager

import (
	"context"

	"github.com/probed/probed/plugins/exec"
	"github.com/probed/probed/plugins/handlers"
	"github.com/probed/probed/runtime"
)

// ExecRunner runs exec probes: the shape of the kubelet's CommandRunner.
//
// This file is the manager's one import of the built-in handlers,
// so that New with no runtime gives the kubelet's four handlers (DESIGN).
type ExecRunner = exec.Runner

// RegisterBuiltins registers the built-in http, tcp, exec and grpc handlers
// on rt; exec commands go to runner (nil: run on this host). It is
// plugins/handlers.Register, the one constructor of the built-in kinds.
func RegisterBuiltins(rt *runtime.Runtime, runner ExecRunner) error {
	return handlers.Register(rt, runner)
}

// newDefaultRuntime builds the runtime New uses when none is given.
func newDefaultRuntime(opts Options) (*runtime.Runtime, error) {
	rt, err := runtime.New(runtime.Options{
		PoolSize:     opts.PoolSize,
		SlowPoolSize: opts.SlowPoolSize,
		ExecPoolSize: opts.ExecPoolSize,
		Logger:       opts.Logger,
		Clock:        opts.Clock,
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
