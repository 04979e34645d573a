// Package verdicts hands the results managers' updates to the agent's
// consumers: the rooms downstream of the prober (the manifest status store,
// the readiness-gate condition writer, the liveness actuator). A results
// manager's Updates channel has one reader; the Fanout is that reader for
// all three and calls every consumer in turn, one update at a time, so
// simultaneous changes of several containers are never lost (BR-25) and
// every consumer sees them in the same order.
package verdicts

import (
	"context"

	"github.com/probed/probed/manager/results"
	"github.com/probed/probed/runtime"
)

// Consumer takes probe result changes. ProbeResult is called from the
// Fanout's goroutine and must not block: a consumer that has slow work to
// do (an API call) queues it.
type Consumer interface {
	ProbeResult(t runtime.ProbeType, u results.Update)
}

// ConsumerFunc adapts a function to Consumer.
type ConsumerFunc func(t runtime.ProbeType, u results.Update)

// ProbeResult calls f.
func (f ConsumerFunc) ProbeResult(t runtime.ProbeType, u results.Update) { f(t, u) }

// Fanout reads the three results managers and calls its consumers.
type Fanout struct {
	liveness, readiness, startup results.Manager
	consumers                    []Consumer
}

// New returns a Fanout over the results managers of the three probe types.
func New(liveness, readiness, startup results.Manager, consumers ...Consumer) *Fanout {
	return &Fanout{liveness: liveness, readiness: readiness, startup: startup, consumers: consumers}
}

// Run delivers updates until ctx is done. Stop it only after the manager
// has drained, so that the last runs' results are applied (R4).
func (f *Fanout) Run(ctx context.Context) {
	for {
		var u results.Update
		var t runtime.ProbeType
		select {
		case <-ctx.Done():
			return
		case u = <-f.liveness.Updates():
			t = runtime.Liveness
		case u = <-f.readiness.Updates():
			t = runtime.Readiness
		case u = <-f.startup.Updates():
			t = runtime.Startup
		}
		for _, c := range f.consumers {
			c.ProbeResult(t, u)
		}
	}
}
