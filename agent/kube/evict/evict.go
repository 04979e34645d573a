// Package evict has one job: what probed does about a liveness or startup
// probe's failure in cluster mode (issue 10 §2.5). The kubelet owns the
// containers and restarts them only on its own probes; no API lets another
// agent restart a container in place. So the Actuator, per failed container
// instance (container ID), does one of:
//
//   - ActionEvent (the default, --liveness-action=event): one Warning Event
//     on the container (reason LivenessProbeFailed or StartupProbeFailed);
//     the readiness gate (another package) does the rest where it can: it
//     follows readiness and startup probes, not liveness.
//   - ActionEvict (--liveness-action=evict): the same Event, then one
//     Eviction (policy/v1, the pods/eviction subresource, so
//     PodDisruptionBudgets are honoured; never a plain delete) of the pod,
//     with the pod's UID as a precondition so a same-named successor (a
//     StatefulSet's) is never evicted. A 429 (a budget allows no disruption
//     now) is retried with backoff, at least the server's Retry-After, and
//     logged, until the eviction succeeds or the pod is gone; other errors
//     are retried MaxAttempts times, then a Warning EvictionFailed Event. A
//     successful eviction is a Warning Evicted Event.
//
// Evictions act only in the namespaces the operator selects with a label
// selector on the Namespace objects (--liveness-action-namespaces, default
// DefaultNamespaceSelector, probed.io/liveness-actions=enabled): whoever may
// annotate a pod could otherwise have it evicted (issue 17 §6). The labels
// are read through an informer of the selected namespaces only (Run owns
// it); a failure in any other namespace is one Warning Event that says why
// nothing was done. The admission policy shipped in deploy/ refuses the
// agent's evictions outside namespaces with the same label.
//
// Never evicted (the Event says why): DaemonSet pods (an ownerReference of
// kind DaemonSet: the DaemonSet would recreate the pod on the same node),
// static pods (annotation kubernetes.io/config.source other than "api", the
// kubelet's kubetypes.IsStaticPod) and mirror pods (annotation
// kubernetes.io/config.mirror): the API server cannot remove them; critical
// pods (priority at least 2,000,000,000, or class system-node-critical or
// system-cluster-critical), as the descheduler and the kubelet's eviction
// manager spare them; pods already terminating.
//
// Evictions are sent at a bounded rate per node: a token bucket of
// EvictionBurst requests (default 3) refilled at one per EvictionInterval
// (default 10 s); retries take tokens too. Work goes through a rate-limited
// work queue served by one worker that Run owns; ContainerFailed never
// blocks. Container IDs already acted on are remembered in an LRU of
// RememberInstances (default 4,096), so memory stays bounded and a repeat
// (another result change of the same instance) does nothing.
package evict

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/probed/probed/agent/actuate"
	"github.com/probed/probed/agent/kube/nsscope"
	"github.com/probed/probed/runtime"
)

// Action is what the Actuator does about a failure (--liveness-action).
type Action string

const (
	// ActionEvent records a Warning Event on the container (the default).
	ActionEvent Action = "event"
	// ActionEvict records the Event and evicts the pod.
	ActionEvict Action = "evict"
)

// ParseAction parses a --liveness-action value: "event" (or "") or "evict".
func ParseAction(s string) (Action, error) {
	switch Action(s) {
	case "", ActionEvent:
		return ActionEvent, nil
	case ActionEvict:
		return ActionEvict, nil
	}
	return "", fmt.Errorf("--liveness-action %q: want event or evict", s)
}

// Event reasons (Warning), after the kubelet's "Killing" and eviction
// manager's "Evicted"; probed restarts nothing, so it does not say Killing.
const (
	ReasonLivenessProbeFailed = "LivenessProbeFailed"
	ReasonStartupProbeFailed  = "StartupProbeFailed"
	ReasonEvicted             = "Evicted"
	ReasonEvictionFailed      = "EvictionFailed"
)

// Annotations the kubelet sets on static and mirror pods
// (k8s.io/kubernetes pkg/kubelet/types).
const (
	ConfigSourceAnnotation = "kubernetes.io/config.source"
	ConfigMirrorAnnotation = "kubernetes.io/config.mirror"
	apiserverSource        = "api"
	// SystemCriticalPriority is scheduling.SystemCriticalPriority.
	SystemCriticalPriority = 2_000_000_000
)

// LivenessActionsLabel and DefaultNamespaceSelector select the namespaces
// where ActionEvict acts (package nsscope, docs/cluster.md "Liveness
// actions"; the shipped admission policy checks the same label).
const (
	LivenessActionsLabel     = nsscope.LivenessActionsLabel
	DefaultNamespaceSelector = nsscope.DefaultSelector
)

// Defaults of Options (docs/cluster.md "Liveness actions"): the pacing of
// every cluster actuator (actuate.Pacing), and the request timeout.
const (
	DefaultEvictionInterval  = actuate.DefaultInterval
	DefaultEvictionBurst     = actuate.DefaultBurst
	DefaultRetryBase         = actuate.DefaultRetryBase
	DefaultRetryMax          = actuate.DefaultRetryMax
	DefaultMaxAttempts       = actuate.DefaultMaxAttempts
	DefaultRememberInstances = actuate.DefaultRememberInstances
	DefaultRequestTimeout    = 30 * time.Second
)

// Options configure an Actuator. Zero values take the defaults above.
type Options struct {
	// Action is ActionEvent (default) or ActionEvict.
	Action Action
	// Client sends the Evictions; required with ActionEvict.
	Client kubernetes.Interface
	// Recorder receives the Events (the agent's events.Tee). Required.
	Recorder runtime.Recorder
	// Clock drives the work queue's delays and the node's token bucket.
	Clock clock.WithTicker
	// Pacing: the node's bucket of eviction requests (retries take tokens
	// too), the per-pod backoff of retries, the attempts of an eviction
	// failing with errors other than 429 (a budget), NotFound or a UID
	// conflict, and the container IDs remembered.
	actuate.Pacing
	// RequestTimeout bounds one eviction request.
	RequestTimeout time.Duration
	// NamespaceSelector is a label selector (labels.Parse syntax) on the
	// Namespace objects: ActionEvict evicts only pods of the namespaces it
	// selects. "": DefaultNamespaceSelector. Every namespace carries
	// kubernetes.io/metadata.name, so that key alone selects them all.
	NamespaceSelector string
	// Log receives one line per decision (default slog.Default()).
	Log *slog.Logger
}

// Actuator implements actuate.Actuator for cluster mode. Create it with New
// and call Run: Run owns the work queue (whose goroutine New starts with
// ActionEvict) and its worker; call it with a cancelled context if the agent
// never starts.
type Actuator struct {
	opts    Options
	queue   workqueue.TypedRateLimitingInterface[*item]
	retries workqueue.TypedRateLimiter[*item] // per-pod backoff, max'ed with the node's bucket
	node    *actuate.NodeBucket[*item]

	seen *actuate.Instances // the container instances acted on

	// scope: the namespaces NamespaceSelector selects (ActionEvict),
	// watched while Run runs.
	scope *nsscope.Scope

	attempts map[*item]int // non-429 failures per item; the worker's only
}

// item is one eviction to do; a pointer, so a retried item is the same
// queue key.
type item struct {
	namespace, name string
	uid             types.UID
	container       string
	containerID     string
	probe           runtime.ProbeType
	ref             *v1.ObjectReference // runtime.ContainerRef of the container
}

var _ actuate.Actuator = (*Actuator)(nil)

// New returns an Actuator for opts. Errors: an unknown Action, no Recorder,
// ActionEvict without a Client.
func New(opts Options) (*Actuator, error) {
	action, err := ParseAction(string(opts.Action))
	if err != nil {
		return nil, err
	}
	opts.Action = action
	if opts.Recorder == nil {
		return nil, fmt.Errorf("evict: no event recorder")
	}
	if opts.Action == ActionEvict && opts.Client == nil {
		return nil, fmt.Errorf("evict: --liveness-action=evict needs an API client")
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	opts.Pacing = opts.Pacing.WithDefaults()
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = DefaultRequestTimeout
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	a := &Actuator{
		opts:     opts,
		seen:     actuate.NewInstances(opts.RememberInstances),
		attempts: map[*item]int{},
	}
	if opts.Action == ActionEvict {
		a.retries, a.node = actuate.Limiters[*item](opts.Pacing, opts.Clock)
		// The queue is created here so failures before Run are kept; its
		// goroutine is stopped by Run.
		a.queue = workqueue.NewTypedRateLimitingQueueWithConfig(a.retries, workqueue.TypedRateLimitingQueueConfig[*item]{Clock: opts.Clock})
		var err error
		if a.scope, err = nsscope.New(opts.Client, opts.NamespaceSelector); err != nil {
			a.queue.ShutDown()
			return nil, err
		}
	}
	return a, nil
}

// ContainerFailed acts on a liveness or startup Failure of a running
// container instance, once per container ID. It never blocks.
func (a *Actuator) ContainerFailed(f actuate.Failure) {
	if f.Pod == nil {
		return
	}
	if !a.seen.First(f) {
		return
	}
	ref := runtime.ContainerRef(f.Pod, f.Container)
	reason, what := eventReason(f.Probe), f.Probe.Lower()
	log := a.opts.Log.With("pod", f.Pod.Namespace+"/"+f.Pod.Name, "container", f.Container, "containerID", f.ContainerID, "probe", what)
	if a.opts.Action == ActionEvent {
		a.opts.Recorder.Eventf(ref, v1.EventTypeWarning, reason,
			"Container %s failed %s probe; probed does not restart containers (--liveness-action=event)", f.Container, what)
		log.Info("liveness action: event")
		return
	}
	if why := Exemption(f.Pod); why != "" {
		a.opts.Recorder.Eventf(ref, v1.EventTypeWarning, reason,
			"Container %s failed %s probe; the pod is not evicted: %s", f.Container, what, why)
		log.Info("liveness action: not evicted", "why", why)
		return
	}
	if why, known := a.scope.Known(f.Pod.Namespace); why != "" && known {
		a.opts.Recorder.Eventf(ref, v1.EventTypeWarning, reason,
			"Container %s failed %s probe; the pod is not evicted: %s", f.Container, what, why)
		log.Info("liveness action: not evicted", "why", why)
		return
	}
	a.opts.Recorder.Eventf(ref, v1.EventTypeWarning, reason, "Container %s failed %s probe, the pod will be evicted", f.Container, what)
	it := &item{namespace: f.Pod.Namespace, name: f.Pod.Name, uid: f.Pod.UID, container: f.Container, containerID: f.ContainerID, probe: f.Probe, ref: ref}
	delay := a.node.When(it)
	log.Info("liveness action: eviction queued", "in", delay)
	a.queue.AddAfter(it, delay)
}

// Exemption says why pod must never be evicted, or "" when it may be.
func Exemption(pod *v1.Pod) string {
	switch {
	case pod.DeletionTimestamp != nil:
		return "it is already terminating"
	case pod.Annotations[ConfigMirrorAnnotation] != "":
		return "it is a mirror pod (of a static pod)"
	case isStatic(pod):
		return "it is a static pod (source " + pod.Annotations[ConfigSourceAnnotation] + ")"
	case isDaemonSetPod(pod):
		return "it is a DaemonSet pod"
	case isCritical(pod):
		return "it is a critical pod"
	}
	return ""
}

// isStatic is the kubelet's kubetypes.IsStaticPod: a config source that is
// not the API server.
func isStatic(pod *v1.Pod) bool {
	source, ok := pod.Annotations[ConfigSourceAnnotation]
	return ok && source != apiserverSource
}

// isDaemonSetPod: any ownerReference of kind DaemonSet (the descheduler's
// IsDaemonsetPod).
func isDaemonSetPod(pod *v1.Pod) bool {
	for _, o := range pod.OwnerReferences {
		if o.Kind == "DaemonSet" {
			return true
		}
	}
	return false
}

// isCritical: the kubelet's IsCriticalPodBasedOnPriority, or one of the two
// system priority classes (which the Priority admission turns into such a
// priority).
func isCritical(pod *v1.Pod) bool {
	if pod.Spec.Priority != nil && *pod.Spec.Priority >= SystemCriticalPriority {
		return true
	}
	return pod.Spec.PriorityClassName == "system-node-critical" || pod.Spec.PriorityClassName == "system-cluster-critical"
}

// Run serves the eviction queue until ctx ends, then shuts the queue down
// and waits for its worker (an eviction request in flight is cancelled).
// With ActionEvent it only waits for ctx. It returns nil.
func (a *Actuator) Run(ctx context.Context) error {
	if a.queue == nil {
		<-ctx.Done()
		return nil
	}
	var wg sync.WaitGroup
	wg.Go(func() { _ = a.scope.Run(ctx) })
	wg.Go(func() {
		for a.processNext(ctx) {
		}
	})
	<-ctx.Done()
	a.queue.ShutDown()
	wg.Wait()
	return nil
}

func (a *Actuator) processNext(ctx context.Context) bool {
	it, shutdown := a.queue.Get()
	if shutdown {
		return false
	}
	defer a.queue.Done(it)
	if ctx.Err() != nil {
		return true
	}
	a.evict(ctx, it)
	return true
}

// evict sends one eviction request for it and decides what follows.
func (a *Actuator) evict(ctx context.Context, it *item) {
	log := a.opts.Log.With("pod", it.namespace+"/"+it.name, "container", it.container, "containerID", it.containerID)
	rctx, cancel := context.WithTimeout(ctx, a.opts.RequestTimeout)
	defer cancel()
	// The namespace is checked again before each request: its label may
	// have been removed since the failure was queued, or the namespaces
	// were not listed yet then.
	why, err := a.scope.Allows(rctx, it.namespace)
	if why != "" {
		a.finish(it)
		log.Info("eviction not sent", "why", why)
		a.opts.Recorder.Eventf(it.ref, v1.EventTypeWarning, eventReason(it.probe), "Container %s failed %s probe; the pod is not evicted: %s",
			it.container, it.probe.Lower(), why)
		return
	}
	if err == nil {
		err = a.request(rctx, it)
	}
	switch {
	case err == nil:
		a.finish(it)
		log.Info("evicted the pod")
		a.opts.Recorder.Eventf(it.ref, v1.EventTypeWarning, ReasonEvicted, "Evicted the pod: container %s failed %s probe", it.container, it.probe.Lower())
	case apierrors.IsNotFound(err):
		a.finish(it)
		log.Info("eviction not needed: the pod is gone")
	case apierrors.IsConflict(err):
		// The UID precondition failed: the name now belongs to a successor.
		a.finish(it)
		log.Info("eviction not needed: the pod was replaced", "error", err)
	case ctx.Err() != nil:
		// Stopping: the request was cancelled, not refused.
	case apierrors.IsTooManyRequests(err):
		delay := a.retry(it, err)
		log.Warn("eviction refused (a PodDisruptionBudget allows no disruption now), will retry", "in", delay, "error", err)
	default:
		a.attempts[it]++
		if n := a.attempts[it]; n >= a.opts.MaxAttempts {
			a.finish(it)
			log.Error("eviction failed, giving up", "attempts", n, "error", err)
			a.opts.Recorder.Eventf(it.ref, v1.EventTypeWarning, ReasonEvictionFailed, "Could not evict the pod after %d attempts: %v", n, err)
			return
		}
		delay := a.retry(it, err)
		log.Warn("eviction failed, will retry", "attempt", a.attempts[it], "of", a.opts.MaxAttempts, "in", delay, "error", err)
	}
}

// eventReason is the Event reason of a failed probe of type t.
func eventReason(t runtime.ProbeType) string {
	if t == runtime.Startup {
		return ReasonStartupProbeFailed
	}
	return ReasonLivenessProbeFailed
}

// request is client.PolicyV1().Evictions(ns).Evict with the pod's UID as a
// precondition and client-go's own retries off (MaxRetries(0)): the typed
// Evict would retry a 429 ten times inside one call, sleeping the server's
// Retry-After each time, unseen by the log, the queue and the node's bucket.
func (a *Actuator) request(ctx context.Context, it *item) error {
	uid := it.uid
	eviction := &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Namespace: it.namespace, Name: it.name},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}},
	}
	return a.opts.Client.PolicyV1().RESTClient().Post().
		AbsPath("/api/v1").
		Namespace(it.namespace).
		Resource("pods").
		Name(it.name).
		SubResource("eviction").
		Body(eviction).
		MaxRetries(0).
		Do(ctx).
		Error()
}

// retry queues it again after the larger of its backoff (and the node's
// bucket) and the server's Retry-After.
func (a *Actuator) retry(it *item, err error) time.Duration {
	delay := a.retries.When(it)
	if s, ok := apierrors.SuggestsClientDelay(err); ok {
		delay = max(delay, time.Duration(s)*time.Second)
	}
	a.queue.AddAfter(it, delay)
	return delay
}

func (a *Actuator) finish(it *item) {
	a.retries.Forget(it)
	delete(a.attempts, it)
}
