// Package gate is the readiness-gate condition writer of cluster mode: for
// every pod of the node that lists probed's condition type in
// spec.readinessGates (KEP-580; default probed.io/ready), it keeps that one
// pod condition equal to what the pod's annotation probes decide, and
// writes nothing else. The kubelet derives Ready from the gate (Ready is True
// only when ContainersReady is and every gate condition is True), so probed
// never writes Ready.
//
// The way of a wanted condition: a readiness or startup result changes (the Writer is
// a verdicts.Consumer) or the informer's pod changes (a pods.Listener) → the
// pod's UID is added to a rate-limited work queue (a key, not a value: a
// pod changing ten times while it waits is written once, with its latest
// condition) → a worker takes the key, looks the pod up as the informer holds
// it, computes the condition (Decide) and, when status, reason or message
// differ from the pod's condition, takes a token from the write bucket
// (--status-qps, --status-burst), computes again and sends a strategic-merge
// patch of that condition alone to the status subresource, with the pod's UID
// as precondition. lastTransitionTime moves only when the status flips.
//
// Failures: a pod that is gone (404) or was recreated under its name (the UID
// precondition fails) is dropped; anything else (the API server down,
// throttling, timeouts) is retried per pod with exponential backoff, capped,
// while further changes of that pod only wait for the scheduled retry (they
// coalesce). When the server is back every gated pod's condition equals its
// current condition.
//
// Restarts: a condition is not known while a deciding probe has no result,
// e.g. for a container that survived a restart of probed (W6c gives it no
// initial result); then the pod's condition is kept as it is until probed's
// first verdict, as the kubelet keeps Ready across its own restart (M8, M9):
// a rollout of probed never flips healthy pods. Stopping (Run's context
// ends, e.g. SIGTERM) sends no new write at all.
package gate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/probed/probed/agent/pods"
	"github.com/probed/probed/agent/verdicts"
	"github.com/probed/probed/manager/customprobe"
	"github.com/probed/probed/manager/podprobes"
	"github.com/probed/probed/manager/results"
	"github.com/probed/probed/runtime"
)

// DefaultConditionType is the pod condition type probed owns unless told
// otherwise (--readiness-gate).
const DefaultConditionType v1.PodConditionType = "probed.io/ready"

// Defaults of Options.
const (
	// DefaultQPS and DefaultBurst: the write bucket, 5 patches a second
	// with bursts of 10 (the kubelet's own client defaults to 50/100 for
	// all its requests; condition writes of one node agent need far less,
	// and a zone-wide flip must not hit the API server with every node's
	// pods at once).
	DefaultQPS   = 5
	DefaultBurst = 10
	// DefaultWorkers sends up to two patches at a time, so one slow
	// request does not hold the others back.
	DefaultWorkers = 2
	// DefaultRetryBaseDelay and DefaultRetryMaxDelay bound a pod's retry
	// backoff after a failed write: 100 ms doubling up to 30 s.
	DefaultRetryBaseDelay = 100 * time.Millisecond
	DefaultRetryMaxDelay  = 30 * time.Second
	// DefaultRequestTimeout bounds one patch request.
	DefaultRequestTimeout = 10 * time.Second
	// FieldManager is the field manager of probed's writes.
	FieldManager = "probed"
)

// PodLookup gives the pod with a UID as the informer holds it, status
// included (the kubelet's), or false when it is gone. It must be cheap and
// must not block: it is called from the results fan-out's goroutine.
type PodLookup interface {
	Pod(uid types.UID) (*v1.Pod, bool)
}

// PodLookupFunc adapts a function to PodLookup.
type PodLookupFunc func(uid types.UID) (*v1.Pod, bool)

// Pod calls f.
func (f PodLookupFunc) Pod(uid types.UID) (*v1.Pod, bool) { return f(uid) }

// Options configure a Writer.
type Options struct {
	// Pods looks pods up by UID (required): podsource's Statuses.Pod.
	Pods PodLookup
	// Client sends the patches (required).
	Client kubernetes.Interface
	// Readiness and Startup are the prober manager's results managers
	// (required).
	Readiness, Startup results.Manager
	// ConditionType is the condition probed owns; default
	// DefaultConditionType. It must be a qualified name and not one of the
	// kubelet's conditions (Ready, ContainersReady, ...).
	ConditionType v1.PodConditionType
	// QPS (patches per second) and Burst size the write bucket shared by
	// all pods; zero or less: DefaultQPS, DefaultBurst.
	QPS   float64
	Burst int
	// Workers is how many patches may be in flight; default
	// DefaultWorkers.
	Workers int
	// RetryBaseDelay and RetryMaxDelay bound the per-pod backoff of failed
	// writes; defaults DefaultRetryBaseDelay, DefaultRetryMaxDelay.
	RetryBaseDelay, RetryMaxDelay time.Duration
	// RequestTimeout bounds one patch; default DefaultRequestTimeout.
	RequestTimeout time.Duration
	// Probes returns the probes probed runs for a pod, as the agent worked
	// them out where the pod came in (reconciler.Probes: podprobes.View,
	// the mode's policy applied, so a probe that never runs does not hold
	// the condition back), or false when it does not know the pod: then
	// nothing is written. Default: the view worked out from the pod on
	// each condition with cluster mode's policy without limits
	// (podprobes.Cluster: the kubelet runs the spec's probes), for a
	// Writer used alone.
	Probes func(pod *v1.Pod) (*podprobes.View, bool)
	// Refusal, when set, says why a pod's condition must be False whatever
	// its probes' results (cluster mode: agent/kube/limits, a pod whose
	// view refuses a readiness or startup probe, or a pod over the node's
	// probe budget): the condition then carries that reason and message.
	// The message must be short (it is written as it is).
	Refusal func(pod *v1.Pod, probes *podprobes.View) (reason, message string, refused bool)
	// Guard, when set, decorates the condition of a pod with known probes
	// (after Refusal and Decide): the one place where a condition may be
	// kept from flipping for a reason beyond the pod (cluster mode: the
	// readiness panic threshold, agent/kube/panicthreshold). It is called
	// once or twice per write the writer plans, from its workers, and must
	// not block. Requeue asks the writer to decide a pod again when what
	// the guard reads changed.
	Guard func(pod *v1.Pod, v Condition) Condition
	// ProberStart is when the prober manager started (W6c); zero: the
	// clock's now when New is called.
	ProberStart time.Time
	// Clock drives lastTransitionTime, the write bucket and the retry
	// backoff; nil: the real clock.
	Clock clock.WithTicker
	// Registerer takes the writer's metrics; nil: none registered.
	Registerer prometheus.Registerer
	// Logger; nil: slog.Default().
	Logger *slog.Logger
}

// kubeletConditions are the pod conditions the kubelet (or the scheduler
// and the disruption controller) owns: probed never writes them.
var kubeletConditions = map[v1.PodConditionType]bool{
	v1.PodReady: true, v1.ContainersReady: true, v1.PodInitialized: true, v1.PodScheduled: true,
	v1.PodReadyToStartContainers: true, v1.DisruptionTarget: true,
	v1.PodResizePending: true, v1.PodResizeInProgress: true,
}

// Writer keeps the readiness-gate condition of the gated pods equal to
// their verdicts. It implements verdicts.Consumer and pods.Listener; all its
// methods are safe for concurrent use. Run it once.
type Writer struct {
	opts        Options
	clock       clock.WithTicker
	log         *slog.Logger
	bucket      *rate.Limiter
	proberStart time.Time
	metrics     *metrics

	mu sync.Mutex
	// queue is nil until Run: keys added before wait in pending.
	queue            workqueue.TypedRateLimitingInterface[types.UID]
	started, stopped bool
	// pending: pods whose condition may still need a write, with the
	// sequence number of their latest enqueue (a worker that finishes
	// with an older one leaves the entry).
	pending map[types.UID]uint64
	seq     uint64
	// retrying: pods with a retry scheduled in the queue; a change of
	// such a pod waits for that retry (coalescing) instead of being sent
	// at once past the backoff.
	retrying map[types.UID]bool
	// sent: the condition last written per pod and the resourceVersion
	// of the informer's pod it was based on. While the informer still
	// holds that version it has not seen the write, and the sent condition
	// is the pod's current one; this saves a second identical write in the
	// informer's lag.
	sent map[types.UID]sentCondition
	// failing: the latest write failed with a retryable error (logged on
	// the change only).
	failing bool
}

type sentCondition struct {
	baseResourceVersion string
	condition           v1.PodCondition
}

var (
	_ verdicts.Consumer = (*Writer)(nil)
	_ pods.Listener     = (*Writer)(nil)
)

// New returns a Writer. It starts nothing: Run does.
func New(opts Options) (*Writer, error) {
	if opts.Pods == nil || opts.Client == nil || opts.Readiness == nil || opts.Startup == nil {
		return nil, errors.New("gate: Options.Pods, Client, Readiness and Startup are required")
	}
	if opts.ConditionType == "" {
		opts.ConditionType = DefaultConditionType
	}
	if errs := validation.IsQualifiedName(string(opts.ConditionType)); len(errs) > 0 {
		return nil, fmt.Errorf("gate: readiness gate condition type %q: %v", opts.ConditionType, errs)
	}
	if kubeletConditions[opts.ConditionType] {
		return nil, fmt.Errorf("gate: readiness gate condition type %q is the kubelet's; probed writes only a condition of its own", opts.ConditionType)
	}
	if opts.QPS <= 0 {
		opts.QPS = DefaultQPS
	}
	if opts.Burst <= 0 {
		opts.Burst = DefaultBurst
	}
	if opts.Workers <= 0 {
		opts.Workers = DefaultWorkers
	}
	if opts.RetryBaseDelay <= 0 {
		opts.RetryBaseDelay = DefaultRetryBaseDelay
	}
	if opts.RetryMaxDelay <= 0 {
		opts.RetryMaxDelay = DefaultRetryMaxDelay
	}
	if opts.RetryMaxDelay < opts.RetryBaseDelay {
		opts.RetryMaxDelay = opts.RetryBaseDelay
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = DefaultRequestTimeout
	}
	if opts.Probes == nil {
		opts.Probes = viewOf
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	w := &Writer{
		opts:        opts,
		clock:       opts.Clock,
		log:         opts.Logger,
		bucket:      rate.NewLimiter(rate.Limit(opts.QPS), opts.Burst),
		proberStart: opts.ProberStart,
		pending:     map[types.UID]uint64{},
		retrying:    map[types.UID]bool{},
		sent:        map[types.UID]sentCondition{},
	}
	if w.proberStart.IsZero() {
		w.proberStart = opts.Clock.Now()
	}
	m, err := newMetrics(opts.Registerer, w)
	if err != nil {
		return nil, err
	}
	w.metrics = m
	return w, nil
}

// viewOf is the default Options.Probes.
func viewOf(pod *v1.Pod) (*podprobes.View, bool) {
	return podprobes.Of(pod, podprobes.Cluster(customprobe.Options{}, "")), true
}

// ConditionType returns the condition type the writer owns.
func (w *Writer) ConditionType() v1.PodConditionType { return w.opts.ConditionType }

// ProbeResult queues the pod of a readiness or startup result change
// (verdicts.Consumer); liveness results do not decide readiness.
func (w *Writer) ProbeResult(t runtime.ProbeType, u results.Update) {
	if t != runtime.Readiness && t != runtime.Startup {
		return
	}
	if pod, ok := w.opts.Pods.Pod(u.PodUID); ok && HasGate(pod, w.opts.ConditionType) {
		w.enqueue(u.PodUID)
	}
}

// PodAdded queues a new gated pod (pods.Listener): probed's first verdict for
// it, or nothing while it is not known.
func (w *Writer) PodAdded(p *pods.Pod) { w.podChanged(p) }

// PodStatusChanged queues a gated pod whose status changed (pods.Listener):
// a new container ID, a container that stopped, or its condition changed by
// someone else.
func (w *Writer) PodStatusChanged(p *pods.Pod) { w.podChanged(p) }

func (w *Writer) podChanged(p *pods.Pod) {
	if p != nil && p.Pod != nil && HasGate(p.Pod, w.opts.ConditionType) {
		w.enqueue(p.Pod.UID)
	}
}

// PodRemoved forgets the pod (pods.Listener); a key of it still queued finds
// the pod gone and is dropped.
func (w *Writer) PodRemoved(p *pods.Pod) {
	if p == nil || p.Pod == nil {
		return
	}
	uid := p.Pod.UID
	w.mu.Lock()
	delete(w.pending, uid)
	delete(w.retrying, uid)
	delete(w.sent, uid)
	q := w.queue
	w.mu.Unlock()
	if q != nil {
		q.Forget(uid)
	}
}

// WritesPending returns how many gated pods may still need a condition
// write: queued, being written, or waiting for a retry (for /healthz
// details, metrics and the status page). It is zero when every gated pod's
// written condition equals the wanted one as far as the writer knows.
func (w *Writer) WritesPending() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.pending)
}

// WritesFailing reports whether the last condition write went unanswered
// or failed for a reason worth retrying (a transport error, a timeout, a
// 5xx or 429): writes are then retried with backoff until one succeeds.
// It is the status page's view of the API server connection.
func (w *Writer) WritesFailing() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.failing
}

// queueDepth is the number of pods queued and not yet taken by a worker.
func (w *Writer) queueDepth() int {
	w.mu.Lock()
	q := w.queue
	w.mu.Unlock()
	if q == nil {
		return 0
	}
	return q.Len()
}

func (w *Writer) enqueue(uid types.UID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	w.seq++
	w.pending[uid] = w.seq
	if w.queue != nil && !w.retrying[uid] {
		w.queue.Add(uid)
	}
}

// Run writes conditions until ctx is done, then stops its workers and
// returns nil. A write in flight when ctx ends is cancelled or completes;
// no write starts after. Run may be called once.
func (w *Writer) Run(ctx context.Context) error {
	w.mu.Lock()
	if w.started {
		w.mu.Unlock()
		return errors.New("gate: Run called twice")
	}
	w.started = true
	q := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](w.opts.RetryBaseDelay, w.opts.RetryMaxDelay),
		workqueue.TypedRateLimitingQueueConfig[types.UID]{Clock: w.clock},
	)
	w.queue = q
	for uid := range w.pending {
		q.Add(uid)
	}
	w.mu.Unlock()

	var wg sync.WaitGroup
	for range w.opts.Workers {
		wg.Go(func() {
			for w.processNext(ctx, q) {
			}
		})
	}
	<-ctx.Done()
	w.mu.Lock()
	w.stopped = true
	w.mu.Unlock()
	q.ShutDown()
	wg.Wait()
	return nil
}

// outcome is what became of one key.
type outcome int

const (
	settled  outcome = iota // written, nothing to write, or dropped
	retry                   // a retryable failure: back off and try again
	stopping                // ctx ended: nothing more is done
)

// processNext handles one key; false when the queue is shut down.
func (w *Writer) processNext(ctx context.Context, q workqueue.TypedRateLimitingInterface[types.UID]) bool {
	uid, shutdown := q.Get()
	if shutdown {
		return false
	}
	defer q.Done(uid)
	w.mu.Lock()
	delete(w.retrying, uid)
	seq := w.pending[uid]
	w.mu.Unlock()

	switch w.sync(ctx, uid) {
	case settled:
		q.Forget(uid)
		w.mu.Lock()
		if s, ok := w.pending[uid]; ok && s == seq {
			delete(w.pending, uid)
		}
		w.mu.Unlock()
	case retry:
		w.mu.Lock()
		if _, ok := w.pending[uid]; ok && !w.stopped {
			w.retrying[uid] = true
		}
		w.mu.Unlock()
		q.AddRateLimited(uid)
	case stopping:
	}
	return true
}

// write is one planned patch.
type write struct {
	namespace, name     string
	uid                 types.UID
	baseResourceVersion string
	condition           v1.PodCondition
}

// plan computes the pod's condition and returns the write it needs, if any.
func (w *Writer) plan(uid types.UID) (write, bool) {
	pod, ok := w.opts.Pods.Pod(uid)
	if !ok || !HasGate(pod, w.opts.ConditionType) {
		return write{}, false
	}
	probes, ok := w.opts.Probes(pod)
	if !ok {
		return write{}, false // the reconciler does not know it (yet, or any more)
	}
	v := w.condition(pod, probes)
	if !v.Known {
		return write{}, false // keep the pod's condition (M8, M9 analogue)
	}
	current, have := w.current(pod)
	if have && sameCondition(current, v) {
		return write{}, false
	}
	return write{
		namespace: pod.Namespace, name: pod.Name, uid: pod.UID,
		baseResourceVersion: pod.ResourceVersion,
		condition:           newCondition(w.opts.ConditionType, v, current, have, metav1.NewTime(w.clock.Now())),
	}, true
}

// condition is the pod's refusal (Options.Refusal), else Decide's condition as
// Options.Guard decorates it.
func (w *Writer) condition(pod *v1.Pod, probes *podprobes.View) Condition {
	if w.opts.Refusal != nil {
		if reason, msg, refused := w.opts.Refusal(pod, probes); refused {
			return Condition{Known: true, Status: v1.ConditionFalse, Reason: reason, Message: msg}
		}
	}
	v := Decide(pod, probes, Results{Readiness: w.opts.Readiness, Startup: w.opts.Startup}, w.proberStart)
	if w.opts.Guard != nil && v.Known {
		v = w.opts.Guard(pod, v)
	}
	return v
}

// Requeue asks the writer to decide the pod's condition again (Guard's
// input changed); a pod without the gate, or gone, is dropped when its
// key is taken.
func (w *Writer) Requeue(uid types.UID) { w.enqueue(uid) }

// current returns the pod's condition: the one last sent while the
// informer has not moved past the pod version that write was based on,
// else the informer's.
func (w *Writer) current(pod *v1.Pod) (v1.PodCondition, bool) {
	w.mu.Lock()
	s, ok := w.sent[pod.UID]
	if ok && s.baseResourceVersion != pod.ResourceVersion {
		delete(w.sent, pod.UID)
		ok = false
	}
	w.mu.Unlock()
	if ok {
		return s.condition, true
	}
	return findCondition(pod, w.opts.ConditionType)
}

// sync brings one pod's written condition to the wanted one.
func (w *Writer) sync(ctx context.Context, uid types.UID) outcome {
	if ctx.Err() != nil {
		return stopping
	}
	if _, ok := w.plan(uid); !ok {
		return settled
	}
	if err := w.takeToken(ctx); err != nil {
		return stopping
	}
	// Latest wins: the condition may have changed while waiting.
	wr, ok := w.plan(uid)
	if !ok {
		return settled
	}
	if ctx.Err() != nil {
		return stopping
	}
	return w.send(ctx, wr)
}

// takeToken waits on the injected clock for a token of the write bucket.
func (w *Writer) takeToken(ctx context.Context) error {
	now := w.clock.Now()
	r := w.bucket.ReserveN(now, 1)
	delay := r.DelayFrom(now)
	if delay <= 0 {
		return nil
	}
	t := w.clock.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		r.CancelAt(w.clock.Now())
		return ctx.Err()
	}
}

// send patches the condition and classifies the result.
func (w *Writer) send(ctx context.Context, wr write) outcome {
	data, err := statusPatchFor(wr.uid, wr.condition)
	if err != nil { // cannot happen: plain strings and a time
		w.log.Error("readiness gate: building the status patch", "pod", wr.namespace+"/"+wr.name, "err", err)
		return settled
	}
	reqCtx, cancel := context.WithTimeout(ctx, w.opts.RequestTimeout)
	defer cancel()
	_, err = w.opts.Client.CoreV1().Pods(wr.namespace).Patch(reqCtx, wr.name, types.StrategicMergePatchType, data,
		metav1.PatchOptions{FieldManager: FieldManager}, "status")
	pod := wr.namespace + "/" + wr.name
	if err == nil {
		w.metrics.patches.Inc()
		w.mu.Lock()
		w.sent[wr.uid] = sentCondition{baseResourceVersion: wr.baseResourceVersion, condition: wr.condition}
		recovered := w.failing
		w.failing = false
		w.mu.Unlock()
		if recovered {
			w.log.Info("readiness gate: condition writes succeed again", "pendingWrites", w.WritesPending())
		}
		w.log.Debug("readiness gate: condition written", "pod", pod, "condition", string(wr.condition.Type),
			"status", string(wr.condition.Status), "reason", wr.condition.Reason)
		return settled
	}
	if ctx.Err() != nil {
		return stopping
	}
	w.metrics.failures.WithLabelValues(failureReason(err)).Inc()
	switch {
	case apierrors.IsNotFound(err):
		w.log.Debug("readiness gate: pod gone, condition not written", "pod", pod)
		return settled
	case apierrors.IsConflict(err), apierrors.IsInvalid(err):
		// The UID precondition failed (the pod was deleted and recreated
		// under its name; the new pod is a key of its own), or the server
		// will never take this patch: retrying cannot help.
		w.log.Warn("readiness gate: condition write refused, not retried", "pod", pod, "uid", string(wr.uid), "err", err)
		return settled
	}
	w.mu.Lock()
	first := !w.failing
	w.failing = true
	w.mu.Unlock()
	if first {
		w.log.Warn("readiness gate: condition write failed; retrying with backoff", "pod", pod, "err", err)
	} else {
		w.log.Debug("readiness gate: condition write failed; retrying with backoff", "pod", pod, "err", err)
	}
	return retry
}

// failureReason labels a failed patch: the API status reason
// ("Conflict", "NotFound", "TooManyRequests", "InternalError",
// "ServiceUnavailable", ...), "Timeout" for a request that ran out of time
// on our side, "Transport" for one that got no answer.
func failureReason(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		if r := status.Status().Reason; r != "" {
			return string(r)
		}
		return "Unknown"
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "Timeout"
	}
	return "Transport"
}
