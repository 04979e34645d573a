package agent

import "github.com/probed/probed/agent/guards"

// held is what cluster mode's guards hold back now: the pods the panic
// threshold keeps ready, then the failures the restart budget holds back
// (none without an action that acts).
func (p *clusterParts) held() []guards.Held {
	out := []guards.Held{}
	if p.guard != nil {
		out = append(out, p.guard.Held()...)
	}
	if p.budget != nil {
		out = append(out, p.budget.Held()...)
	}
	return out
}

// guardsReport serves GET /guards in cluster mode; nil in manifest mode.
func (a *Agent) guardsReport() func() guards.Report {
	if a.cluster == nil {
		return nil
	}
	return func() guards.Report { return guards.Report{Held: a.cluster.held()} }
}
