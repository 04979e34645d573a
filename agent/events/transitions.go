package events

import (
	"sync"
	"time"

	"github.com/probed/probed/manager"
	"github.com/probed/probed/runtime/bound"
	"github.com/probed/probed/runtime/redact"
)

// Transition is one entry of the health-event log (Envoy's
// health check event log): a probe's verdict changed. It is served by GET
// /events?type=transition and printed by `probed events`, one JSON object
// per line.
type Transition struct {
	// Seq numbers the entries of the agent's log from 1, oldest first: a
	// reader asks for the entries after the last Seq it saw (?since=).
	Seq         uint64 `json:"seq"`
	Namespace   string `json:"namespace"`
	Pod         string `json:"pod"`
	PodUID      string `json:"podUID"`
	Container   string `json:"container"`
	ContainerID string `json:"containerID"`
	Probe       string `json:"probe"` // liveness, readiness, startup
	// Origin is where the probe is declared: spec or annotation
	// (probed.io/probes).
	Origin  string `json:"origin,omitempty"`
	Handler string `json:"handler"` // http, tcp, exec, grpc or a plugin kind
	// From and To are the verdicts before and after: UNKNOWN before the
	// container instance's first verdict, then Success or Failure.
	From string `json:"from"`
	To   string `json:"to"`
	// Run is the run that decided it.
	Run TransitionRun `json:"run"`
	// FirstCheck: that run was the container instance's first.
	FirstCheck bool `json:"firstCheck"`
	// TimeToFirstSuccessSeconds is the time from the container's start to
	// this verdict, on its first Success verdict (absent otherwise, and for
	// a container that started before the agent).
	TimeToFirstSuccessSeconds float64 `json:"timeToFirstSuccessSeconds,omitempty"`
}

// TransitionList is the body of GET /events?type=transition.
type TransitionList struct {
	// Transitions are the health-event log's entries after ?since, oldest
	// first.
	Transitions []Transition `json:"transitions"`
	// Last is the Seq of the newest entry ever logged: lower than ?since
	// when the agent started again.
	Last uint64 `json:"last"`
}

// TransitionRun is the run that decided a transition.
type TransitionRun struct {
	Time      time.Time `json:"time"`      // its start
	LatencyMS float64   `json:"latencyMs"` // its duration, in milliseconds
	Result    string    `json:"result"`    // success, warning, failure
	Attempts  int       `json:"attempts"`
	// Message is the failure or warning text, redacted and cut as every
	// message (runtime/redact, runtime/bound); never a response body.
	Message string `json:"message,omitempty"`
}

// Transitions keeps the last Size verdict changes of the node's probes:
// the health-event log. It is a manager.Observer (only runs that changed a
// verdict enter it) and safe for concurrent use.
type Transitions struct {
	size int

	mu   sync.Mutex
	ring []Transition
	next int
	full bool
	seq  uint64
}

// NewTransitions returns a log keeping size entries (default 1000).
func NewTransitions(size int) *Transitions {
	if size <= 0 {
		size = 1000
	}
	return &Transitions{size: size, ring: make([]Transition, size)}
}

var _ manager.Observer = (*Transitions)(nil)

// ProbeRan implements manager.Observer: a run that changed its probe's
// verdict (RunRecord.Transition) becomes an entry.
func (l *Transitions) ProbeRan(r manager.RunRecord) {
	if !r.Transition {
		return
	}
	t := Transition{
		Namespace: r.Namespace, Pod: r.PodName, PodUID: string(r.PodUID), Container: r.ContainerName, ContainerID: r.ContainerID,
		Probe: r.ProbeType.Lower(), Origin: r.Origin.String(), Handler: r.Kind, From: r.Previous.String(), To: r.Cached.String(), FirstCheck: r.FirstCheck,
		TimeToFirstSuccessSeconds: r.TimeToFirstSuccess.Seconds(),
		Run: TransitionRun{Time: r.Start, LatencyMS: float64(r.Duration.Microseconds()) / 1000, Result: r.Result.String(), Attempts: r.Attempts,
			Message: bound.Cut(redact.Text(r.Message), bound.MessageBytes)},
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seq++
	t.Seq = l.seq
	l.ring[l.next] = t
	l.next = (l.next + 1) % l.size
	if l.next == 0 {
		l.full = true
	}
}

// Since returns the entries after seq (0: all kept), oldest first, and
// the Seq of the newest entry ever logged (0: none), by which a reader
// tells an agent that started again (its Seq went back).
func (l *Transitions) Since(seq uint64) ([]Transition, uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := []Transition{}
	add := func(ts []Transition) {
		for _, t := range ts {
			if t.Seq > seq {
				out = append(out, t)
			}
		}
	}
	if l.full {
		add(l.ring[l.next:])
	}
	add(l.ring[:l.next])
	return out, l.seq
}
