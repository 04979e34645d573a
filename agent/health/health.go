// Package health decides the agent's /healthz: healthy while the pod source
// has delivered its first complete list (in cluster mode: the informer has
// synced) and the scheduler keeps up — its wheel advances with the clock and
// due work keeps being dispatched. Unhealthy otherwise, with the reason.
// The kubelet probing probed itself (the DaemonSet's liveness probe) then
// restarts a probed that has stopped probing.
package health

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/probed/probed/manager"
)

// StallAfter is how far the wheel may fall behind the clock, and how long
// due work may wait without any run being dispatched, before the agent is
// unhealthy. Both are far beyond any lag under load (docs/benchmarks.md:
// p99 in milliseconds at 100k probes/s).
const StallAfter = 30 * time.Second

// Checker computes the health. It is safe for concurrent use.
type Checker struct {
	synced func() bool
	stats  func() (manager.Stats, bool)

	mu             sync.Mutex
	lastDispatched uint64
	progressAt     time.Time // manager time when dispatching last progressed (or the backlog was empty)
}

// New returns a Checker over the source's HasSynced and the manager's
// figures (manager.StatsOf).
func New(synced func() bool, mgr manager.Manager) *Checker {
	return &Checker{synced: synced, stats: func() (manager.Stats, bool) { return manager.StatsOf(mgr) }}
}

// Check returns nil when healthy, else an error saying why.
func (c *Checker) Check() error {
	if c.synced != nil && !c.synced() {
		return errors.New("pod source has not synced yet (cluster mode: the informer's first list)")
	}
	st, ok := c.stats()
	if !ok {
		return nil
	}
	if !st.WheelAdvanced.IsZero() && st.Now.Sub(st.WheelAdvanced) > StallAfter {
		return fmt.Errorf("scheduler stalled: the wheel last advanced %s ago", st.Now.Sub(st.WheelAdvanced).Round(time.Second))
	}
	backlog := 0
	for _, n := range st.Backlog {
		backlog += n
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if backlog == 0 || st.Dispatched != c.lastDispatched || c.progressAt.IsZero() {
		c.lastDispatched, c.progressAt = st.Dispatched, st.Now
		return nil
	}
	if wait := st.Now.Sub(c.progressAt); wait > StallAfter {
		return fmt.Errorf("pool stalled: %d due probes waiting, none dispatched for %s", backlog, wait.Round(time.Second))
	}
	return nil
}
