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
// A transform (Trim) keeps only what probing reads of a pod before it enters
// the cache.
package podsource

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
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
	"github.com/probed/probed/runtime/tenant"
)

// Origin is the pods.Pod Origin of every pod this source delivers.
const Origin = "apiserver"

// Options configure a Source.
type Options struct {
	// Client talks to the API server (required). It needs get, list and
	// watch on pods.
	Client kubernetes.Interface
	// NodeName is the node whose pods are read: the field selector
	// spec.nodeName=NodeName (required).
	NodeName string
	// ReadinessGate is the pod condition probed owns: of a pod's
	// spec.readinessGates the cache keeps this one (Trim); "": all.
	ReadinessGate string
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
	if err := inf.SetTransform(TransformFor(v1.PodConditionType(s.opts.ReadinessGate))); err != nil {
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
// outage, when probing goes on for the pods already known.
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

// KeptAnnotationPrefix is the prefix of the annotations the cache keeps:
// probed's own (probed.io/probes, the offload webhook's record); every other
// annotation of a pod is a tenant's text probed never reads.
const KeptAnnotationPrefix = "probed.io/"

// The kubelet's annotations of static and mirror pods, which the cache keeps
// too: the evict actuator never evicts those pods (agent/kube/evict).
const (
	ConfigSourceAnnotation = "kubernetes.io/config.source"
	ConfigMirrorAnnotation = "kubernetes.io/config.mirror"
)

// TransformFor is the informer's transform (cache.TransformFunc) of a node
// whose readiness gate is gate: Trim. Objects that are not pods pass
// unchanged.
func TransformFor(gate v1.PodConditionType) cache.TransformFunc {
	return func(obj any) (any, error) {
		pod, ok := obj.(*v1.Pod)
		if !ok {
			return obj, nil
		}
		return Trim(pod, gate), nil
	}
}

// Trim returns what the cache keeps of a pod, as the informer's transform
// does before a pod enters the cache: only what probing needs, so that a
// pod's memory in the agent is bounded by what its probes ask, not by what
// its tenant wrote (a pod may be 1.5 MiB in the API server: 1 MB of env and
// 250 KB of annotations took an agent past 239 MiB with 70 such pods). It
// builds a new object from the fields named below, so a field a later API
// version adds is not kept until someone says why it is read; pod is not
// changed. Trim is idempotent. gate is the node's readiness gate ("": every
// gate is kept).
//
// Kept, and who reads it:
//   - metadata: name, namespace, UID, resourceVersion, creation and deletion
//     timestamps, the deletion grace period (the API, the page, Events, the
//     gate's UID precondition, the deletion shortcut W5.7); the controller's
//     owner reference and a DaemonSet's (evict never evicts DaemonSet pods);
//     the annotations under KeptAnnotationPrefix (the probes' view) and the
//     kubelet's ConfigSourceAnnotation and ConfigMirrorAnnotation;
//   - spec: nodeName, restartPolicy, terminationGracePeriodSeconds (the
//     restart's grace period, K3), priority and priorityClassName (evict
//     never evicts critical pods), the readiness gate gate (the gate writer);
//   - each container (regular and init; an ephemeral container's name
//     only): name and restartPolicy (sidecars, M1), its named ports (a
//     probe's or a hook's named port, spec 1.4; unnamed ports are never
//     looked up), the preStop hook (the restart actuator runs it), the env
//     variables that the text of a kept annotation references as $(NAME)
//     — the $(VAR) expansion of an annotation exec probe's command (spec
//     E1) — up to tenant.ExpandedEnvBytes of names and values for the pod,
//     in declaration order (one past it is not kept: its reference stays
//     as written, E1's rule for a name not declared), and of its own probes
//     (the kubelet's in cluster mode, podprobes.LeaveSpecToKubelet) only
//     that they exist and their timing fields, not their handlers;
//   - the status, which the kubelet writes and bounds, without each
//     container status's volumeMounts, resources, allocatedResources,
//     allocatedResourcesStatus and user, which probed never reads.
//
// Dropped, among others: managedFields (a third of a pod's JSON), labels,
// every other annotation (kubectl's last-applied-configuration), the
// containers' images, commands, arguments, env values not referenced,
// envFrom, resources, volume mounts and security contexts, the spec
// probes' handlers, postStart hooks, volumes and every other field of the
// spec.
func Trim(pod *v1.Pod, gate v1.PodConditionType) *v1.Pod {
	m := &pod.ObjectMeta
	out := &v1.Pod{TypeMeta: pod.TypeMeta, ObjectMeta: metav1.ObjectMeta{
		Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion,
		CreationTimestamp: m.CreationTimestamp, DeletionTimestamp: m.DeletionTimestamp,
		DeletionGracePeriodSeconds: m.DeletionGracePeriodSeconds,
	}}
	for _, o := range m.OwnerReferences {
		if (o.Controller != nil && *o.Controller) || o.Kind == "DaemonSet" {
			out.OwnerReferences = append(out.OwnerReferences, o)
			if len(out.OwnerReferences) == 2 {
				break
			}
		}
	}
	for k, v := range m.Annotations {
		if strings.HasPrefix(k, KeptAnnotationPrefix) || k == ConfigSourceAnnotation || k == ConfigMirrorAnnotation {
			if out.Annotations == nil {
				out.Annotations = map[string]string{}
			}
			out.Annotations[k] = v
		}
	}

	s := &pod.Spec
	out.Spec = v1.PodSpec{NodeName: s.NodeName, RestartPolicy: s.RestartPolicy, TerminationGracePeriodSeconds: s.TerminationGracePeriodSeconds,
		Priority: s.Priority, PriorityClassName: s.PriorityClassName}
	for _, g := range s.ReadinessGates {
		if gate == "" || g.ConditionType == gate {
			out.Spec.ReadinessGates = append(out.Spec.ReadinessGates, g)
		}
	}
	env := envBudget{refs: envReferences(out.Annotations), left: tenant.ExpandedEnvBytes}
	out.Spec.Containers = trimContainers(s.Containers, &env)
	out.Spec.InitContainers = trimContainers(s.InitContainers, &env)
	if len(s.EphemeralContainers) > 0 {
		out.Spec.EphemeralContainers = make([]v1.EphemeralContainer, len(s.EphemeralContainers))
		for i := range s.EphemeralContainers {
			out.Spec.EphemeralContainers[i].Name = s.EphemeralContainers[i].Name
		}
	}

	out.Status = pod.Status
	st := &out.Status
	st.ContainerStatuses = trimStatuses(st.ContainerStatuses)
	st.InitContainerStatuses = trimStatuses(st.InitContainerStatuses)
	st.EphemeralContainerStatuses = trimStatuses(st.EphemeralContainerStatuses)
	return out
}

// trimContainers keeps what probing reads of each container (see Trim).
func trimContainers(all []v1.Container, env *envBudget) []v1.Container {
	if all == nil {
		return nil
	}
	out := make([]v1.Container, len(all))
	for i := range all {
		c, k := &all[i], &out[i]
		k.Name, k.RestartPolicy = c.Name, c.RestartPolicy
		for _, p := range c.Ports {
			if p.Name != "" {
				k.Ports = append(k.Ports, p)
			}
		}
		k.Env = env.keep(c.Env)
		if c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
			k.Lifecycle = &v1.Lifecycle{PreStop: c.Lifecycle.PreStop}
		}
		k.LivenessProbe, k.ReadinessProbe, k.StartupProbe = timingOnly(c.LivenessProbe), timingOnly(c.ReadinessProbe), timingOnly(c.StartupProbe)
	}
	return out
}

// timingOnly is a spec probe without its handler: that it exists (M9 reads
// it) and its timing fields.
func timingOnly(p *v1.Probe) *v1.Probe {
	if p == nil {
		return nil
	}
	return &v1.Probe{InitialDelaySeconds: p.InitialDelaySeconds, TimeoutSeconds: p.TimeoutSeconds, PeriodSeconds: p.PeriodSeconds,
		SuccessThreshold: p.SuccessThreshold, FailureThreshold: p.FailureThreshold, TerminationGracePeriodSeconds: p.TerminationGracePeriodSeconds}
}

// trimStatuses drops what probed never reads of each container status.
func trimStatuses(all []v1.ContainerStatus) []v1.ContainerStatus {
	if all == nil {
		return nil
	}
	out := make([]v1.ContainerStatus, len(all))
	copy(out, all)
	for i := range out {
		cs := &out[i]
		cs.VolumeMounts = nil
		cs.Resources = nil
		cs.AllocatedResources = nil
		cs.AllocatedResourcesStatus = nil
		cs.User = nil
	}
	return out
}

// envBudget keeps the env variables the kept annotations reference, within
// tenant.ExpandedEnvBytes for the pod.
type envBudget struct {
	refs map[string]bool
	left int
}

// keep returns the referenced variables of env with their values (a
// variable from valueFrom expands to "", E1: its name is kept alone).
func (b *envBudget) keep(env []v1.EnvVar) []v1.EnvVar {
	var out []v1.EnvVar
	for _, e := range env {
		if !b.refs[e.Name] {
			continue
		}
		size := len(e.Name) + len(e.Value)
		if size > b.left {
			continue
		}
		b.left -= size
		out = append(out, v1.EnvVar{Name: e.Name, Value: e.Value})
	}
	return out
}

// envReferences are the names written as $(NAME) in the annotations' values:
// every variable an exec command among them can expand (E1), and perhaps a
// few more (the text is scanned, not parsed).
func envReferences(annotations map[string]string) map[string]bool {
	refs := map[string]bool{}
	for _, v := range annotations {
		for {
			i := strings.Index(v, "$(")
			if i < 0 {
				break
			}
			v = v[i+2:]
			j := strings.IndexByte(v, ')')
			if j < 0 {
				break
			}
			refs[v[:j]] = true
			v = v[j+1:]
		}
	}
	return refs
}
