package manager

import (
	"fmt"

	v1 "k8s.io/api/core/v1"

	"github.com/probed/probed/runtime"
)

// Event reasons of probe runs: the kubelet's (spec K4, pkg/kubelet/events)
// and probed's own for annotation probes.
const (
	ReasonUnhealthy    = "Unhealthy"
	ReasonProbeWarning = "ProbeWarning"
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
// leads to in the kubelet (K2): the default of Options.Consequence.
const DefaultFailureConsequence = "container will be restarted"

// ProbeEvents is the Observer that records the events of probe runs from
// their records (the manager puts it before Options.Observer when
// Options.Recorder is set). The runtime runs probes and knows nothing of
// thresholds; the texts are here, where the run's place against its
// threshold is known (Consul keeps its thresholds in a decorator of its
// own likewise).
//
// Texts (the type is the kubelet's "Readiness", "Liveness", "Startup"; the
// output is the record's Message: redacted and cut, never a response body,
// BR-22):
//   - an errored run: the kubelet's `<Type> probe errored and resulted in
//     unknown state: <err>` (P5), under EventsTransitions only when the
//     previous run was not errored;
//   - a warning (a redirect not followed, H6): the kubelet's ProbeWarning
//     `<Type> probe warning: <output>`, not under EventsTransitions;
//   - a probe of spec meaning (the container's own, or one the offload
//     webhook moved: the kubelet's semantics) under EventsAll: the
//     kubelet's `<Type> probe failed: <output>` for every failed run
//     (K4, whatever its threshold), and nothing else; under
//     EventsTransitions that text for the run that changed the verdict,
//     and the ProbeSucceeded texts below;
//   - an annotation probe's failure: below its threshold a Warning
//     ProbeFailureBelowThreshold `<Type> probe failed (2/3, threshold not
//     reached): <output>`, at the threshold an Unhealthy `<Type> probe
//     failed (3/3): container marked not ready: <output>` (what the
//     verdict changes: readiness marks the container not ready; liveness
//     and startup lead to what the actuator decided, Options.Consequence),
//     past it `(threshold 3 reached): container not ready: <output>` (one
//     text for every further failure, so that they fold into one event
//     with a count, as the kubelet's repeats do); under EventsTransitions
//     only the one that changed the verdict;
//   - a Success verdict that changed the verdict (the first one of the
//     container instance included), for annotation probes and under
//     EventsTransitions: a Normal ProbeSucceeded `<Type> probe succeeded
//     after 4 failures: container marked ready` (or `<Type> probe
//     succeeded: ...` after none).
type ProbeEvents struct {
	recorder    runtime.Recorder
	mode        EventMode
	consequence func(RunRecord) string
}

// NewProbeEvents returns the observer recording into r in mode;
// consequence is Options.Consequence.
func NewProbeEvents(r runtime.Recorder, mode EventMode, consequence func(RunRecord) string) *ProbeEvents {
	return &ProbeEvents{recorder: r, mode: mode, consequence: consequence}
}

// observerOf is the manager's observer: the probe events, then the
// caller's.
func observerOf(opts Options) Observer {
	if opts.Recorder == nil {
		return opts.Observer
	}
	events := NewProbeEvents(opts.Recorder, opts.Events, opts.Consequence)
	if opts.Observer == nil {
		return events
	}
	return Observers{events, opts.Observer}
}

// ProbeRan implements Observer.
func (e *ProbeEvents) ProbeRan(r RunRecord) {
	if r.Pod == nil {
		return
	}
	transitions := e.mode == EventsTransitions
	// Where the threshold stands is said for annotation probes; a probe of
	// spec meaning keeps the kubelet's texts.
	thresholds := r.Origin == runtime.OriginAnnotation
	perRun := !transitions && !thresholds // the kubelet's K4: every run, before its threshold
	typ := r.ProbeType.String()
	switch {
	case r.Err != nil:
		if transitions && r.ErroredBefore {
			return
		}
		e.eventf(r, v1.EventTypeWarning, ReasonUnhealthy, "%s probe errored and resulted in %s state: %s", typ, r.Result, r.Message)
		return
	case r.Discarded:
		return
	case r.Result == runtime.Warning && !transitions:
		e.eventf(r, v1.EventTypeWarning, ReasonProbeWarning, "%s probe warning: %s", typ, r.Message)
	case r.Result != runtime.Success && r.Result != runtime.Warning:
		if perRun {
			if r.Result == runtime.Failure { // P6: an unknown result without an error records nothing
				e.eventf(r, v1.EventTypeWarning, ReasonUnhealthy, "%s probe failed: %s", typ, r.Message)
			}
			return
		}
		if transitions && !r.Transition {
			return
		}
		if !thresholds {
			e.eventf(r, v1.EventTypeWarning, ReasonUnhealthy, "%s probe failed: %s", typ, r.Message)
			return
		}
		switch {
		case r.Count < r.Threshold:
			e.eventf(r, v1.EventTypeWarning, ReasonBelowThreshold, "%s probe failed (%d/%d, threshold not reached): %s", typ, r.Count, r.Threshold, r.Message)
		case r.Transition:
			e.eventf(r, v1.EventTypeWarning, ReasonUnhealthy, "%s probe failed (%d/%d): %s: %s", typ, r.Count, r.Threshold, e.failed(r), r.Message)
		default:
			// No count past the threshold: the repeats of a failing probe
			// are one text, folded into one event with a count (the
			// event ring, client-go's EventSeries), as the kubelet's are.
			e.eventf(r, v1.EventTypeWarning, ReasonUnhealthy, "%s probe failed (threshold %d reached): %s: %s", typ, r.Threshold, standing(r.ProbeType), r.Message)
		}
		return
	}
	if perRun || !r.Transition {
		return
	}
	if r.Failures > 0 {
		e.eventf(r, v1.EventTypeNormal, ReasonProbeSucceeded, "%s probe succeeded after %d %s: %s", typ, r.Failures, plural(r.Failures, "failure", "failures"), succeeded(r.ProbeType))
		return
	}
	e.eventf(r, v1.EventTypeNormal, ReasonProbeSucceeded, "%s probe succeeded: %s", typ, succeeded(r.ProbeType))
}

// eventf records one event of a run, with its probe's origin when the
// recorder keeps it. The container's reference is made here, for the runs
// that record one: most runs (every Success that changes nothing) record
// none, and ProbeRan is on every run's path.
func (e *ProbeEvents) eventf(r RunRecord, eventtype, reason, format string, args ...any) {
	ref := runtime.ContainerRef(r.Pod, r.ContainerName)
	if pr, ok := e.recorder.(runtime.ProbeRecorder); ok && r.Origin != 0 {
		pr.ProbeEventf(r.Origin, ref, eventtype, reason, format, args...)
		return
	}
	e.recorder.Eventf(ref, eventtype, reason, format, args...)
}

// failed says what a Failure verdict of r's probe changes.
func (e *ProbeEvents) failed(r RunRecord) string {
	if r.ProbeType == runtime.Readiness {
		return "container marked not ready"
	}
	if e.consequence != nil {
		if s := e.consequence(r); s != "" {
			return s
		}
	}
	return DefaultFailureConsequence
}

// succeeded says what a Success verdict of a probe type changes.
func succeeded(t runtime.ProbeType) string {
	switch t {
	case runtime.Readiness:
		return "container marked ready"
	case runtime.Startup:
		return "container marked started"
	}
	return "container marked live"
}

// standing says where a probe stands after a failure at or past its
// threshold that changed nothing (only readiness keeps probing then:
// liveness and startup hold, W13).
func standing(t runtime.ProbeType) string {
	if t == runtime.Readiness {
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
