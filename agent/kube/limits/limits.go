// Package limits decides what one pod may ask of the node in cluster mode,
// where every probed.io/probes annotation is written by a tenant.
// It is the one place that says which of a pod's annotation probes run
// and, when some do not, why:
//
//   - the annotation's own rules and the operator's per-pod limits
//     (customprobe.Options: at most Limits.MaxProbes probes, no period
//     under Limits.MinPeriod, ...) and the mode's transforms (exec without
//     a container runtime) are applied where the pod comes in, in its
//     probes' view (manager/podprobes: cluster mode's Policy): an invalid
//     element does not run; the others do. The Admission reads the view's
//     refusals — container, type, field and reason, each as the element
//     said it — and reports them;
//   - a node-wide budget of annotation probe runs per second (MaxRate),
//     divided among the namespaces by fair share (runtime/tenant.Shares,
//     in thousandths of a run a second, charged to the pod's namespace):
//     a pod's probes run when its namespace's admitted runs plus the pod's
//     stay within the namespace's fair share among the namespaces that
//     ask (those with pods admitted or waiting), at most NamespaceShare of
//     the budget, and the node has the runs free; otherwise none of them
//     run and the pod waits in line (a tenant.Ticket, no goroutine),
//     admitted at a later AddPod (the periodic pod sync) once it was
//     granted. A pod that asks more than one namespace may ever hold is
//     refused until its probes change. Nothing is taken back: a namespace
//     admitted beyond its fair share while it was alone keeps its running
//     pods, its next pods are refused (the Event says the namespace is
//     over its share) while it is over, and the runs its pods free go
//     first to the pods waiting within their shares. A pod of another
//     namespace is never refused for the namespace over its share: the
//     cap leaves it room, or it is first in line.
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
	"github.com/probed/probed/runtime/bound"
	"github.com/probed/probed/runtime/tenant"
)

// The reasons of the Events and of the readiness-gate condition.
const (
	// ReasonInvalidProbeAnnotation: elements of the annotation break its
	// rules or the node's per-pod limits.
	ReasonInvalidProbeAnnotation = "InvalidProbeAnnotation"
	// ReasonProbeBudgetExceeded: the pod's probes would take its namespace
	// past its share of the node's budget of annotation probe runs per
	// second, or the node past the budget (the message says which).
	ReasonProbeBudgetExceeded = "ProbeBudgetExceeded"
	// ReasonProbesAdmitted: a pod refused for the budget was admitted.
	ReasonProbesAdmitted = "ProbesAdmitted"
)

// MaxMessage bounds the condition message built from a refusal (the first
// error, then how many more): the whole list is in the Event.
const MaxMessage = 512

// Options configure an Admission.
type Options struct {
	// MaxRate is the node's budget of annotation probe runs per second,
	// the sum of 1/period over every admitted pod's annotation probes;
	// zero: no budget.
	MaxRate float64
	// MaxRateFlag names the setting in messages (e.g. "--max-probe-rate").
	MaxRateFlag string
	// NamespaceShare is the most of MaxRate one namespace may hold, a
	// fraction in (0, 1]: a namespace alone on the node takes at most this
	// much and leaves the rest to the namespaces that come later; beside
	// others it holds at most its fair share. Zero or 1: no cap beyond
	// the fair share.
	NamespaceShare float64
	// NamespaceShareFlag names it in messages (e.g.
	// "--namespace-probe-rate-share").
	NamespaceShareFlag string
	// Recorder receives the Events (required).
	Recorder runtime.Recorder
	// Logger; nil: slog.Default().
	Logger *slog.Logger
}

// Admission admits pods' annotation probes. It is a pods.Listener (an arriving
// pod's refused probes are reported; a removed pod's budget is freed) and
// gives the manager its Admit and the condition writer its Refusal. It is
// safe for concurrent use.
type Admission struct {
	opts Options
	log  *slog.Logger
	// shares is the budget in thousandths of a run a second (nil: none).
	shares *tenant.Shares[string]

	mu   sync.Mutex
	used int64                 // thousandths of a run a second the admitted pods hold
	pods map[types.UID]*charge // pods asked about, admitted or not
}

// charge is one pod's part of the budget.
type charge struct {
	namespace string
	units     int64 // what its probes ask, thousandths of a run a second
	admitted  bool  // units held
	// ticket is the pod's place in line while it waits (nil when admitted
	// or refused for good).
	ticket *tenant.Ticket[string]
	// refused says why while it is not admitted.
	refused string
}

// unitsPerRun are the budget's units in one run a second.
const unitsPerRun = 1000

var _ pods.Listener = (*Admission)(nil)

// New returns an Admission with no pod admitted.
func New(opts Options) *Admission {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	r := &Admission{opts: opts, log: opts.Logger, pods: map[types.UID]*charge{}}
	if opts.MaxRate > 0 {
		units := max(int64(math.Round(opts.MaxRate*unitsPerRun)), 1)
		var capUnits int64
		if opts.NamespaceShare > 0 && opts.NamespaceShare < 1 {
			capUnits = max(int64(math.Floor(opts.NamespaceShare*float64(units))), 1)
		}
		r.shares = tenant.NewShares[string](units, capUnits)
	}
	return r
}

// Admit decides whether the pod's annotation probes, whose periods are
// given, may run (manager.Options.Admit): always without a budget or
// probes; else when the pod's runs a second fit its namespace's fair share
// and the node's free runs (see the package doc), now or — for a pod that
// waited in line — since it was asked last. A pod admitted before keeps
// its place (its rate is updated: an increase is taken if it fits, else
// the pod waits in line again for the whole). The first refusal of a pod
// (for a given rate) is a Warning Event and a log line; its admission
// after a refusal a Normal Event.
func (r *Admission) Admit(pod *v1.Pod, periods []time.Duration) bool {
	if r.shares == nil || len(periods) == 0 {
		return true
	}
	var rate float64
	for _, p := range periods {
		if p > 0 {
			rate += float64(time.Second) / float64(p)
		}
	}
	units := max(int64(math.Ceil(rate*unitsPerRun-1e-6)), 1)
	ns := pod.Namespace
	r.mu.Lock()
	c := r.pods[pod.UID]
	if c != nil && c.units == units {
		if c.admitted {
			r.mu.Unlock()
			return true
		}
		if c.ticket != nil && c.ticket.Granted() {
			c.ticket, c.admitted, c.refused = nil, true, ""
			r.used += units
			r.mu.Unlock()
			r.admittedEvent(pod, len(periods), rate)
			return true
		}
		r.mu.Unlock()
		return false
	}
	if c == nil {
		c = &charge{namespace: ns}
		r.pods[pod.UID] = c
	}
	wasRefused := c.refused != ""
	if c.admitted && units < c.units {
		r.shares.Put(ns, c.units-units)
		r.used -= c.units - units
		c.units = units
		r.mu.Unlock()
		return true
	}
	if c.admitted {
		if ok, _ := r.shares.TryTake(ns, units-c.units); ok {
			r.used += units - c.units
			c.units = units
			r.mu.Unlock()
			return true
		}
		r.shares.Put(ns, c.units)
		r.used -= c.units
		c.admitted = false
	}
	if c.ticket != nil {
		c.ticket.Cancel()
		c.ticket = nil
	}
	c.units = units
	t, err := r.shares.Queue(ns, units)
	if err == nil && t.Granted() {
		c.admitted, c.refused = true, ""
		r.used += units
		r.mu.Unlock()
		if wasRefused {
			r.admittedEvent(pod, len(periods), rate)
		}
		return true
	}
	c.ticket = t // nil when it can never fit
	c.refused = r.refusalLocked(ns, len(periods), units, rate, err != nil)
	msg := c.refused
	r.mu.Unlock()
	r.log.Warn("pod's probes refused: probe budget exceeded", "pod", pod.Namespace+"/"+pod.Name,
		"runsPerSecond", perSecond(rate), "reason", msg)
	r.opts.Recorder.Eventf(runtime.ContainerRef(pod, ""), v1.EventTypeWarning, ReasonProbeBudgetExceeded, "%s", msg)
	return false
}

func (r *Admission) admittedEvent(pod *v1.Pod, n int, rate float64) {
	r.opts.Recorder.Eventf(runtime.ContainerRef(pod, ""), v1.EventTypeNormal, ReasonProbesAdmitted,
		"%s annotation: its %d probes (%s runs/s) fit the node's budget now and run", customprobe.Annotation, n, perSecond(rate))
}

// refusalLocked says why a pod of namespace ns whose n probes ask for rate
// runs a second (units) is refused: it can never fit (tooLarge), its
// namespace would go over its fair share, or the node has too little left
// (r.mu held; the pod's ask is in line already).
func (r *Admission) refusalLocked(ns string, n int, units int64, rate float64, tooLarge bool) string {
	ask := fmt.Sprintf("%s annotation: its %d probes ask for %s runs/s", customprobe.Annotation, n, perSecond(rate))
	budget := fmt.Sprintf("this node's budget of annotation probe runs (%s %s/s)", r.opts.MaxRateFlag, perSecond(r.opts.MaxRate))
	if tooLarge {
		if r.shares.Cap() < r.shares.Units() {
			return fmt.Sprintf("%s, more than one namespace may hold of %s: %s of it, %s runs/s; none of them run",
				ask, budget, r.shareText(), runs(r.shares.Cap()))
		}
		return fmt.Sprintf("%s, more than %s; none of them run", ask, budget)
	}
	// Over its share: the pod would take its namespace past what the
	// others' asks (or the cap) leave it; else the node has too little
	// free.
	held, share := r.shares.Held(ns), r.shares.Share(ns)
	if held+units > share && share < r.shares.Units() {
		capped := ""
		if r.shares.Cap() < r.shares.Units() {
			capped = fmt.Sprintf(", at most %s (%s)", r.shareText(), runs(r.shares.Cap()))
		}
		return fmt.Sprintf("%s, and namespace %s holds %s runs/s of %s, over its fair share among the namespaces that ask, %s runs/s%s; none of them run until the namespace's pods leave room",
			ask, ns, runs(held), budget, runs(share), capped)
	}
	return fmt.Sprintf("%s, and %s has %s/s left; none of them run until other pods leave room",
		ask, budget, runs(r.shares.Free()))
}

// shareText names the namespace share: "--namespace-probe-rate-share 0.25".
func (r *Admission) shareText() string {
	return r.opts.NamespaceShareFlag + " " + strconv.FormatFloat(r.opts.NamespaceShare, 'f', -1, 64)
}

// runs prints units as runs a second.
func runs(units int64) string { return perSecond(float64(units) / unitsPerRun) }

// Refusal says why the pod's readiness-gate condition must be False
// whatever its probes' results: its probes were refused for the budget
// (ProbeBudgetExceeded), or a refused probe of its view (probes) is, or may
// be, a readiness or startup probe (InvalidProbeAnnotation, with the first
// such error). The message is at most MaxMessage bytes.
func (r *Admission) Refusal(pod *v1.Pod, probes *podprobes.View) (reason, message string, refused bool) {
	if msg, overBudget := r.BudgetRefusal(pod.UID); overBudget {
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
	var msg string
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
func (r *Admission) BudgetRefusal(uid types.UID) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.pods[uid]; c != nil && !c.admitted {
		return c.refused, true
	}
	return "", false
}

// PodAdded reports the pod's refused probes: one Warning
// Event on the pod naming every field, and one log line per refusal naming
// pod, container and field. The annotation's valid elements run; the
// node's other pods are not affected. The reconciler calls it when the pod
// arrives and when its probes change.
func (r *Admission) PodAdded(p *pods.Pod) {
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
func (r *Admission) PodStatusChanged(*pods.Pod) {}

// PodRemoved frees the pod's share of the budget, or its place in line.
func (r *Admission) PodRemoved(p *pods.Pod) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.pods[p.Pod.UID]
	if c == nil {
		return
	}
	delete(r.pods, p.Pod.UID)
	if c.admitted {
		r.shares.Put(c.namespace, c.units)
		r.used -= c.units
	}
	if c.ticket != nil {
		c.ticket.Cancel()
	}
}

// Used returns the admitted runs per second and the budget (0: none).
func (r *Admission) Used() (used, budget float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return float64(r.used) / unitsPerRun, r.opts.MaxRate
}

// gatesReadiness reports whether a refused probe may be a readiness or
// startup probe: one of an error of the whole annotation (no element), or
// of an element whose type did not decode or is not liveness.
func gatesReadiness(r *podprobes.Refusal) bool {
	return !r.TypeKnown || r.Type != runtime.Liveness
}

// perSecond prints a rate with at most two decimals.
func perSecond(v float64) string { return strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64) }

// cut bounds a message to MaxMessage bytes (bound.Cut).
func cut(s string) string { return bound.Cut(s, MaxMessage) }
