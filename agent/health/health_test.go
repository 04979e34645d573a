package health

import (
	"strings"
	"testing"
	"time"

	"github.com/probed/probed/manager"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// checker returns a Checker whose figures are *st.
func checker(synced bool, st *manager.Stats) *Checker {
	return &Checker{synced: func() bool { return synced }, stats: func() (manager.Stats, bool) { return *st, true }}
}

// /healthz is unhealthy while the pod source (the informer)
// has never synced.
func TestUnhealthyUntilSynced(t *testing.T) {
	st := manager.Stats{Now: t0, WheelAdvanced: t0}
	if err := checker(false, &st).Check(); err == nil || !strings.Contains(err.Error(), "not synced") {
		t.Fatalf("Check() = %v, want not synced", err)
	}
	if err := checker(true, &st).Check(); err != nil {
		t.Fatalf("synced and keeping up: %v", err)
	}
}

// A wheel that no longer advances with the clock is a
// stalled scheduler.
func TestUnhealthyWhenWheelStalls(t *testing.T) {
	st := manager.Stats{Now: t0.Add(StallAfter), WheelAdvanced: t0}
	c := checker(true, &st)
	if err := c.Check(); err != nil {
		t.Fatalf("at the bound: %v", err)
	}
	st.Now = t0.Add(StallAfter + time.Second)
	if err := c.Check(); err == nil || !strings.Contains(err.Error(), "scheduler stalled") {
		t.Fatalf("Check() = %v, want scheduler stalled", err)
	}
}

// Due work that waits while nothing is dispatched for
// longer than StallAfter is a stalled pool; a backlog that drains, or
// dispatching that goes on, is healthy (overload shows as lag, not as a
// failure of probed itself).
func TestUnhealthyWhenBacklogNeverDispatched(t *testing.T) {
	st := manager.Stats{Now: t0, WheelAdvanced: t0, Backlog: map[string]int{"network": 5}, Dispatched: 10}
	c := checker(true, &st)
	if err := c.Check(); err != nil {
		t.Fatal(err)
	}
	st.Now, st.WheelAdvanced = t0.Add(StallAfter/2), t0.Add(StallAfter/2)
	st.Dispatched = 11 // progress
	if err := c.Check(); err != nil {
		t.Fatal(err)
	}
	st.Now, st.WheelAdvanced = t0.Add(StallAfter/2+StallAfter+time.Second), t0.Add(StallAfter/2+StallAfter+time.Second)
	if err := c.Check(); err == nil || !strings.Contains(err.Error(), "pool stalled") {
		t.Fatalf("Check() = %v, want pool stalled", err)
	}
	st.Backlog["network"] = 0
	if err := c.Check(); err != nil {
		t.Fatalf("empty backlog: %v", err)
	}
}
