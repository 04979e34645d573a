// Package limits decides what one pod may ask of the node in cluster mode,
// where every probed.io/probes annotation is written by a tenant (issue 17
// §2). It is the one place that says which of a pod's annotation probes run
// and, when some do not, why:
//
//   - the annotation's own rules and the operator's per-pod limits
//     (customprobe.Options: at most Limits.MaxProbes probes, no period
//     under Limits.MinPeriod, ...) and the mode's transforms (exec without
//     a container runtime) are applied where the pod comes in, in its
//     probes' view (manager/podprobes: cluster mode's Policy): an invalid
//     element does not run; the others do. The Room reads the view's
//     refusals — container, type, field and reason, each as the element
//     said it — and reports them;
//   - a node-wide budget of annotation probe runs per second (MaxRate): a
//     pod whose probes would take the node's runs past it runs none of them
//     until the pods before it leave room (pods are admitted in the order
//     they arrive, and a refused pod is admitted by a later AddPod, the
//     periodic pod sync, once it fits).
//
// What the tenant sees: one Warning Event per pod and spec (reason
// InvalidProbeAnnotation, naming every field, or ProbeBudgetExceeded), a log
// line per error naming pod, container and field, and the pod's
// readiness-gate condition False with the same reason and the first error
// (Refusal) whenever a refused element is, or may be, a readiness or
// startup probe: a pod whose readiness the agent cannot check is never
// reported ready. Refused liveness probes leave the condition alone.
package limits

import (
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/probed/probed/agent/pods"
	"github.com/probed/probed/manager/customprobe"
	"github.com/probed/probed/manager/podprobes"
	"github.com/probed/probed/runtime"
)

// The reasons of the Events and of the readiness-gate condition.
const (
	// ReasonInvalidProbeAnnotation: elements of the annotation break its
	// rules or the node's per-pod limits.
	ReasonInvalidProbeAnnotation = "InvalidProbeAnnotation"
	// ReasonProbeBudgetExceeded: the pod's probes would take the node past
	// its budget of annotation probe runs per second.
	ReasonProbeBudgetExceeded = "ProbeBudgetExceeded"
	// ReasonProbesAdmitted: a pod refused for the budget was admitted.
	ReasonProbesAdmitted = "ProbesAdmitted"
)

// MaxMessage bounds the condition message built from a refusal (the first
// error, then how many more): the whole list is in the Event.
const MaxMessage = 512

// Options configure a Room.
type Options struct {
	// MaxRate is the node's budget of annotation probe runs per second,
	// the sum of 1/period over every admitted pod's annotation probes;
	// zero: no budget.
	MaxRate float64
	// MaxRateFlag names the setting in messages (e.g. "--max-probe-rate").
	MaxRateFlag string
	// Recorder receives the Events (required).
	Recorder runtime.Recorder
	// Logger; nil: slog.Default().
	Logger *slog.Logger
}

// Room admits pods' annotation probes. It is a pods.Listener (an arriving
// pod's refused probes are reported; a removed pod's budget is freed) and
// gives the manager its Admit and the condition writer its Refusal. It is
// safe for concurrent use.
type Room struct {
	opts Options
	log  *slog.Logger

	mu       sync.Mutex
	used     float64               // runs/s of the admitted pods
	admitted map[types.UID]float64 // runs/s of each admitted pod
	refused  map[types.UID]string  // pods refused for the budget: why
}

var _ pods.Listener = (*Room)(nil)

// New returns a Room with no pod admitted.
func New(opts Options) *Room {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Room{opts: opts, log: opts.Logger, admitted: map[types.UID]float64{}, refused: map[types.UID]string{}}
}

// Admit decides whether the pod's annotation probes, whose periods are
// given, may run (manager.Options.Admit): always without a budget or
// probes; else when the node's admitted runs per second plus the pod's
// stay within MaxRate. A pod admitted before keeps its place (its rate is
// updated). The first refusal of a pod is a Warning Event and a log line;
// its admission after a refusal a Normal Event.
func (r *Room) Admit(pod *v1.Pod, periods []time.Duration) bool {
	if r.opts.MaxRate <= 0 || len(periods) == 0 {
		return true
	}
	var rate float64
	for _, p := range periods {
		if p > 0 {
			rate += float64(time.Second) / float64(p)
		}
	}
	r.mu.Lock()
	old, was := r.admitted[pod.UID]
	if r.used-old+rate <= r.opts.MaxRate+1e-9 {
		r.used += rate - old
		r.admitted[pod.UID] = rate
		_, wasRefused := r.refused[pod.UID]
		delete(r.refused, pod.UID)
		r.mu.Unlock()
		if wasRefused {
			r.opts.Recorder.Eventf(runtime.ContainerRef(pod, ""), v1.EventTypeNormal, ReasonProbesAdmitted,
				"%s annotation: its %d probes (%s runs/s) fit the node's budget now and run", customprobe.Annotation, len(periods), perSecond(rate))
		}
		return true
	}
	if was {
		r.used -= old
		delete(r.admitted, pod.UID)
	}
	left := max(r.opts.MaxRate-r.used, 0)
	msg := fmt.Sprintf("%s annotation: its %d probes ask for %s runs/s, and this node's budget of annotation probe runs (%s %s/s) has %s/s left; none of them run until other pods leave room",
		customprobe.Annotation, len(periods), perSecond(rate), r.opts.MaxRateFlag, perSecond(r.opts.MaxRate), perSecond(left))
	_, known := r.refused[pod.UID]
	r.refused[pod.UID] = msg
	r.mu.Unlock()
	if !known {
		r.log.Warn("pod's probes refused: node probe budget exceeded", "pod", pod.Namespace+"/"+pod.Name,
			"runsPerSecond", perSecond(rate), "budgetLeft", perSecond(left))
		r.opts.Recorder.Eventf(runtime.ContainerRef(pod, ""), v1.EventTypeWarning, ReasonProbeBudgetExceeded, "%s", msg)
	}
	return false
}

// Refusal says why the pod's readiness-gate condition must be False
// whatever its probes' results: its probes were refused for the budget
// (ProbeBudgetExceeded), or a refused probe of its view (probes) is, or may
// be, a readiness or startup probe (InvalidProbeAnnotation, with the first
// such error). The message is at most MaxMessage bytes.
func (r *Room) Refusal(pod *v1.Pod, probes *podprobes.View) (reason, message string, refused bool) {
	r.mu.Lock()
	msg, overBudget := r.refused[pod.UID]
	r.mu.Unlock()
	if overBudget {
		return ReasonProbeBudgetExceeded, cut(msg), true
	}
	var first *podprobes.Refusal
	gating := 0
	if probes != nil {
		for i := range probes.Refused {
			if rf := &probes.Refused[i]; gatesReadiness(rf) {
				if first == nil {
					first = rf
				}
				gating++
			}
		}
		if first == nil && probes.RefusedMore > 0 {
			gating = probes.RefusedMore // refusals not kept: they may be readiness probes
		}
	}
	if gating == 0 {
		return "", "", false
	}
	if first == nil {
		msg = fmt.Sprintf("%s annotation: %d errors", customprobe.Annotation, gating)
	} else {
		msg = customprobe.Annotation + " annotation: " + first.Err.Error()
		if gating > 1 {
			msg += fmt.Sprintf(" (and %d more errors)", gating-1)
		}
	}
	return ReasonInvalidProbeAnnotation, cut(msg) + "; the pod's readiness cannot be checked", true
}

// BudgetRefusal returns the message of the pod's refusal for the node's
// budget, if its probes are refused for it now.
func (r *Room) BudgetRefusal(uid types.UID) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	msg, ok := r.refused[uid]
	return msg, ok
}

// PodAdded reports the pod's refused probes (issue 10 §2.2): one Warning
// Event on the pod naming every field, and one log line per refusal naming
// pod, container and field. The annotation's valid elements run; the
// node's other pods are not affected. The reconciler calls it when the pod
// arrives and when its probes change.
func (r *Room) PodAdded(p *pods.Pod) {
	errs := p.Probes.Errors()
	if len(errs) == 0 {
		return
	}
	for _, rf := range p.Probes.Refused {
		r.log.Error("invalid probe annotation", "pod", p.Pod.Namespace+"/"+p.Pod.Name, "container", rf.Container,
			"field", rf.Field, "err", rf.Reason)
	}
	r.opts.Recorder.Eventf(runtime.ContainerRef(p.Pod, ""), v1.EventTypeWarning, ReasonInvalidProbeAnnotation,
		"%s annotation: %s; its other probes run", customprobe.Annotation, errs.ToAggregate().Error())
}

// PodStatusChanged does nothing: a status never changes what is admitted.
func (r *Room) PodStatusChanged(*pods.Pod) {}

// PodRemoved frees the pod's share of the budget.
func (r *Room) PodRemoved(p *pods.Pod) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.used -= r.admitted[p.Pod.UID]
	if r.used < 1e-9 {
		r.used = 0
	}
	delete(r.admitted, p.Pod.UID)
	delete(r.refused, p.Pod.UID)
}

// Used returns the admitted runs per second and the budget (0: none).
func (r *Room) Used() (used, budget float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.used, r.opts.MaxRate
}

// gatesReadiness reports whether a refused probe may be a readiness or
// startup probe: one of an error of the whole annotation (no element), or
// of an element whose type did not decode or is not liveness.
func gatesReadiness(r *podprobes.Refusal) bool {
	return !r.TypeKnown || r.Type != runtime.Liveness
}

// perSecond prints a rate with at most two decimals.
func perSecond(v float64) string { return strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64) }

// cut bounds a message to MaxMessage bytes, on a rune boundary.
func cut(s string) string {
	if len(s) <= MaxMessage {
		return s
	}
	i := MaxMessage - len("…")
	for i > 0 && !isRuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }
