// Package store is the agent's pod status cache in manifest mode, where
// probed plays the kubelet: it holds each pod's runtime status (container
// IDs, states, start times, restart counts), serves it to the prober manager
// (manager.StatusProvider), applies readiness and startup results to it and
// regenerates the API status after every change — UpdatePodStatus (M7), then
// the kubelet's conditions and phase (package kubeletstatus). It is the
// reconciler's pods.Listener and a verdicts.Consumer. The container simulator
// (package simulator) changes containers through Mutate; persistence
// (package state) goes through Export and Restore.
package store

import (
	"context"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/probed/probed/agent/kubeletstatus"
	"github.com/probed/probed/agent/pods"
	"github.com/probed/probed/agent/podstatus"
	"github.com/probed/probed/manager/results"
	"github.com/probed/probed/runtime"
)

// Prober is the part of manager.Manager the store drives.
type Prober interface {
	UpdatePodStatus(ctx context.Context, pod *v1.Pod, status *v1.PodStatus)
}

// Options configure a Store.
type Options struct {
	Clock  clock.Clock  // nil: real clock
	Logger *slog.Logger // nil: slog.Default()
	PodIP  string       // pod IP for pods whose manifest has no status; default 127.0.0.1
}

// Store holds the pods' statuses. All methods are safe for concurrent use.
type Store struct {
	clock clock.Clock
	log   *slog.Logger
	podIP string

	mu    sync.RWMutex
	pods  podstatus.Table             // each pod's spec (as loaded) and its current API status
	saved map[types.UID]*v1.PodStatus // from Restore, used by Put
	// version counts changes, for the state writer.
	version atomic.Uint64
	prober  Prober
}

// New returns an empty Store.
func New(opts Options) *Store {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.PodIP == "" {
		opts.PodIP = "127.0.0.1"
	}
	return &Store{clock: opts.Clock, log: opts.Logger, podIP: opts.PodIP, saved: map[types.UID]*v1.PodStatus{}}
}

// SetProber sets the manager whose UpdatePodStatus fills Started/Ready.
func (s *Store) SetProber(p Prober) {
	s.mu.Lock()
	s.prober = p
	s.mu.Unlock()
}

// GetPodStatus implements manager.StatusProvider.
func (s *Store) GetPodStatus(uid types.UID) (v1.PodStatus, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.pods.Status(uid)
}

// Pod returns a copy of the pod with its current status.
func (s *Store) Pod(uid types.UID) (*v1.Pod, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.pods.Pod(uid)
}

// PodByName returns a copy of the pod namespace/name with its status.
func (s *Store) PodByName(namespace, name string) (*v1.Pod, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.pods.PodByName(namespace, name)
}

// PodNames returns the namespace and name of every pod, sorted.
func (s *Store) PodNames() []types.NamespacedName {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.pods.Names()
}

// Pods returns copies of all pods with their statuses, sorted by
// namespace and name.
func (s *Store) Pods() []*v1.Pod {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.pods.Pods()
}

// Put adds a pod or replaces its spec and status. When the pod has a status
// in its manifest (status.containerStatuses or podIP) that status is used;
// otherwise every container counts as running since now, with the store's
// pod IP. Containers without a status get one, running since now. It
// returns the pod as the store keeps it.
func (s *Store) Put(pod *v1.Pod) *v1.Pod {
	now := metav1.NewTime(s.clock.Now())
	s.mu.Lock()
	defer s.mu.Unlock()
	var status v1.PodStatus
	if saved, ok := s.saved[pod.UID]; ok {
		// The last status written before the agent stopped (--state-dir):
		// container IDs, start times, restart counts, Started/Ready and
		// conditions carry over (M8, M9). It is used once.
		delete(s.saved, pod.UID)
		status = *saved.DeepCopy()
		status.ContainerStatuses = kubeletstatus.Complete(pod.Spec.Containers, status.ContainerStatuses, now, false)
		status.InitContainerStatuses = kubeletstatus.Complete(pod.Spec.InitContainers, status.InitContainerStatuses, now, true)
		// A container saved waiting in CrashLoopBackOff starts now: the
		// back-off was in memory (docs/operations.md).
		kubeletstatus.StartBackedOff(status.ContainerStatuses, now)
		kubeletstatus.StartBackedOff(status.InitContainerStatuses, now)
	} else {
		status = kubeletstatus.Initial(pod, now, s.podIP)
	}
	pod = pod.DeepCopy()
	pod.Status = v1.PodStatus{}
	e := &podstatus.Entry{Pod: pod, Status: status}
	s.pods.Put(e)
	s.version.Add(1)
	s.regenerateLocked(e)
	return pod
}

// Delete removes the pod.
func (s *Store) Delete(uid types.UID) {
	s.mu.Lock()
	s.pods.Delete(uid)
	s.version.Add(1)
	s.mu.Unlock()
}

// SavedPod is the persisted state of one pod (--state-dir).
type SavedPod struct {
	UID       types.UID    `json:"uid"`
	Namespace string       `json:"namespace"`
	Name      string       `json:"name"`
	Status    v1.PodStatus `json:"status"`
}

// Export returns every pod's current status for persisting, and the
// store's version at that moment.
func (s *Store) Export() ([]SavedPod, uint64) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]SavedPod, 0, s.pods.Len())
	for uid, e := range s.pods.All() {
		out = append(out, SavedPod{UID: uid, Namespace: e.Pod.Namespace, Name: e.Pod.Name, Status: *e.Status.DeepCopy()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].UID < out[j].UID })
	return out, s.version.Load()
}

// Restore hands the store statuses saved by an earlier run: a pod Put
// later with the same UID starts from its saved status instead of a fresh
// one. Call it before the first Put.
func (s *Store) Restore(pods []SavedPod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range pods {
		st := pods[i].Status
		s.saved[pods[i].UID] = &st
	}
}

// Resync regenerates every pod's status (the kubelet's periodic pod sync:
// each status generation also triggers readiness of not-ready containers,
// M7c).
func (s *Store) Resync() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.pods.All() {
		s.regenerateLocked(e)
	}
}

// PodAdded implements pods.Listener: the pod is put into the store (Put).
func (s *Store) PodAdded(p *pods.Pod) { s.Put(p.Pod) }

// PodStatusChanged implements pods.Listener: the pod's manifest status
// changed, so its status starts afresh from it (Put).
func (s *Store) PodStatusChanged(p *pods.Pod) { s.Put(p.Pod) }

// PodRemoved implements pods.Listener (Delete).
func (s *Store) PodRemoved(p *pods.Pod) { s.Delete(p.Pod.UID) }

// ProbeResult implements verdicts.Consumer, like the kubelet's sync loop
// (K1): a readiness result is applied to the container and the pod's
// conditions at once (the status manager's SetContainerReadiness, before the
// next status generation, whose M9 check reads the pod's Ready condition); a
// startup result sets Started (SetContainerStartup); then the pod's status
// is regenerated. Updates for pods no longer known are ignored (K1).
// Liveness and startup failures are the simulator's (package simulator).
func (s *Store) ProbeResult(t runtime.ProbeType, u results.Update) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.pods.Get(u.PodUID)
	if !ok {
		return
	}
	before := e.Status.DeepCopy()
	switch t {
	case runtime.Readiness:
		if cs := findContainer(e, u.ContainerID.String()); cs != nil && cs.Ready != (u.Result == results.Success) {
			cs.Ready = u.Result == results.Success
			kubeletstatus.SetConditions(e.Pod, &e.Status, metav1.NewTime(s.clock.Now()))
		}
	case runtime.Startup:
		if cs := findContainer(e, u.ContainerID.String()); cs != nil && u.Result != results.Failure {
			started := u.Result == results.Success
			cs.Started = &started
		}
	}
	s.regenerateFromLocked(e, before)
}

// Mutate changes the status of pod uid in place with change, under the
// store's lock, then regenerates it when change reports a change. It reports
// whether the pod exists. change must not call the store; pod is read-only.
func (s *Store) Mutate(uid types.UID, change func(pod *v1.Pod, status *v1.PodStatus) bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.pods.Get(uid)
	if !ok {
		return false
	}
	before := e.Status.DeepCopy()
	if change(e.Pod, &e.Status) {
		s.version.Add(1)
		s.regenerateFromLocked(e, before)
	}
	return true
}

// regenerateLocked is the kubelet's generateAPIPodStatus for the parts the
// prober owns: Started/Ready via UpdatePodStatus (M7), then the
// ContainersReady and Ready conditions and the phase. Caller holds mu.
func (s *Store) regenerateLocked(e *podstatus.Entry) { s.regenerateFromLocked(e, &e.Status) }

// regenerateFromLocked regenerates e's status; changes are logged
// relative to before. Caller holds mu.
func (s *Store) regenerateFromLocked(e *podstatus.Entry, before *v1.PodStatus) {
	status := e.Status.DeepCopy()
	// Like the kubelet's generateAPIPodStatus, container statuses start
	// from the runtime's view: not Ready until UpdatePodStatus says so
	// (M7b leaves a not-started container's Ready at that false); Started
	// carries over (M8).
	for i := range status.ContainerStatuses {
		status.ContainerStatuses[i].Ready = false
	}
	for i := range status.InitContainerStatuses {
		status.InitContainerStatuses[i].Ready = false
	}
	if s.prober != nil {
		// UpdatePodStatus reads the pod's last published Ready condition
		// (M9) from pod.Status.
		pod := *e.Pod
		pod.Status = e.Status
		s.prober.UpdatePodStatus(context.Background(), &pod, status)
	}
	now := metav1.NewTime(s.clock.Now())
	status.Phase = kubeletstatus.Phase(e.Pod, status)
	kubeletstatus.SetConditions(e.Pod, status, now)
	changed := logChanges(s.log, e.Pod, before, status)
	e.Status = *status
	if changed {
		s.version.Add(1)
	}
}

// findContainer returns the status of the container whose current ID is id.
func findContainer(e *podstatus.Entry, id string) *v1.ContainerStatus {
	for _, list := range [][]v1.ContainerStatus{e.Status.ContainerStatuses, e.Status.InitContainerStatuses} {
		for i := range list {
			if list[i].ContainerID == id {
				return &list[i]
			}
		}
	}
	return nil
}

func klog(pod *v1.Pod) string { return pod.Namespace + "/" + pod.Name }

// logChanges logs one structured line per Started or Ready change of a
// container and per pod Ready change; it reports whether anything changed.
func logChanges(log *slog.Logger, pod *v1.Pod, before, after *v1.PodStatus) bool {
	changed := false
	compare := func(old, cur []v1.ContainerStatus) {
		for i := range cur {
			c := &cur[i]
			var o *v1.ContainerStatus
			for j := range old {
				if old[j].Name == c.Name {
					o = &old[j]
					break
				}
			}
			if o == nil || boolOf(o.Started) != boolOf(c.Started) {
				changed = true
				log.Info("container started changed", "pod", klog(pod), "podUID", string(pod.UID), "container", c.Name, "containerID", c.ContainerID, "started", boolOf(c.Started))
			}
			if o == nil || o.Ready != c.Ready {
				changed = true
				log.Info("container ready changed", "pod", klog(pod), "podUID", string(pod.UID), "container", c.Name, "containerID", c.ContainerID, "ready", c.Ready)
			}
			if o != nil && (o.ContainerID != c.ContainerID || o.RestartCount != c.RestartCount) {
				changed = true
			}
		}
	}
	compare(before.ContainerStatuses, after.ContainerStatuses)
	compare(before.InitContainerStatuses, after.InitContainerStatuses)
	if kubeletstatus.ConditionTrue(before.Conditions, v1.PodReady) != kubeletstatus.ConditionTrue(after.Conditions, v1.PodReady) || len(before.Conditions) == 0 {
		changed = true
		log.Info("pod ready changed", "pod", klog(pod), "podUID", string(pod.UID), "ready", kubeletstatus.ConditionTrue(after.Conditions, v1.PodReady))
	}
	if before.Phase != after.Phase {
		changed = true
	}
	return changed
}

func boolOf(b *bool) bool { return b != nil && *b }
