// Package history keeps the last results of every probe — time, duration,
// verdict, message (redacted by runtime/redact, cut to bound.MessageBytes:
// a probe's history holds at most --history of them plus its newest
// failure, whatever its targets answer), never a response body
// (BR-22) — for the agent's
// GET /pods/{namespace}/{name}/probes. It implements manager.Observer.
package history

import (
	"fmt"
	"sort"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/probed/probed/manager"
	"github.com/probed/probed/manager/podprobes"
	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/bound"
	"github.com/probed/probed/runtime/redact"
)

// Record is one executed probe run.
type Record struct {
	Time        time.Time `json:"time"`
	DurationMS  float64   `json:"durationMs"`
	Result      string    `json:"result"` // success, warning, failure, unknown, errored
	Message     string    `json:"message,omitempty"`
	Attempts    int       `json:"attempts"`
	ContainerID string    `json:"containerID"`
	// Cached is the worker's result after thresholds: Success, Failure or UNKNOWN.
	Cached string `json:"cachedResult"`
}

// PodHistory is the body of GET /pods/{namespace}/{name}/probes: a pod's
// probes' histories, sorted by container and type (History.Pod), and the
// probes it declares that probed refuses.
type PodHistory struct {
	Namespace string  `json:"namespace"`
	Name      string  `json:"name"`
	UID       string  `json:"uid"`
	Probes    []Probe `json:"probes"`
	// Refused are the pod's declared probes probed does not run, one per
	// reason (the pod's view of its probes, RefusedOf; and, in cluster
	// mode, every annotation probe of a pod over the node's budget);
	// absent when none.
	Refused []Refused `json:"refused,omitempty"`
}

// Refused is one reason a declared probe does not run.
type Refused struct {
	// Container and Type are the probe's as declared, absent when not
	// known (an error of the whole annotation, an element without them).
	Container string `json:"container,omitempty"`
	Type      string `json:"type,omitempty"` // liveness, readiness or startup
	// Origin is where it is declared: spec or annotation.
	Origin string `json:"origin"`
	// Field is the offending field's path; Reason what is wrong with it
	// (or why the whole probe is refused). Both are redacted
	// (runtime/redact) and cut to bound.MessageBytes.
	Field  string `json:"field,omitempty"`
	Reason string `json:"reason"`
}

// RefusedOf lists the view's refusals as the API serves them: redacted and
// cut, and one more counting those the view did not keep.
func RefusedOf(v *podprobes.View) []Refused {
	if v == nil || (len(v.Refused) == 0 && v.RefusedMore == 0) {
		return nil
	}
	out := make([]Refused, 0, len(v.Refused)+1)
	for i := range v.Refused {
		r := &v.Refused[i]
		rf := Refused{Container: clean(r.Container), Origin: r.Origin.String(), Field: clean(r.Field), Reason: clean(r.Reason)}
		if r.TypeKnown {
			rf.Type = r.Type.Lower()
		}
		out = append(out, rf)
	}
	if v.RefusedMore > 0 {
		out = append(out, Refused{Origin: runtime.OriginAnnotation.String(), Reason: fmt.Sprintf("%d more errors not shown", v.RefusedMore)})
	}
	return out
}

// clean redacts and cuts a text of a refusal.
func clean(s string) string { return bound.Cut(redact.Text(s), bound.MessageBytes) }

// Probe is the history of one probe.
type Probe struct {
	Container string `json:"container"`
	Type      string `json:"type"`    // liveness, readiness, startup
	Handler   string `json:"handler"` // http, tcp, exec, grpc or a plugin kind
	// Origin is where the probe is declared, as of its newest run: "spec"
	// (the container's own probe), "annotation" (probed.io/probes) or
	// "offloaded" (a container's own probe the offload webhook moved into
	// probed's care: probed.io/offloaded).
	Origin string `json:"origin,omitempty"`
	// PeriodMS and TimeoutMS are the probe's period and timeout in
	// milliseconds (periodSeconds plus periodMilliseconds for an
	// annotation probe, runtime.TimingOf), as of its newest run.
	PeriodMS  float64 `json:"periodMs"`
	TimeoutMS float64 `json:"timeoutMs"`
	// ExecMode is how an exec probe runs now (the agent sets it, for its
	// newest record's container): "resident" (through the container's
	// resident helper), "resident (starting)", "execsync" (CRI ExecSync),
	// "execsync (<why the container cannot host a helper>)", "host"
	// (manifest mode, --allow-host-exec) or "disabled"; empty for other
	// kinds.
	ExecMode string   `json:"execMode,omitempty"`
	Results  []Record `json:"results"` // oldest first
	// LastFailure is the newest failed or errored record, kept even when
	// it has left the ring.
	LastFailure *Record `json:"lastFailure,omitempty"`
}

type key struct {
	container string
	typ       runtime.ProbeType
}

type ring struct {
	handler         string
	origin          runtime.Origin
	period, timeout time.Duration
	recs            []Record
	next            int
	full            bool
	lastFailure     *Record
}

// History holds up to Size records per probe.
type History struct {
	size int
	mu   sync.Mutex
	pods map[types.UID]map[key]*ring
}

// New returns a History keeping size records per probe (default 10).
func New(size int) *History {
	if size <= 0 {
		size = 10
	}
	return &History{size: size, pods: map[types.UID]map[key]*ring{}}
}

// ProbeRan implements manager.Observer.
func (h *History) ProbeRan(r manager.RunRecord) {
	rec := Record{
		Time:        r.Start,
		DurationMS:  float64(r.Duration.Microseconds()) / 1000,
		Result:      r.Result.String(),
		Message:     bound.Cut(redact.Text(r.Message), bound.MessageBytes),
		Attempts:    r.Attempts,
		ContainerID: r.ContainerID,
		Cached:      r.Cached.String(),
	}
	if r.Err != nil {
		rec.Result = "errored"
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	probes, ok := h.pods[r.PodUID]
	if !ok {
		probes = map[key]*ring{}
		h.pods[r.PodUID] = probes
	}
	k := key{r.ContainerName, r.ProbeType}
	rg, ok := probes[k]
	if !ok {
		rg = &ring{handler: r.Kind, recs: make([]Record, h.size)}
		probes[k] = rg
	}
	rg.period, rg.timeout, rg.origin = r.Period, r.Timeout, r.Origin
	rg.recs[rg.next] = rec
	rg.next = (rg.next + 1) % h.size
	if rg.next == 0 {
		rg.full = true
	}
	if rec.Result == "failure" || rec.Result == "unknown" || rec.Result == "errored" {
		f := rec
		rg.lastFailure = &f
	}
}

// Size is the number of records kept per probe.
func (h *History) Size() int { return h.size }

// Forget drops the history of a pod.
func (h *History) Forget(uid types.UID) {
	h.mu.Lock()
	delete(h.pods, uid)
	h.mu.Unlock()
}

// Pod returns the probes' histories of a pod, sorted by container and type.
func (h *History) Pod(uid types.UID) []Probe {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := []Probe{}
	for k, rg := range h.pods[uid] {
		p := Probe{Container: k.container, Type: k.typ.Lower(), Handler: rg.handler, Origin: rg.origin.String(), LastFailure: rg.lastFailure,
			PeriodMS: millis(rg.period), TimeoutMS: millis(rg.timeout)}
		if rg.full {
			p.Results = append(p.Results, rg.recs[rg.next:]...)
		}
		p.Results = append(p.Results, rg.recs[:rg.next]...)
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Container != out[j].Container {
			return out[i].Container < out[j].Container
		}
		return out[i].Type < out[j].Type
	})
	return out
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
