// Package evict is --liveness-action=evict, a step of the liveness
// actuator (agent/actuate): the kubelet owns the containers and restarts
// them only on its own probes, and an agent may not restart a container
// in place through the API, but it may evict the pod. Per failed container
// instance, once:
//
//   - refused at once, with a Warning Event saying why (reason
//     LivenessProbeFailed or StartupProbeFailed), for a pod probed never
//     evicts: DaemonSet pods (an ownerReference of kind DaemonSet: the
//     DaemonSet would recreate the pod on the same node), static pods
//     (annotation kubernetes.io/config.source other than "api", the
//     kubelet's kubetypes.IsStaticPod) and mirror pods (annotation
//     kubernetes.io/config.mirror): the API server cannot remove them;
//     critical pods (priority at least 2,000,000,000, or class
//     system-node-critical or system-cluster-critical), as the descheduler
//     and the kubelet's eviction manager spare them; pods already
//     terminating;
//   - otherwise the Warning Event "Container app failed liveness probe,
//     the pod will be evicted", then one Eviction (policy/v1, the
//     pods/eviction subresource, so PodDisruptionBudgets are honoured;
//     never a plain delete) with the pod's UID as a precondition, so a
//     same-named successor (a StatefulSet's) is never evicted. A 429 (a
//     budget allows no disruption now) is tried again after the backoff,
//     at least the server's Retry-After, and logged, until the eviction
//     succeeds or the pod is gone; other errors count as attempts
//     (actuate.Pacing.MaxAttempts, then a Warning EvictionFailed Event). A
//     successful eviction is a Warning Evicted Event.
//
// The agent puts the namespace scope around the step (nsscope.Guard):
// whoever may annotate a pod could otherwise have it evicted; the shipped
// admission policy refuses the agent's evictions outside the selected
// namespaces too. The queue (actuate.Queue) paces the requests: one
// worker, the node's bucket of 3 requests refilled at one per 10 s, which
// every attempt takes a token of.
package evict

import (
	"context"
	"errors"
	"log/slog"
	"time"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/probed/probed/agent/actuate"
	"github.com/probed/probed/runtime"
)

// Event reasons (Warning), after the kubelet's eviction manager's
// "Evicted"; probed restarts nothing, so it does not say Killing.
const (
	ReasonLivenessProbeFailed = actuate.ReasonLivenessProbeFailed
	ReasonStartupProbeFailed  = actuate.ReasonStartupProbeFailed
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

// DefaultRequestTimeout bounds one eviction request.
const DefaultRequestTimeout = 30 * time.Second

// Texts are the queue's texts of evictions (actuate.Texts).
var Texts = actuate.Texts{
	Acting:       "the pod is to be evicted (--liveness-action=evict)",
	Queued:       "the pod will be evicted",
	Not:          "the pod is not evicted",
	Work:         "eviction",
	FailedReason: ReasonEvictionFailed,
	Failed:       "Could not evict the pod",
}

// Options configure a Step.
type Options struct {
	// Client sends the Evictions. Required.
	Client kubernetes.Interface
	// Recorder receives the Evicted Events (the agent's events.Tee).
	// Required.
	Recorder runtime.Recorder
	// RequestTimeout bounds one eviction request; default
	// DefaultRequestTimeout.
	RequestTimeout time.Duration
	// Logger receives one line per eviction (default slog.Default()).
	Logger *slog.Logger
}

// Step is the eviction step (actuate.Step).
type Step struct {
	opts Options
}

var _ actuate.Step = (*Step)(nil)

// New returns the Step. Errors: no Client, no Recorder.
func New(opts Options) (*Step, error) {
	switch {
	case opts.Client == nil:
		return nil, errors.New("evict: --liveness-action=evict needs an API client")
	case opts.Recorder == nil:
		return nil, errors.New("evict: no event recorder")
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = DefaultRequestTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Step{opts: opts}, nil
}

// Plan implements actuate.Step: an exempt pod is refused, any other is
// evicted.
func (s *Step) Plan(f actuate.Failure) actuate.Plan {
	if why := Exemption(f.Pod); why != "" {
		return actuate.Plan{Decision: actuate.Decision{Do: actuate.Refuse, Why: why}}
	}
	e := &eviction{step: s, namespace: f.Pod.Namespace, name: f.Pod.Name, uid: f.Pod.UID, container: f.Container, probe: f.Probe,
		ref: runtime.ContainerRef(f.Pod, f.Container),
		log: s.opts.Logger.With("pod", f.Pod.Namespace+"/"+f.Pod.Name, "container", f.Container, "containerID", f.ContainerID)}
	return actuate.Plan{Decision: actuate.Decision{Do: actuate.Act}, Act: e.attempt}
}

// eviction is one pod's eviction.
type eviction struct {
	step            *Step
	namespace, name string
	uid             types.UID
	container       string
	probe           runtime.ProbeType
	ref             *v1.ObjectReference // runtime.ContainerRef of the container
	log             *slog.Logger
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

// attempt sends one eviction request and says what follows.
func (e *eviction) attempt(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, e.step.opts.RequestTimeout)
	defer cancel()
	err := e.request(rctx)
	switch {
	case err == nil:
		e.log.Info("evicted the pod")
		e.step.opts.Recorder.Eventf(e.ref, v1.EventTypeWarning, ReasonEvicted, "Evicted the pod: container %s failed %s probe", e.container, e.probe.Lower())
		return nil
	case apierrors.IsNotFound(err):
		e.log.Info("eviction not needed: the pod is gone")
		return nil
	case apierrors.IsConflict(err):
		// The UID precondition failed: the name now belongs to a successor.
		e.log.Info("eviction not needed: the pod was replaced", "error", err)
		return nil
	case apierrors.IsTooManyRequests(err):
		var after time.Duration
		if s, ok := apierrors.SuggestsClientDelay(err); ok {
			after = time.Duration(s) * time.Second
		}
		return actuate.Wait(err, after, "eviction refused (a PodDisruptionBudget allows no disruption now)")
	}
	return err
}

// request is client.PolicyV1().Evictions(ns).Evict with the pod's UID as a
// precondition and client-go's own retries off (MaxRetries(0)): the typed
// Evict would retry a 429 ten times inside one call, sleeping the server's
// Retry-After each time, unseen by the log, the queue and the node's bucket.
func (e *eviction) request(ctx context.Context) error {
	uid := e.uid
	eviction := &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Namespace: e.namespace, Name: e.name},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}},
	}
	return e.step.opts.Client.PolicyV1().RESTClient().Post().
		AbsPath("/api/v1").
		Namespace(e.namespace).
		Resource("pods").
		Name(e.name).
		SubResource("eviction").
		Body(eviction).
		MaxRetries(0).
		Do(ctx).
		Error()
}
