// Package kevents has one job: probe events to the API server. Its Recorder
// implements runtime.Recorder (the Eventf the runtime, the manager and the
// agent emit spec K4 events through) and sends each event as an
// events.k8s.io/v1 Event through k8s.io/client-go/tools/events, the event
// library of new-style components (kube-scheduler):
//
//   - reportingController is probed.io/agent, reportingInstance the node name;
//   - regarding is the object the event concerns, as given: a container
//     reference from runtime.ContainerRef (so regarding.fieldPath is
//     spec.containers{app}, spec.initContainers{sidecar} for a sidecar) or a
//     *v1.Pod; its resourceVersion is dropped, so the pod's status writes
//     (every condition probed or the kubelet writes) do not split a series;
//   - type, reason and note are the kubelet's (K4: Unhealthy, ProbeWarning,
//     ...), the note cut to the API's 1,024-byte limit;
//   - action says what probed was doing: ActionFor maps the reason (and, for
//     the prober's K4 events, the probe named at the start of the message);
//   - the event of a probe run (ProbeEventf) carries the label
//     LabelOrigin: where its probe is declared, spec or annotation
//     (kubectl get events -l probed.io/probe-origin=annotation). Its note
//     stays the kubelet's or probed's text.
//
// # Flood control
//
// Three bounds stand between a flapping probe and the API server, in order:
//
//  1. A per-object token bucket, as the legacy tools/record spam filter: each
//     object (the pod: namespace, name and UID, whatever the container) may
//     send a burst of 25 events, refilled at one per 5 minutes. The buckets
//     live in an LRU of 4,096 objects, so memory is bounded.
//  2. A node-wide token bucket: 2 events per second, burst 50.
//  3. tools/events' own series: an event isomorphic to a recent one (same
//     regarding, reason, action, type) is not written again but counted into
//     its EventSeries; the series is patched on its second occurrence, then
//     every 30 minutes while it lasts and once more when it ends (6 minutes
//     quiet). Its note stays the first occurrence's.
//
// An event dropped by a bucket is still in the local ring and log (the agent
// records through events.Tee); Dropped counts them. Eventf never blocks.
package kevents

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/clock"
	"k8s.io/utils/lru"

	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/bound"
)

// ReportingController is the reportingController of every event probed
// writes.
const ReportingController = "probed.io/agent"

// NoteLengthLimit is the API server's limit on an events.k8s.io/v1 note
// (k8s.io/kubernetes pkg/apis/core/validation NoteLengthLimit): a longer
// note is cut (runtime/bound, keeping both ends), so a long probe output
// never gets the event rejected.
const NoteLengthLimit = bound.MessageBytes

// Defaults of Options (documented in docs/cluster.md "Events").
const (
	DefaultPerObjectBurst  = 25              // tools/record's spam filter burst
	DefaultPerObjectRefill = 5 * time.Minute // tools/record's spam filter: 1 per 5 min
	DefaultQPS             = 2               // node-wide events per second
	DefaultBurst           = 50              // node-wide burst
	DefaultMaxObjects      = 4096            // tools/record's LRU size
	DefaultFlushTimeout    = 5 * time.Second // bound of the flush at shutdown
)

// LabelOrigin is the label of a probe run's Event that says where the probe
// is declared: "spec" (the container's own), "annotation"
// (probed.io/probes) or "offloaded" (a container's own probe the offload
// webhook moved into probed's care, probed.io/offloaded).
const LabelOrigin = "probed.io/probe-origin"

// Actions (events.k8s.io/v1 action: what the reporting controller was doing).
const (
	ActionLivenessProbe  = "LivenessProbe"
	ActionReadinessProbe = "ReadinessProbe"
	ActionStartupProbe   = "StartupProbe"
	ActionProbing        = "Probing"  // any other probe event (a bad annotation, ...)
	ActionEvicting       = "Evicting" // eviction events of package kube/evict
)

// Options configure a Recorder. Zero values take the defaults above.
type Options struct {
	// Client sends the events (EventsV1). Required.
	Client kubernetes.Interface
	// NodeName is the reportingInstance. Required.
	NodeName string
	// Clock drives the token buckets (a fake clock in tests).
	Clock clock.PassiveClock
	// PerObjectBurst and PerObjectRefill: each object's bucket holds
	// PerObjectBurst events and gains one every PerObjectRefill.
	PerObjectBurst  int
	PerObjectRefill time.Duration
	// QPS and Burst bound the node's events per second.
	QPS   float32
	Burst int
	// MaxObjects bounds the per-object buckets kept (least recently used
	// first out).
	MaxObjects int
	// FlushTimeout bounds how long Run waits, after its context ends, for
	// events already accepted to be written.
	FlushTimeout time.Duration
	// Logger receives the drop and shutdown lines (default slog.Default()).
	Logger *slog.Logger
}

var _ runtime.ProbeRecorder = (*Recorder)(nil)

// Recorder sends probe events to the API server. Create it with New; Run
// owns its goroutines and stops them.
type Recorder struct {
	opts        Options
	broadcaster events.EventBroadcaster
	recorder    events.EventRecorder
	sink        *sink
	global      flowcontrol.PassiveRateLimiter

	mu         sync.Mutex
	objects    *lru.Cache // namespace/name/UID -> flowcontrol.PassiveRateLimiter
	started    bool       // Run was called
	accepting  bool       // from New until Run's context ends
	cancelSink context.CancelFunc

	dropped atomic.Uint64
}

// New returns a Recorder for opts, sending from now on. New starts
// tools/events' goroutines, which Run stops: call Run (with a cancelled
// context if the agent never starts). Errors: a missing Client or NodeName,
// a NodeName longer than the API's 128 bytes.
func New(opts Options) (*Recorder, error) {
	if opts.Client == nil {
		return nil, fmt.Errorf("kevents: no API client")
	}
	if opts.NodeName == "" {
		return nil, fmt.Errorf("kevents: no node name (the events' reportingInstance)")
	}
	if len(opts.NodeName) > 128 {
		return nil, fmt.Errorf("kevents: node name %q is longer than a reportingInstance may be (128)", opts.NodeName)
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.PerObjectBurst <= 0 {
		opts.PerObjectBurst = DefaultPerObjectBurst
	}
	if opts.PerObjectRefill <= 0 {
		opts.PerObjectRefill = DefaultPerObjectRefill
	}
	if opts.QPS <= 0 {
		opts.QPS = DefaultQPS
	}
	if opts.Burst <= 0 {
		opts.Burst = DefaultBurst
	}
	if opts.MaxObjects <= 0 {
		opts.MaxObjects = DefaultMaxObjects
	}
	if opts.FlushTimeout <= 0 {
		opts.FlushTimeout = DefaultFlushTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &sink{inner: &events.EventSinkImpl{Interface: opts.Client.EventsV1()}, instance: opts.NodeName, origins: lru.New(opts.MaxObjects)}
	b := events.NewBroadcaster(s)
	r := &Recorder{
		opts:        opts,
		broadcaster: b,
		recorder:    b.NewRecorder(scheme.Scheme, ReportingController),
		sink:        s,
		global:      flowcontrol.NewTokenBucketPassiveRateLimiterWithClock(opts.QPS, opts.Burst, opts.Clock),
		objects:     lru.New(opts.MaxObjects),
	}
	// Recording starts here, so events emitted before Run's goroutine is
	// scheduled are not lost (tools/events drops events nobody watches).
	// The sink's context outlives Run's by the flush.
	sinkCtx, cancelSink := context.WithCancel(context.Background())
	if err := b.StartRecordingToSinkWithContext(sinkCtx); err != nil {
		cancelSink()
		b.Shutdown()
		return nil, fmt.Errorf("kevents: start recording: %w", err)
	}
	r.cancelSink = cancelSink
	r.accepting = true
	return r, nil
}

// Run waits until ctx ends, then stops accepting events, flushes those
// already accepted for at most FlushTimeout, and stops every goroutine New
// and tools/events started. It returns nil; an error only if called twice.
func (r *Recorder) Run(ctx context.Context) error {
	r.mu.Lock()
	if r.started {
		r.mu.Unlock()
		return fmt.Errorf("kevents: Run called twice")
	}
	r.started = true
	r.mu.Unlock()

	<-ctx.Done()
	r.setAccepting(false)
	r.broadcaster.Shutdown() // delivers the queued events to the sink's watcher
	r.sink.waitIdle(r.opts.FlushTimeout)
	if n := r.sink.inflight.Load(); n > 0 {
		r.opts.Logger.Warn("events: flush bound reached, unsent events dropped", "inFlight", n, "bound", r.opts.FlushTimeout)
	}
	r.cancelSink()
	return nil
}

func (r *Recorder) setAccepting(v bool) {
	r.mu.Lock()
	r.accepting = v
	r.mu.Unlock()
}

// Dropped is the number of events not sent because a token bucket was empty
// or the Recorder was not running.
func (r *Recorder) Dropped() uint64 { return r.dropped.Load() }

// Eventf sends an event about object (a *v1.ObjectReference from
// runtime.ContainerRef, or a *v1.Pod) unless a bucket is empty. It never
// blocks. An event after Run's context ended is dropped (counted in
// Dropped). Other objects than pods and references are logged and dropped.
func (r *Recorder) Eventf(object k8sruntime.Object, eventtype, reason, messageFmt string, args ...interface{}) {
	r.eventf("", object, eventtype, reason, messageFmt, args...)
}

// ProbeEventf is Eventf for the event of a probe run (runtime.ProbeRecorder):
// the Event carries the label LabelOrigin with the probe's origin.
func (r *Recorder) ProbeEventf(origin runtime.Origin, object k8sruntime.Object, eventtype, reason, messageFmt string, args ...interface{}) {
	r.eventf(origin.String(), object, eventtype, reason, messageFmt, args...)
}

func (r *Recorder) eventf(origin string, object k8sruntime.Object, eventtype, reason, messageFmt string, args ...interface{}) {
	regarding, key, ok := reference(object)
	if !ok {
		r.opts.Logger.Warn("events: event about an object that is not a pod or container reference, not sent", "object", fmt.Sprintf("%T", object), "reason", reason)
		return
	}
	note := bound.Cut(fmt.Sprintf(messageFmt, args...), NoteLengthLimit)
	if !r.admit(key) {
		r.dropped.Add(1)
		return
	}
	action := ActionFor(reason, note)
	if origin != "" {
		// tools/events builds the Event; the sink labels it when it
		// creates it (a series' later writes keep the label).
		r.sink.origins.Add(originKey(regarding, reason, action), origin)
	}
	// The note is passed as an argument: a '%' in a probe's output is text.
	r.recorder.Eventf(regarding, nil, eventtype, reason, action, "%s", note)
}

// originKey identifies the Events whose probe's origin the sink labels:
// those of one container (or pod), reason and action, as tools/events
// folds them into one series.
func originKey(regarding *v1.ObjectReference, reason, action string) string {
	return string(regarding.UID) + "\x00" + regarding.FieldPath + "\x00" + reason + "\x00" + action
}

// admit takes a token from the object's bucket, then from the node's; an
// event is sent only when both have one (the object's token is spent even
// when the node's bucket is empty, as tools/record's filter does).
func (r *Recorder) admit(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.accepting {
		return false
	}
	var bucket flowcontrol.PassiveRateLimiter
	if v, ok := r.objects.Get(key); ok {
		bucket = v.(flowcontrol.PassiveRateLimiter)
	} else {
		bucket = flowcontrol.NewTokenBucketPassiveRateLimiterWithClock(float32(time.Second)/float32(r.opts.PerObjectRefill), r.opts.PerObjectBurst, r.opts.Clock)
		r.objects.Add(key, bucket)
	}
	if !bucket.TryAccept() {
		return false
	}
	return r.global.TryAccept()
}

// reference returns the regarding reference for object without its
// resourceVersion, and the key of the object's bucket (the pod).
func reference(object k8sruntime.Object) (*v1.ObjectReference, string, bool) {
	var ref *v1.ObjectReference
	switch o := object.(type) {
	case *v1.ObjectReference:
		if o == nil {
			return nil, "", false
		}
		ref = o.DeepCopy()
	case *v1.Pod:
		if o == nil {
			return nil, "", false
		}
		ref = &v1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: o.Namespace, Name: o.Name, UID: o.UID}
	default:
		return nil, "", false
	}
	ref.ResourceVersion = ""
	return ref, objectKey(ref.Namespace, ref.Name, ref.UID), true
}

func objectKey(namespace, name string, uid types.UID) string {
	return namespace + "/" + name + "/" + string(uid)
}

// ActionFor is the events.k8s.io/v1 action of an event: for the prober's K4
// events (Unhealthy, ProbeWarning), whose message starts with the probe type
// ("Liveness probe failed: ..."), the probe that ran (LivenessProbe,
// ReadinessProbe, StartupProbe), so that one container's liveness and
// readiness failures are two series and not one; Evicting for the eviction
// events of kube/evict; Probing otherwise.
func ActionFor(reason, note string) string {
	switch reason {
	case "Evicted", "EvictionFailed":
		return ActionEvicting
	}
	switch {
	case strings.HasPrefix(note, "Liveness probe"):
		return ActionLivenessProbe
	case strings.HasPrefix(note, "Readiness probe"):
		return ActionReadinessProbe
	case strings.HasPrefix(note, "Startup probe"):
		return ActionStartupProbe
	}
	return ActionProbing
}

// sink is tools/events' EventSink over the typed client, which sets
// reportingInstance to the node name (tools/events' NewRecorder would write
// "probed.io/agent-<hostname>") and counts the writes in flight for the
// flush.
type sink struct {
	inner    events.EventSink
	instance string
	// origins are the probe origins of the events recorded, by originKey
	// (an LRU of MaxObjects: bounded).
	origins  *lru.Cache
	inflight atomic.Int64
	last     atomic.Int64 // unix nanos of the last write's end
}

func (s *sink) begin() func() {
	s.inflight.Add(1)
	return func() {
		s.last.Store(time.Now().UnixNano())
		s.inflight.Add(-1)
	}
}

func (s *sink) Create(ctx context.Context, event *eventsv1.Event) (*eventsv1.Event, error) {
	defer s.begin()()
	event = event.DeepCopy()
	event.ReportingInstance = s.instance
	if origin, ok := s.origins.Get(originKey(&event.Regarding, event.Reason, event.Action)); ok {
		if event.Labels == nil {
			event.Labels = map[string]string{}
		}
		event.Labels[LabelOrigin] = origin.(string)
	}
	return s.inner.Create(ctx, event)
}

func (s *sink) Update(ctx context.Context, event *eventsv1.Event) (*eventsv1.Event, error) {
	defer s.begin()()
	event = event.DeepCopy()
	event.ReportingInstance = s.instance
	return s.inner.Update(ctx, event)
}

func (s *sink) Patch(ctx context.Context, event *eventsv1.Event, data []byte) (*eventsv1.Event, error) {
	defer s.begin()()
	return s.inner.Patch(ctx, event, data)
}

// waitIdle waits, at most bound, until no write is in flight and none has
// ended for a short quiet spell (tools/events starts one goroutine per event,
// which this cannot see before it calls the sink).
func (s *sink) waitIdle(bound time.Duration) {
	const quiet = 100 * time.Millisecond
	deadline := time.Now().Add(bound)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	for time.Now().Before(deadline) {
		idleSince := time.Unix(0, s.last.Load())
		if start.After(idleSince) {
			idleSince = start
		}
		if s.inflight.Load() == 0 && time.Since(idleSince) >= quiet {
			return
		}
		<-tick.C
	}
}
