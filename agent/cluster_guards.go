package agent

import "github.com/probed/probed/agent/guards"

// guardsHeld is what cluster mode's guards hold back now: the pods the
// panic threshold keeps ready, then the failures the restart budget holds
// back (none without an action that acts).
func (p *clusterRooms) guardsHeld() []guards.Held {
	out := []guards.Held{}
	if p.guard != nil {
		out = append(out, p.guard.Held()...)
	}
	if p.budget != nil {
		out = append(out, p.budget.Held()...)
	}
	return out
}
