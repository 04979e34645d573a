package runtime

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
)

// Reasons of the events of annotation probes beside the kubelet's
// Unhealthy and ProbeWarning (RecordVerdict).
const (
	// ReasonProbeSucceeded is the reason of the Normal event of a probe
	// whose verdict turned Success (annotation probes, and every probe
	// under EventsTransitions): the kubelet has no such event.
	ReasonProbeSucceeded = "ProbeSucceeded"
	// ReasonBelowThreshold is the reason of an annotation probe's failure
	// that did not reach its failureThreshold: nothing changed. A reason of
	// its own, as upstream's proposals for kubernetes/kubernetes#115823
	// have it, because events.k8s.io folds the Events of one object,
	// reason and action into one series whatever their notes: under
	// Unhealthy, the failure that reached the threshold would be counted
	// into the series of the first tolerated one and never shown, and
	// alerts on Unhealthy keep meaning "the verdict is Failure".
	ReasonBelowThreshold = "ProbeFailureBelowThreshold"
)

// EventMode selects which probe runs record an event (Options.Events).
type EventMode uint8

const (
	// EventsAll is the kubelet's: an event for every failed, errored or
	// warning run (K4); an annotation probe's also says where its
	// threshold stands, and its Success verdict after a Failure one
	// records a ProbeSucceeded event.
	EventsAll EventMode = iota
	// EventsTransitions records one event per verdict change (the cached
	// result changed, W11) and one when a probe starts erroring (its
	// previous run was not errored): what operators act on, on a dense
	// node whose failing probes would otherwise fill the event stream.
	EventsTransitions
)

// ParseEventMode reads --events: "all" or "transitions".
func ParseEventMode(s string) (EventMode, error) {
	switch s {
	case "all", "":
		return EventsAll, nil
	case "transitions":
		return EventsTransitions, nil
	}
	return 0, fmt.Errorf("--events %q: want all (an event for every failed run, the kubelet's) or transitions (one per verdict change)", s)
}

// DefaultFailureConsequence is what a liveness or startup Failure verdict
// leads to in the kubelet (K2), the default of
// Options.FailureConsequence.
const DefaultFailureConsequence = "container will be restarted"

// Verdict is where one run left its probe's threshold (W10–W11), as the
// worker knows it: the events of annotation probes, and every probe's
// events under EventsTransitions, are recorded from it (RecordVerdict).
type Verdict struct {
	// Count is the run's result's count toward its threshold (W10's
	// resultRun), Threshold that threshold (failureThreshold for a
	// Failure, successThreshold for a Success).
	Count, Threshold int32
	// Changed: the run applied a verdict other than the container
	// instance's last (W11), the first one included: a verdict change.
	Changed bool
	// Failures counts the failed runs since the container instance's last
	// Success verdict, this one included.
	Failures int32
	// ErroredBefore: the container instance's previous executed run was
	// errored too.
	ErroredBefore bool
}

// RecordVerdict records the event of a run after the worker applied its
// threshold (W11), for the runs Run left to it: every run of an annotation
// probe (Spec.Extension set), and every run under EventsTransitions. A
// spec probe's event under EventsAll is Run's (K4, before the threshold),
// and RecordVerdict records nothing for it.
//
// Texts (the type is the kubelet's "Readiness", "Liveness", "Startup"):
//   - an errored run: the kubelet's `<Type> probe errored and resulted in
//     unknown state: <err>` (P5), under EventsTransitions only when the
//     previous run was not errored;
//   - a warning (a redirect not followed, H6): the kubelet's ProbeWarning
//     `<Type> probe warning: <output>`, not under EventsTransitions;
//   - an annotation probe's failure: below its threshold a Warning
//     ProbeFailureBelowThreshold `<Type> probe failed (2/3, threshold not
//     reached): <output>`, at the threshold an Unhealthy `<Type> probe failed (3/3):
//     container marked not ready: <output>` (what the verdict changes:
//     readiness marks the container not ready, liveness and startup lead to
//     Options.FailureConsequence), past it `(threshold 3 reached):
//     container not ready: <output>` (one text for every further failure,
//     so that they fold into one event with a count, as the kubelet's
//     repeats do); under EventsTransitions only the one that changed the
//     verdict;
//   - a spec probe's failure under EventsTransitions: the kubelet's
//     `<Type> probe failed: <output>` (K4), for the run that changed the
//     verdict;
//   - a Success verdict that changed the verdict (the first one of the
//     container instance included): a Normal ProbeSucceeded `<Type> probe succeeded after 4 failures: container
//     marked ready` (or `<Type> probe succeeded: ...` after none).
//
// Outputs are the report's: redacted and cut (cleanReport), never a
// response body (BR-22).
func (r *Runtime) RecordVerdict(p *Prepared, rep Report, v Verdict) {
	spec := p.Spec
	if r.recorder == nil || spec.Pod == nil || r.recordsPerRun(spec) {
		return
	}
	transitions := r.events == EventsTransitions
	typ := spec.ProbeType.String()
	ref := containerRef(spec)
	out := rep.Outcome
	switch {
	case rep.Err != nil:
		if transitions && v.ErroredBefore {
			return
		}
		r.eventf(spec, ref, v1.EventTypeWarning, ReasonUnhealthy, "%s probe errored and resulted in %s state: %s", typ, out.Result, rep.Err)
		return
	case out.Result == Warning && !transitions:
		r.eventf(spec, ref, v1.EventTypeWarning, ReasonProbeWarning, "%s probe warning: %s", typ, out.Output)
	case out.Result != Success && out.Result != Warning:
		if transitions && !v.Changed {
			return
		}
		if spec.Extension == nil {
			r.eventf(spec, ref, v1.EventTypeWarning, ReasonUnhealthy, "%s probe failed: %s", typ, out.Output)
			return
		}
		switch {
		case v.Count < v.Threshold:
			r.eventf(spec, ref, v1.EventTypeWarning, ReasonBelowThreshold, "%s probe failed (%d/%d, threshold not reached): %s", typ, v.Count, v.Threshold, out.Output)
		case v.Changed:
			r.eventf(spec, ref, v1.EventTypeWarning, ReasonUnhealthy, "%s probe failed (%d/%d): %s: %s", typ, v.Count, v.Threshold, r.consequence(spec.ProbeType, false), out.Output)
		default:
			// No count past the threshold: the repeats of a failing probe
			// are one text, folded into one event with a count (the
			// event ring, client-go's EventSeries), as the kubelet's are.
			r.eventf(spec, ref, v1.EventTypeWarning, ReasonUnhealthy, "%s probe failed (threshold %d reached): %s: %s", typ, v.Threshold, standing(spec.ProbeType), out.Output)
		}
		return
	}
	if !v.Changed {
		return
	}
	if v.Failures > 0 {
		r.eventf(spec, ref, v1.EventTypeNormal, ReasonProbeSucceeded, "%s probe succeeded after %d %s: %s", typ, v.Failures, plural(v.Failures, "failure", "failures"), r.consequence(spec.ProbeType, true))
		return
	}
	r.eventf(spec, ref, v1.EventTypeNormal, ReasonProbeSucceeded, "%s probe succeeded: %s", typ, r.consequence(spec.ProbeType, true))
}

// recordsPerRun reports whether Run records the run's event itself (the
// kubelet's K4, before the threshold): a spec probe under EventsAll.
func (r *Runtime) recordsPerRun(spec *Spec) bool {
	return r.events == EventsAll && spec.Extension == nil
}

// consequence says what a verdict of a probe type changes.
func (r *Runtime) consequence(t ProbeType, success bool) string {
	switch {
	case t == Readiness && success:
		return "container marked ready"
	case t == Readiness:
		return "container marked not ready"
	case t == Startup && success:
		return "container marked started"
	case success:
		return "container marked live"
	}
	return r.failureConsequence
}

// standing says where a probe stands after a failure at or past its
// threshold that changed nothing (only readiness keeps probing then:
// liveness and startup hold, W13).
func standing(t ProbeType) string {
	if t == Readiness {
		return "container not ready"
	}
	return "threshold reached before"
}

func plural(n int32, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
