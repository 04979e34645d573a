// Package podsource delivers the pods bound to this node from the API
// server: the agent's cluster-mode pods.Source, the counterpart of the
// kubelet's apiserver config source (pkg/kubelet/config/apiserver.go). It
// also holds what cluster mode knows of those pods' statuses (Statuses, the
// manager's StatusProvider): the kubelet's status as the informer caches it,
// with each container's Started overlaid by probed's own startup verdict.
//
// One shared informer lists and watches pods of all namespaces with the
// field selector spec.nodeName=NODE and resync off, as the kubelet does;
// after the initial list the watch resumes from its last resourceVersion
// through client-go's reflector (with its backoff), so an API server outage
// costs no relist unless the server answers that the version is gone (410).
// A transform (Transform) drops what probed never reads before an object
// enters the cache.
package podsource

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/probed/probed/agent/pods"
	"github.com/probed/probed/manager/customprobe"
)

// Origin is the pods.Pod Origin of every pod this source delivers.
const Origin = "apiserver"

// LastAppliedAnnotation is kubectl's copy of the last applied object
// (`kubectl apply`); the transform drops it.
const LastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// Options configure a Source.
type Options struct {
	// Client talks to the API server (required). It needs get, list and
	// watch on pods.
	Client kubernetes.Interface
	// NodeName is the node whose pods are read: the field selector
	// spec.nodeName=NodeName (required).
	NodeName string
	// Logger; nil: slog.Default().
	Logger *slog.Logger
}

// Source is the pods.Source of cluster mode: the pods bound to one node, from
// one shared informer. Run it once.
type Source struct {
	opts Options
	log  *slog.Logger

	started atomic.Bool
	// synced is the event handler registration's HasSynced, set by Run.
	synced atomic.Pointer[func() bool]

	mu       sync.Mutex
	informer cache.SharedIndexInformer // set by Run; for tests
}

var _ pods.Source = (*Source)(nil)

// New returns a Source for the node. It fails when Client is nil or
// NodeName is empty.
func New(opts Options) (*Source, error) {
	if opts.Client == nil {
		return nil, errors.New("podsource: Options.Client is required")
	}
	if opts.NodeName == "" {
		return nil, errors.New("podsource: Options.NodeName is required (--node-name or NODE_NAME): probed reads only the pods of its own node")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Source{opts: opts, log: opts.Logger}, nil
}

// NodeName returns the node whose pods the source reads.
func (s *Source) NodeName() string { return s.opts.NodeName }

// Run starts the informer and calls apply with one Update per informer
// event until ctx is done; then it stops the informer, waits for its
// goroutines (apply is not called after Run returns) and returns nil. It
// returns an error only when it cannot start (called twice, or the informer
// refuses the transform or the handler). An unreachable API server is not
// an error: the reflector retries with backoff and HasSynced stays false.
//
// apply is called from the informer's one handler goroutine, one event at a
// time, in the order the API server sent the events (pods.Source).
func (s *Source) Run(ctx context.Context, apply func(pods.Update)) error {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("podsource: Run called twice")
	}
	selector := fields.OneTermEqualSelector("spec.nodeName", s.opts.NodeName).String()
	// Resync 0: nothing changes between watch events, so a periodic
	// replay would only repeat work (the reconciler has its own periodic
	// AddPod, the kubelet's pod sync).
	factory := informers.NewSharedInformerFactoryWithOptions(s.opts.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = selector }))
	inf := factory.Core().V1().Pods().Informer()
	if err := inf.SetTransform(Transform); err != nil {
		return fmt.Errorf("podsource: pod informer transform: %w", err)
	}
	handle := func(u pods.Update, ok bool) {
		if ok {
			apply(u)
		}
	}
	registration, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { handle(s.updateFor(obj)) },
		UpdateFunc: func(_, obj any) { handle(s.updateFor(obj)) },
		DeleteFunc: func(obj any) { handle(s.removalFor(obj)) },
	})
	if err != nil {
		return fmt.Errorf("podsource: pod informer handler: %w", err)
	}
	hasSynced := registration.HasSynced
	s.synced.Store(&hasSynced)
	s.mu.Lock()
	s.informer = inf
	s.mu.Unlock()
	s.log.Info("watching the pods of this node", "node", s.opts.NodeName, "fieldSelector", selector)
	factory.Start(ctx.Done())
	<-ctx.Done()
	factory.Shutdown()
	return nil
}

// HasSynced reports whether the pods of the informer's initial list have
// all been handed to apply (the registration's HasSynced). It stays true
// once true: a later outage of the API server does not unsync the cache.
// It is the source's part of the agent's /healthz (health.New): unhealthy
// while the informer has never synced — the API server unreachable or
// refusing, or Run not called — and healthy afterwards, also during a later
// outage, when probing goes on for the pods already known (issue 10 §2.7).
func (s *Source) HasSynced() bool {
	f := s.synced.Load()
	return f != nil && (*f)()
}

// updateFor maps an add or update event to an Update: Upsert for a pod
// that runs or may still run, Remove for a pod in a terminal phase
// (Succeeded, Failed). A terminal pod's containers will not run again, and
// its workers would end on their next run anyway (W5.2); removing it stops
// them now instead of recreating and ending them on every periodic AddPod
// (worker churn). The reconciler ignores the removal of a pod it never had.
func (s *Source) updateFor(obj any) (pods.Update, bool) {
	pod, ok := obj.(*v1.Pod)
	if !ok {
		s.log.Error("pod informer delivered an object that is not a pod", "type", fmt.Sprintf("%T", obj))
		return pods.Update{}, false
	}
	return UpdateFor(pod), true
}

// removalFor maps a delete event, also a tombstone
// (cache.DeletedFinalStateUnknown: the watch missed the deletion and the
// relist no longer has the pod), to a Remove.
func (s *Source) removalFor(obj any) (pods.Update, bool) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	pod, ok := obj.(*v1.Pod)
	if !ok {
		s.log.Error("pod informer deleted an object that is not a pod", "type", fmt.Sprintf("%T", obj))
		return pods.Update{}, false
	}
	return pods.Update{Op: pods.Remove, Pods: []*pods.Pod{podOf(pod)}}, true
}

// UpdateFor is the Update for an added or updated pod (see Source.Run):
// Remove in a terminal phase, else Upsert.
func UpdateFor(pod *v1.Pod) pods.Update {
	if pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed {
		return pods.Update{Op: pods.Remove, Pods: []*pods.Pod{podOf(pod)}}
	}
	return pods.Update{Op: pods.Upsert, Pods: []*pods.Pod{podOf(pod)}}
}

// podOf wraps the informer's cached object: it is shared with the cache and
// read-only for everyone (pods.Pod). Pods from the API server carry a UID
// and have the API defaults applied (spec probes' timeoutSeconds,
// periodSeconds, thresholds); the annotation's probes are defaulted when
// they are parsed. Nothing is left to default here.
func podOf(pod *v1.Pod) *pods.Pod {
	return &pods.Pod{Pod: pod, Origin: Origin, SpecHash: SpecHash(pod), StatusHash: StatusHash(pod)}
}

// SpecHash identifies what a pod's probe workers are made of: its spec, its
// probed.io/probes annotation and probed.io/offloaded record (a changed
// annotation or record replaces the probes) and whether it is being deleted. The last makes the reconciler replace
// the workers of a pod whose deletion began: the new liveness and startup
// workers see the DeletionTimestamp in their pod snapshot, record Success
// and end (the deletion shortcut, W5.7/W9), while readiness keeps probing
// until the pod is gone — as the kubelet stops liveness and startup when
// termination starts (M3) and removes the rest when the pod is gone (M4).
// Labels, other annotations and the status do not count.
func SpecHash(pod *v1.Pod) string {
	return hashOf(struct {
		Spec      *v1.PodSpec `json:"spec"`
		Probes    *string     `json:"probes,omitempty"`
		Offloaded *string     `json:"offloaded,omitempty"`
		Deleting  bool        `json:"deleting,omitempty"`
	}{&pod.Spec, annotation(pod, customprobe.Annotation), annotation(pod, customprobe.OffloadedAnnotation), pod.DeletionTimestamp != nil})
}

// StatusHash identifies the parts of a pod's status probed reads: phase,
// pod IPs, every container's ID, state (with StartedAt), started, ready and
// restart count, and the pod's conditions' type, status, reason and message
// (M9 reads Ready; the readiness-gate writer reads its own condition).
// Timestamps of conditions, the QoS class and what the transform drops do
// not count, nor does the resourceVersion: a status write that changes none
// of these (or probed's own write of a condition it already reported)
// costs no status recomputation.
func StatusHash(pod *v1.Pod) string {
	type condition struct {
		Type    v1.PodConditionType `json:"t"`
		Status  v1.ConditionStatus  `json:"s"`
		Reason  string              `json:"r,omitempty"`
		Message string              `json:"m,omitempty"`
	}
	type container struct {
		Name         string            `json:"n"`
		ContainerID  string            `json:"id,omitempty"`
		State        v1.ContainerState `json:"st"`
		Started      *bool             `json:"started,omitempty"`
		Ready        bool              `json:"ready,omitempty"`
		RestartCount int32             `json:"rc,omitempty"`
	}
	containers := func(all []v1.ContainerStatus) []container {
		out := make([]container, len(all))
		for i := range all {
			cs := &all[i]
			out[i] = container{cs.Name, cs.ContainerID, cs.State, cs.Started, cs.Ready, cs.RestartCount}
		}
		return out
	}
	st := &pod.Status
	conds := make([]condition, len(st.Conditions))
	for i, c := range st.Conditions {
		conds[i] = condition{c.Type, c.Status, c.Reason, c.Message}
	}
	return hashOf(struct {
		Phase      v1.PodPhase `json:"phase,omitempty"`
		PodIP      string      `json:"ip,omitempty"`
		PodIPs     []v1.PodIP  `json:"ips,omitempty"`
		Containers []container `json:"c,omitempty"`
		Init       []container `json:"i,omitempty"`
		Conditions []condition `json:"cond,omitempty"`
	}{st.Phase, st.PodIP, st.PodIPs, containers(st.ContainerStatuses), containers(st.InitContainerStatuses), conds})
}

func hashOf(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		// API types always marshal; a failure would make every pod
		// look changed, never unchanged.
		return "unhashable: " + err.Error()
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

func annotation(pod *v1.Pod, key string) *string {
	if v, ok := pod.Annotations[key]; ok {
		return &v
	}
	return nil
}

// Transform is the informer's transform (cache.TransformFunc): it trims a
// pod before it enters the cache, in place (the informer hands it an object
// just decoded from the API server), and is idempotent. Dropped, because no
// part of probed reads them:
//   - metadata.managedFields: server-side apply's field ownership, one entry
//     per writer (the kubelet's status writes among them), about a third of
//     a pod's JSON;
//   - the kubectl.kubernetes.io/last-applied-configuration annotation: a
//     second copy of the whole object for pods created by `kubectl apply`;
//   - in every container status: volumeMounts, resources,
//     allocatedResources, allocatedResourcesStatus and user, which the
//     kubelet reports for every container and probed never reads.
//
// Kept: everything else, in particular name, namespace, UID,
// resourceVersion, labels, annotations (probed.io/probes, the
// kubernetes.io/config.source and config.mirror of static and mirror
// pods), ownerReferences (DaemonSet pods are never evicted),
// deletionTimestamp, the whole spec (containers, ports, probes,
// readinessGates, restart policies) and the rest of the status (phase, pod
// IPs, conditions, container IDs, states, started, ready, restart counts).
// Objects that are not pods pass unchanged.
func Transform(obj any) (any, error) {
	pod, ok := obj.(*v1.Pod)
	if !ok {
		return obj, nil
	}
	pod.ManagedFields = nil
	if _, ok := pod.Annotations[LastAppliedAnnotation]; ok {
		delete(pod.Annotations, LastAppliedAnnotation)
	}
	for _, all := range [][]v1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses, pod.Status.EphemeralContainerStatuses} {
		for i := range all {
			cs := &all[i]
			cs.VolumeMounts = nil
			cs.Resources = nil
			cs.AllocatedResources = nil
			cs.AllocatedResourcesStatus = nil
			cs.User = nil
		}
	}
	return pod, nil
}
