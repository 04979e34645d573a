package podsource

import (
	"context"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/probed/probed/agent/pods"
	"github.com/probed/probed/agent/podstatus"
	"github.com/probed/probed/agent/verdicts"
	"github.com/probed/probed/manager/results"
	"github.com/probed/probed/runtime"
)

// Prober is the part of manager.Manager the statuses drive.
type Prober interface {
	UpdatePodStatus(ctx context.Context, pod *v1.Pod, status *v1.PodStatus)
}

// Statuses is cluster mode's pod status cache and the prober manager's
// StatusProvider (manager.StatusProvider): for every pod the reconciler
// applied, the status the kubelet wrote (as the informer caches it:
// pod IPs, phase, conditions, container IDs, states with StartedAt,
// restart counts — nothing simulated; a container the kubelet restarted
// arrives as a new container ID, W6) with two fields of each container
// status replaced by probed's own view:
//
//   - Started is the kubelet's started AND probed's startup verdict. The
//     verdict is what the manager's UpdatePodStatus (M8) says for a copy of
//     the status whose Started fields were cleared: M8 keeps a container
//     already reported started (its kubelet-restart rule), so with the
//     kubelet's started=true left in place an annotation startup probe would
//     never run (W5.9) and liveness and readiness would not wait for it.
//     Cleared, a container with an annotation startup probe is started only
//     once that probe succeeded; one without is started when the kubelet
//     says so.
//   - Ready is probed's readiness verdict as UpdatePodStatus computes it
//     (M7c: the annotation readiness probe's result, true without one;
//     M9), not the kubelet's; false while Started (above) is false. The pod's conditions (Ready, ContainersReady
//     and the readiness gate's) stay as the kubelet and the API server have
//     them: probed never writes Ready.
//
// The status is recomputed when a pod is added or its status changes
// (pods.Listener), when a startup or readiness result changes
// (verdicts.Consumer), and on Resync; each recomputation is a status
// generation, which also triggers a readiness run of a started container
// that has no Success yet (M7c), as each kubelet status generation does.
//
// The pods it returns are the informer's objects as of their last spec or
// status change (a change of labels alone is not seen). All methods are
// safe for concurrent use.
type Statuses struct {
	mu     sync.RWMutex
	pods   podstatus.Table // the informer's objects (read-only, shared with its cache) and the statuses with probed's overlay
	prober Prober
}

var (
	_ pods.Listener     = (*Statuses)(nil)
	_ verdicts.Consumer = (*Statuses)(nil)
)

// NewStatuses returns an empty Statuses. Set the manager with SetProber
// before pods are added (the manager needs the Statuses at its New).
func NewStatuses() *Statuses {
	return &Statuses{}
}

// SetProber sets the manager whose UpdatePodStatus gives probed's Started
// and Ready, and recomputes every pod's status. Until it is set, a pod's
// status is the kubelet's unchanged.
func (s *Statuses) SetProber(p Prober) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.prober = p
	for _, e := range s.pods.All() {
		s.computeLocked(e)
	}
}

// GetPodStatus implements manager.StatusProvider: a copy of the pod's
// status with probed's overlay, false for a pod not (or no longer) known.
func (s *Statuses) GetPodStatus(uid types.UID) (v1.PodStatus, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.pods.Status(uid)
}

// Pod returns a copy of the pod with its status (as GetPodStatus).
func (s *Statuses) Pod(uid types.UID) (*v1.Pod, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.pods.Pod(uid)
}

// KubeletPod returns a copy of the pod as the informer holds it: the
// kubelet's status without probed's overlay (its Started and Ready are the
// kubelet's own).
func (s *Statuses) KubeletPod(uid types.UID) (*v1.Pod, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	e, ok := s.pods.Get(uid)
	if !ok {
		return nil, false
	}
	return e.Pod.DeepCopy(), true
}

// PodByName returns a copy of the pod namespace/name with its status.
func (s *Statuses) PodByName(namespace, name string) (*v1.Pod, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.pods.PodByName(namespace, name)
}

// ContainerPod returns a copy of the pod one of whose containers (regular,
// init or ephemeral) has container ID statusID ("containerd://<id>"), with
// that container's name; false when no pod has it. It looks at every pod:
// for rare lookups (an Event about a container).
func (s *Statuses) ContainerPod(statusID string) (*v1.Pod, string, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, e := range s.pods.All() {
		st := &e.Pod.Status
		for _, list := range [][]v1.ContainerStatus{st.ContainerStatuses, st.InitContainerStatuses, st.EphemeralContainerStatuses} {
			for i := range list {
				if list[i].ContainerID == statusID {
					return e.WithStatus(), list[i].Name, true
				}
			}
		}
	}
	return nil, "", false
}

// PodNames returns the namespace and name of every pod, sorted (the agent
// API's /pods walks them, copying one pod at a time: api.PodLister).
func (s *Statuses) PodNames() []types.NamespacedName {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.pods.Names()
}

// Pods returns copies of all pods with their statuses, sorted by namespace
// and name.
func (s *Statuses) Pods() []*v1.Pod {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.pods.Pods()
}

// Len returns the number of pods.
func (s *Statuses) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.pods.Len()
}

// PodAdded implements pods.Listener: the pod's status is computed.
func (s *Statuses) PodAdded(p *pods.Pod) { s.put(p.Pod) }

// PodStatusChanged implements pods.Listener: the pod's status is
// recomputed from the kubelet's new status.
func (s *Statuses) PodStatusChanged(p *pods.Pod) { s.put(p.Pod) }

// PodRemoved implements pods.Listener: the pod is forgotten.
func (s *Statuses) PodRemoved(p *pods.Pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pods.Delete(p.Pod.UID)
}

func (s *Statuses) put(pod *v1.Pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := &podstatus.Entry{Pod: pod}
	s.pods.Put(e)
	s.computeLocked(e)
}

// ProbeResult implements verdicts.Consumer: a startup or readiness result
// change recomputes that pod's status (its Started or Ready moved).
// Liveness results change neither. It does not block beyond the
// recomputation of one pod.
func (s *Statuses) ProbeResult(t runtime.ProbeType, u results.Update) {
	if t != runtime.Startup && t != runtime.Readiness {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.pods.Get(u.PodUID); ok {
		s.computeLocked(e)
	}
}

// Resync recomputes every pod's status: the kubelet's periodic pod sync,
// whose status generation triggers readiness of started containers that are
// not ready (M7c). Wire it to the reconciler's OnSync.
func (s *Statuses) Resync() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.pods.All() {
		s.computeLocked(e)
	}
}

// computeLocked sets e.Status from the kubelet's status and the prober's
// verdicts (see Statuses). Caller holds mu for writing.
func (s *Statuses) computeLocked(e *podstatus.Entry) {
	kubelet := &e.Pod.Status
	status := kubelet.DeepCopy()
	if s.prober == nil {
		e.Status = *status
		return
	}
	// Like the kubelet's generateAPIPodStatus, Ready starts from false and
	// UpdatePodStatus sets it for started containers (M7b leaves a
	// not-started container's Ready at that false); Started is cleared so
	// that M8 decides from probed's own startup results and workers.
	for _, all := range [][]v1.ContainerStatus{status.ContainerStatuses, status.InitContainerStatuses} {
		for i := range all {
			all[i].Started = nil
			all[i].Ready = false
		}
	}
	// The pod carries the kubelet's status: M9 reads its Ready condition.
	s.prober.UpdatePodStatus(context.Background(), e.Pod, status)
	andStarted(status.ContainerStatuses, kubelet.ContainerStatuses)
	andStarted(status.InitContainerStatuses, kubelet.InitContainerStatuses)
	e.Status = *status
}

// andStarted sets each probed Started to (kubelet's started AND probed's
// verdict), and Ready to false where that is false (a container that has
// not started is not ready); the two lists are the same statuses in the
// same order.
func andStarted(probed, kubelet []v1.ContainerStatus) {
	for i := range probed {
		started := probed[i].Started != nil && *probed[i].Started &&
			kubelet[i].Started != nil && *kubelet[i].Started
		probed[i].Started = &started
		if !started {
			probed[i].Ready = false
		}
	}
}
