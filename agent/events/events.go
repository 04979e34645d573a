// Package events records the probe events of the agent (spec K4 reasons and
// messages, redacted by runtime/redact and cut to bound.MessageBytes) in a
// bounded ring, logs each one recorded through Eventf, and serves them as
// JSON. The runtime's event of every failed run records through Unlogged:
// those runs are logged by package runlog, on transitions and in
// rate-limited summaries, not once per run.
package events

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/clock"

	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/bound"
	"github.com/probed/probed/runtime/redact"
)

// Event is one recorded event.
type Event struct {
	Time      time.Time `json:"time"`      // the last occurrence
	FirstTime time.Time `json:"firstTime"` // the first occurrence (Count > 1: folded)
	Type      string    `json:"type"`      // Normal or Warning
	Reason    string    `json:"reason"`    // Unhealthy, ProbeWarning, Killing, ...
	Message   string    `json:"message"`
	Namespace string    `json:"namespace,omitempty"`
	Pod       string    `json:"pod,omitempty"`
	PodUID    string    `json:"podUID,omitempty"`
	FieldPath string    `json:"fieldPath,omitempty"` // spec.containers{name}
	// Origin is where the probe of a probe run's event is declared: spec
	// or annotation (probed.io/probes); absent for other events.
	Origin string `json:"origin,omitempty"`
	Count  int    `json:"count"` // repeats folded into this event
}

// Recorder keeps the last Size events. It implements runtime.Recorder (the
// Eventf subset of client-go's record.EventRecorder). An event identical to
// one still kept (same pod, object, type, reason and message) is folded into
// it: its count goes up and its time becomes the new one, as client-go's
// EventCorrelator (tools/record/events_cache.go, eventLogger keyed by
// getEventKey, an LRU of 4096) folds them for the kubelet, whether or not
// other events came between. Events with the same reason but different
// messages are kept apart: probed does not do the aggregator's "(combined
// from similar events)" after 10 distinct messages in 10 minutes
// (docs/probes.md).
type Recorder struct {
	clock clock.PassiveClock
	log   *slog.Logger
	size  int

	mu   sync.Mutex
	ring []Event
	next int
	full bool
	kept map[eventKey]int // ring index of each kept event
}

// eventKey is what makes two events the same (client-go's getEventKey).
type eventKey struct {
	podUID, namespace, pod, fieldPath, origin, eventType, reason, message string
}

func keyOf(e *Event) eventKey {
	return eventKey{e.PodUID, e.Namespace, e.Pod, e.FieldPath, e.Origin, e.Type, e.Reason, e.Message}
}

var (
	_ runtime.ProbeRecorder = (*Recorder)(nil)
	_ runtime.ProbeRecorder = unlogged{}
	_ runtime.ProbeRecorder = tee{}
)

// New returns a Recorder holding up to size events (default 1000).
func New(size int, log *slog.Logger, clk clock.PassiveClock) *Recorder {
	if size <= 0 {
		size = 1000
	}
	if log == nil {
		log = slog.Default()
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Recorder{clock: clk, log: log, size: size, ring: make([]Event, size), kept: map[eventKey]int{}}
}

// Eventf records an event about object (a *v1.ObjectReference or *v1.Pod)
// and logs it. The message is redacted (runtime/redact: URL query values,
// credential pairs, auth header values) and cut to bound.MessageBytes
// before it is kept or logged, whoever sent it.
func (r *Recorder) Eventf(object k8sruntime.Object, eventtype, reason, messageFmt string, args ...interface{}) {
	r.record(true, 0, object, eventtype, reason, messageFmt, args...)
}

// ProbeEventf is Eventf for the event of a probe run, with where the probe
// is declared (runtime.ProbeRecorder): kept as Event.Origin and logged.
func (r *Recorder) ProbeEventf(origin runtime.Origin, object k8sruntime.Object, eventtype, reason, messageFmt string, args ...interface{}) {
	r.record(true, origin, object, eventtype, reason, messageFmt, args...)
}

// Unlogged returns a recorder that records into the same ring as r,
// redacted and cut alike, without logging: for the runtime's event of each
// failed run (K4), which the agent logs through package runlog instead.
func (r *Recorder) Unlogged() runtime.Recorder { return unlogged{r} }

type unlogged struct{ r *Recorder }

func (u unlogged) Eventf(object k8sruntime.Object, eventtype, reason, messageFmt string, args ...interface{}) {
	u.r.record(false, 0, object, eventtype, reason, messageFmt, args...)
}

func (u unlogged) ProbeEventf(origin runtime.Origin, object k8sruntime.Object, eventtype, reason, messageFmt string, args ...interface{}) {
	u.r.record(false, origin, object, eventtype, reason, messageFmt, args...)
}

func (r *Recorder) record(log bool, origin runtime.Origin, object k8sruntime.Object, eventtype, reason, messageFmt string, args ...interface{}) {
	now := r.clock.Now()
	ev := Event{Time: now, FirstTime: now, Type: eventtype, Reason: reason, Count: 1, Origin: origin.String(),
		Message: bound.Cut(redact.Text(fmt.Sprintf(messageFmt, args...)), bound.MessageBytes)}
	switch o := object.(type) {
	case *v1.ObjectReference:
		ev.Namespace, ev.Pod, ev.PodUID, ev.FieldPath = o.Namespace, o.Name, string(o.UID), o.FieldPath
	case *v1.Pod:
		ev.Namespace, ev.Pod, ev.PodUID = o.Namespace, o.Name, string(o.UID)
	}
	if log {
		level := slog.LevelInfo
		if eventtype == v1.EventTypeWarning {
			level = slog.LevelWarn
		}
		attrs := []any{"type", ev.Type, "reason", ev.Reason, "pod", ev.Namespace + "/" + ev.Pod, "object", ev.FieldPath}
		if ev.Origin != "" {
			attrs = append(attrs, "origin", ev.Origin)
		}
		r.log.Log(context.Background(), level, "event", append(attrs, "message", ev.Message)...)
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	k := keyOf(&ev)
	if i, ok := r.kept[k]; ok {
		r.ring[i].Count++
		r.ring[i].Time = ev.Time
		return
	}
	if r.full {
		old := keyOf(&r.ring[r.next])
		if r.kept[old] == r.next {
			delete(r.kept, old)
		}
	}
	r.ring[r.next] = ev
	r.kept[k] = r.next
	r.next = (r.next + 1) % r.size
	if r.next == 0 {
		r.full = true
	}
}

// List returns the recorded events, oldest first.
func (r *Recorder) List() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.full {
		return append([]Event(nil), r.ring[:r.next]...)
	}
	out := make([]Event, 0, r.size)
	out = append(out, r.ring[r.next:]...)
	return append(out, r.ring[:r.next]...)
}
