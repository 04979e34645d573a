// Package store is the agent's pod status store: the part of the kubelet
// that holds each pod's runtime status (container IDs, states, start times,
// restart counts), serves it to the prober manager (manager.StatusProvider),
// regenerates the API status after every probe result (UpdatePodStatus plus
// the ContainersReady and Ready conditions), and plays the container runtime
// for the probe state machine: a liveness or startup Failure restarts the
// container (spec K1, K2; BR-13, BR-14).
package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/probed/probed/manager/results"
)

// Prober is the part of manager.Manager the store drives.
type Prober interface {
	UpdatePodStatus(ctx context.Context, pod *v1.Pod, status *v1.PodStatus)
}

// Restart describes a container restart decided by a probe (K2).
type Restart struct {
	Pod            *v1.Pod
	Container      string
	OldContainerID string
	NewContainerID string
	RestartCount   int32
	// Reason is "LivenessProbe" or "StartupProbe"; Message the kubelet's
	// kill message ("Container app failed liveness probe, will be restarted").
	Reason  string
	Message string
	// GracePeriodSeconds is the kill grace period the kubelet would use
	// (K3): the probe's terminationGracePeriodSeconds if set, else the
	// pod's (default 30).
	GracePeriodSeconds int64
	// Restarted is false when the restart policy does not restart the
	// container: it is then left terminated.
	Restarted bool
}

// Options configure a Store.
type Options struct {
	Clock  clock.Clock  // nil: real clock
	Logger *slog.Logger // nil: slog.Default()
	PodIP  string       // pod IP for pods whose manifest has no status; default 127.0.0.1
	// OnRestart is called after each restart decision, outside the store's lock.
	OnRestart func(Restart)
	// OnChange is called, under the store's lock, after each status
	// regeneration that changed something; it must not call the store.
	OnChange func(pod *v1.Pod, status *v1.PodStatus)
}

// entry is one pod: its spec (as loaded) and its current API status.
type entry struct {
	pod    *v1.Pod
	status v1.PodStatus
}

// Store holds the pods' statuses. All methods are safe for concurrent use.
type Store struct {
	clock clock.Clock
	log   *slog.Logger
	podIP string
	opts  Options

	mu    sync.RWMutex
	pods  map[types.UID]*entry
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
	return &Store{clock: opts.Clock, log: opts.Logger, podIP: opts.PodIP, opts: opts, pods: map[types.UID]*entry{}, saved: map[types.UID]*v1.PodStatus{}}
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
	e, ok := s.pods[uid]
	if !ok {
		return v1.PodStatus{}, false
	}
	return *e.status.DeepCopy(), true
}

// Pod returns a copy of the pod with its current status.
func (s *Store) Pod(uid types.UID) (*v1.Pod, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	e, ok := s.pods[uid]
	if !ok {
		return nil, false
	}
	return withStatus(e), true
}

// PodByName returns a copy of the pod namespace/name with its status.
func (s *Store) PodByName(namespace, name string) (*v1.Pod, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, e := range s.pods {
		if e.pod.Namespace == namespace && e.pod.Name == name {
			return withStatus(e), true
		}
	}
	return nil, false
}

// Pods returns copies of all pods with their statuses, sorted by
// namespace and name.
func (s *Store) Pods() []*v1.Pod {
	s.mu.RLock()
	out := make([]*v1.Pod, 0, len(s.pods))
	for _, e := range s.pods {
		out = append(out, withStatus(e))
	}
	s.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out
}

func withStatus(e *entry) *v1.Pod {
	p := e.pod.DeepCopy()
	p.Status = *e.status.DeepCopy()
	return p
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
		status.ContainerStatuses = completeStatuses(pod.Spec.Containers, status.ContainerStatuses, now, false)
		status.InitContainerStatuses = completeStatuses(pod.Spec.InitContainers, status.InitContainerStatuses, now, true)
	} else {
		status = initialStatus(pod, now, s.podIP)
	}
	pod = pod.DeepCopy()
	pod.Status = v1.PodStatus{}
	e := &entry{pod: pod, status: status}
	s.pods[pod.UID] = e
	s.version.Add(1)
	s.regenerateLocked(e)
	return pod
}

// Delete removes the pod.
func (s *Store) Delete(uid types.UID) {
	s.mu.Lock()
	delete(s.pods, uid)
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
	out := make([]SavedPod, 0, len(s.pods))
	for uid, e := range s.pods {
		out = append(out, SavedPod{UID: uid, Namespace: e.pod.Namespace, Name: e.pod.Name, Status: *e.status.DeepCopy()})
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

// Version counts the store's changes; it moves whenever a pod is added,
// removed or its status changes.
func (s *Store) Version() uint64 { return s.version.Load() }

// Len returns the number of pods.
func (s *Store) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.pods)
}

// Resync regenerates every pod's status (the kubelet's periodic pod sync:
// each status generation also triggers readiness of not-ready containers,
// M7c).
func (s *Store) Resync() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.pods {
		s.regenerateLocked(e)
	}
}

// Regenerate regenerates one pod's status.
func (s *Store) Regenerate(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.pods[uid]; ok {
		s.regenerateLocked(e)
	}
}

// Run consumes the three results managers' updates until ctx is done, like
// the kubelet's sync loop (K1): a liveness or startup Failure of a running
// container restarts it (K2); every update regenerates the pod's status.
// Updates are applied one at a time, so simultaneous changes of several
// containers are never lost (BR-25).
func (s *Store) Run(ctx context.Context, liveness, readiness, startup results.Manager) {
	for {
		var u results.Update
		var probe string
		select {
		case <-ctx.Done():
			return
		case u = <-liveness.Updates():
			probe = "liveness"
		case u = <-readiness.Updates():
			probe = "readiness"
		case u = <-startup.Updates():
			probe = "startup"
		}
		s.apply(u, probe)
	}
}

func (s *Store) apply(u results.Update, probe string) {
	s.mu.Lock()
	e, ok := s.pods[u.PodUID]
	if !ok {
		s.mu.Unlock()
		return // K1: updates for pods no longer known are ignored
	}
	// restartLocked changes e.status in place; the status before it is what
	// the Started/Ready changes of the restart are logged against.
	before := e.status.DeepCopy()
	var restart *Restart
	switch {
	case u.Result == results.Failure && (probe == "liveness" || probe == "startup"):
		restart = s.restartLocked(e, u.ContainerID.String(), probe)
	case probe == "readiness":
		// K1: the kubelet's status manager applies a readiness result to
		// the container and the pod's conditions at once
		// (SetContainerReadiness), before the next status generation, whose
		// M9 check reads the pod's Ready condition.
		if cs, _ := findContainer(e, u.ContainerID.String()); cs != nil && cs.Ready != (u.Result == results.Success) {
			cs.Ready = u.Result == results.Success
			setConditions(e.pod, &e.status, metav1.NewTime(s.clock.Now()))
		}
	case probe == "startup":
		// K1: SetContainerStartup.
		if cs, _ := findContainer(e, u.ContainerID.String()); cs != nil {
			started := u.Result == results.Success
			cs.Started = &started
		}
	}
	s.regenerateFromLocked(e, before)
	s.mu.Unlock()
	if restart != nil && s.opts.OnRestart != nil {
		s.opts.OnRestart(*restart)
	}
}

// restartLocked kills and, when the restart policy allows, restarts the
// container whose current ID is id (K2). Caller holds mu.
func (s *Store) restartLocked(e *entry, id, probe string) *Restart {
	cs, spec := findContainer(e, id)
	if cs == nil || cs.State.Running == nil {
		return nil // K2 acts on running containers only
	}
	now := metav1.NewTime(s.clock.Now())
	r := &Restart{
		Pod:                e.pod,
		Container:          cs.Name,
		OldContainerID:     cs.ContainerID,
		Reason:             "LivenessProbe",
		Message:            fmt.Sprintf("Container %s failed liveness probe", cs.Name),
		GracePeriodSeconds: gracePeriod(e.pod, spec, probe),
	}
	if probe == "startup" {
		r.Reason = "StartupProbe"
		r.Message = fmt.Sprintf("Container %s failed startup probe", cs.Name)
	}
	killed := v1.ContainerStateTerminated{
		ExitCode:    137,
		Reason:      "Error",
		Message:     r.Message,
		StartedAt:   cs.State.Running.StartedAt,
		FinishedAt:  now,
		ContainerID: cs.ContainerID,
	}
	cs.LastTerminationState = v1.ContainerState{Terminated: &killed}
	cs.Ready = false
	cs.Started = ptr(false)
	if spec != nil && !shouldRestart(spec, &e.pod.Spec, killed.ExitCode) {
		cs.State = v1.ContainerState{Terminated: &killed}
		s.log.Info("container killed", "pod", klog(e.pod), "container", cs.Name, "reason", r.Reason, "containerID", cs.ContainerID, "restarted", false)
		return r
	}
	r.Message += ", will be restarted"
	cs.RestartCount++
	cs.ContainerID = newContainerID()
	cs.State = v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: now}}
	r.NewContainerID = cs.ContainerID
	r.RestartCount = cs.RestartCount
	r.Restarted = true
	s.log.Info("container restarted", "pod", klog(e.pod), "container", cs.Name, "reason", r.Reason,
		"oldContainerID", r.OldContainerID, "containerID", cs.ContainerID, "restartCount", cs.RestartCount)
	return r
}

// regenerateLocked is the kubelet's generateAPIPodStatus for the parts the
// prober owns: Started/Ready via UpdatePodStatus (M7), then the
// ContainersReady and Ready conditions and the phase. Caller holds mu.
func (s *Store) regenerateLocked(e *entry) { s.regenerateFromLocked(e, &e.status) }

// regenerateFromLocked regenerates e's status; changes are logged (and
// OnChange called) relative to before. Caller holds mu.
func (s *Store) regenerateFromLocked(e *entry, before *v1.PodStatus) {
	status := e.status.DeepCopy()
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
		pod := *e.pod
		pod.Status = e.status
		s.prober.UpdatePodStatus(context.Background(), &pod, status)
	}
	now := metav1.NewTime(s.clock.Now())
	status.Phase = phase(e.pod, status)
	setConditions(e.pod, status, now)
	changed := logChanges(s.log, e.pod, before, status)
	e.status = *status
	if changed {
		s.version.Add(1)
	}
	if changed && s.opts.OnChange != nil {
		s.opts.OnChange(e.pod, status.DeepCopy())
	}
}

func findContainer(e *entry, id string) (*v1.ContainerStatus, *v1.Container) {
	for i := range e.status.ContainerStatuses {
		cs := &e.status.ContainerStatuses[i]
		if cs.ContainerID == id {
			return cs, specByName(e.pod.Spec.Containers, cs.Name)
		}
	}
	for i := range e.status.InitContainerStatuses {
		cs := &e.status.InitContainerStatuses[i]
		if cs.ContainerID == id {
			return cs, specByName(e.pod.Spec.InitContainers, cs.Name)
		}
	}
	return nil, nil
}

func specByName(cs []v1.Container, name string) *v1.Container {
	for i := range cs {
		if cs[i].Name == name {
			return &cs[i]
		}
	}
	return nil
}

// gracePeriod is K3: the pod's deletion grace period if set, else for a
// probe kill the probe's terminationGracePeriodSeconds if set, else the
// pod's terminationGracePeriodSeconds (default 30).
func gracePeriod(pod *v1.Pod, c *v1.Container, probe string) int64 {
	if pod.DeletionGracePeriodSeconds != nil {
		return *pod.DeletionGracePeriodSeconds
	}
	if c != nil {
		p := c.LivenessProbe
		if probe == "startup" {
			p = c.StartupProbe
		}
		if p != nil && p.TerminationGracePeriodSeconds != nil {
			return *p.TerminationGracePeriodSeconds
		}
	}
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		return *pod.Spec.TerminationGracePeriodSeconds
	}
	return 30
}

// shouldRestart applies the container restart rules and policies (W8b).
func shouldRestart(c *v1.Container, spec *v1.PodSpec, exitCode int32) bool {
	for _, rule := range c.RestartPolicyRules {
		if rule.ExitCodes == nil {
			continue
		}
		in := false
		for _, v := range rule.ExitCodes.Values {
			in = in || v == exitCode
		}
		if (rule.ExitCodes.Operator == v1.ContainerRestartRuleOnExitCodesOpIn) == in {
			return rule.Action == v1.ContainerRestartRuleActionRestart
		}
	}
	policy := spec.RestartPolicy
	if c.RestartPolicy != nil {
		policy = v1.RestartPolicy(*c.RestartPolicy)
	}
	switch policy {
	case v1.RestartPolicyNever:
		return false
	case v1.RestartPolicyOnFailure:
		return exitCode != 0
	}
	return true
}

func newContainerID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "probed://" + hex.EncodeToString(b[:])
}

func ptr[T any](v T) *T { return &v }

func klog(pod *v1.Pod) string { return pod.Namespace + "/" + pod.Name }

// StartedAtOf is a convenience for tests and the API: the StartedAt of a
// running container status, or the zero time.
func StartedAtOf(cs *v1.ContainerStatus) time.Time {
	if cs.State.Running == nil {
		return time.Time{}
	}
	return cs.State.Running.StartedAt.Time
}
