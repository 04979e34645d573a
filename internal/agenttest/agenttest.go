// Package agenttest runs a real agent (agent.New's, on a real loopback
// listener) in the test's process until the test ends: the one copy of
// starting Run, stopping it and checking that it returned nil, which the
// agent's tests and the end-to-end tests of its parts share.
package agenttest

import (
	"context"
	"testing"
	"time"

	"github.com/probed/probed/agent"
)

// StopBound is how long Stop waits for Run to return after its context
// ends: the graceful shutdown lets in-flight probes finish within their
// timeouts.
const StopBound = 20 * time.Second

// Run is an agent running in the test's process.
type Run struct {
	// Agent is the running agent.
	Agent *agent.Agent
	// Base is the API's base URL, "http://127.0.0.1:PORT".
	Base string

	t      testing.TB
	cancel context.CancelFunc
	done   chan error
}

// Start builds an agent with opts (agent.New; a failure ends the test)
// and runs it until Stop or the test's end.
func Start(t testing.TB, opts agent.Options) *Run {
	t.Helper()
	a, err := agent.New(opts)
	if err != nil {
		t.Fatalf("agent.New: %v", err)
	}
	return Of(t, a)
}

// Of runs a built agent until Stop or the test's end.
func Of(t testing.TB, a *agent.Agent) *Run {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &Run{Agent: a, Base: "http://" + a.Addr().String(), t: t, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- a.Run(ctx) }()
	t.Cleanup(func() {
		if r.cancel != nil {
			r.Stop()
		}
	})
	return r
}

// Stop ends Run's context and checks that Run returns nil within
// StopBound; after the first call it does nothing.
func (r *Run) Stop() {
	r.t.Helper()
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	select {
	case err := <-r.done:
		if err != nil {
			r.t.Errorf("agent Run returned %v", err)
		}
	case <-time.After(StopBound):
		r.t.Fatalf("agent Run did not return within %v of its context's end", StopBound)
	}
}
