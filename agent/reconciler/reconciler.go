// Package reconciler applies the pods a source delivers to the prober
// manager: the part of the kubelet's pod workers and housekeeping that
// decides which probe workers exist. New pods get AddPod; removed pods the
// kubelet's termination sequence (StopLivenessAndStartup, RemovePod, K5); a
// pod whose probes changed under the same UID is stopped and added anew
// (workers keep the spec they were created with, M2); every SyncFrequency
// all pods get AddPod again (it is idempotent and recreates workers that
// ended, W5.2, W8), as each kubelet pod sync does. After the manager, the
// mode's status owner (a pods.Listener) is told.
//
// A pod's probes are worked out here once per pod and spec change
// (podprobes.Of with the mode's policy), unless its source did so already,
// carried across its status changes, and handed with the pod to the manager
// (manager.AddPodProbes) and every listener; Probes looks them up for the
// consumers that start from a pod UID.
//
// All timing goes through the injected clock, so the reconciler is tested on
// a fake clock.
package reconciler

import (
	"context"
	"log/slog"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/clock"

	"github.com/probed/probed/agent/pods"
	"github.com/probed/probed/manager"
	"github.com/probed/probed/manager/podprobes"
)

// ReaddInterval is how often AddPod is repeated for a pod whose UID still
// has workers stopping: workers exit asynchronously (M6) and AddPod skips a
// key whose worker still exists (M2), so the replacement workers are created
// as soon as the old ones are gone. Its timer runs only while some UID has
// workers stopping: an agent whose pods do not change does not wake for it.
const ReaddInterval = 100 * time.Millisecond

// Options configure a Reconciler.
type Options struct {
	// Manager receives AddPod, StopLivenessAndStartup, RemovePod and
	// CleanupPods (required).
	Manager manager.Manager
	// Listener is told of every change after the manager (required).
	Listener pods.Listener
	// Probes is the mode's policy the probes of a pod that comes without
	// them (pods.Pod.Probes) are worked out with; the zero policy is
	// manifest mode's (the spec's probes and the annotation's).
	Probes podprobes.Policy
	// SyncFrequency is the interval of the periodic AddPod of every pod
	// (the kubelet's --sync-frequency); default 1 min.
	SyncFrequency time.Duration
	// OnSync, when set, is called after each periodic AddPod round (the
	// manifest store regenerates the statuses there).
	OnSync func()
	// OnWorkersGone, when set, is called once the workers of a removed pod
	// have surely exited: a run in flight at the removal may have recorded
	// results after PodRemoved (the agent forgets the pod's history again).
	OnWorkersGone func(uid types.UID)
	// Clock; nil: the real clock.
	Clock clock.WithTicker
	// Logger; nil: slog.Default().
	Logger *slog.Logger
}

// Reconciler keeps the manager's pods equal to a source's. It is safe for
// concurrent use.
type Reconciler struct {
	opts  Options
	clock clock.WithTicker
	log   *slog.Logger

	mu      sync.Mutex
	current map[types.UID]*pods.Pod
	// views are the current pods' probes, apart from mu: the consumers
	// that look them up (Probes) never wait for an Apply.
	viewsMu sync.RWMutex
	views   map[types.UID]*podprobes.View
	// stopping holds the UIDs whose workers were stopped and may still
	// exist, until when (see ReaddInterval).
	stopping map[types.UID]time.Time
	// readd fires every ReaddInterval while stopping is not empty (nil
	// otherwise): made in stopLocked, so it exists before the clock can
	// move on (Run is woken to wait on it), and reset by readdPending.
	readd     clock.Timer
	readdMade chan struct{}
}

// New returns a Reconciler with no pods.
func New(opts Options) *Reconciler {
	if opts.SyncFrequency <= 0 {
		opts.SyncFrequency = time.Minute
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Reconciler{opts: opts, clock: opts.Clock, log: opts.Logger,
		current: map[types.UID]*pods.Pod{}, views: map[types.UID]*podprobes.View{}, stopping: map[types.UID]time.Time{}, readdMade: make(chan struct{}, 1)}
}

// Apply applies one update from a source.
func (r *Reconciler) Apply(u pods.Update) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch u.Op {
	case pods.Set:
		seen := make(map[types.UID]bool, len(u.Pods))
		for _, p := range u.Pods {
			seen[p.Pod.UID] = true
		}
		for uid, cur := range r.current {
			if !seen[uid] {
				r.removeLocked(cur)
			}
		}
		for _, p := range u.Pods {
			r.upsertLocked(p)
		}
		r.cleanupLocked()
	case pods.Upsert:
		for _, p := range u.Pods {
			r.upsertLocked(p)
		}
	case pods.Remove:
		for _, p := range u.Pods {
			if cur, ok := r.current[p.Pod.UID]; ok {
				r.removeLocked(cur)
			}
		}
		r.cleanupLocked()
	}
}

func (r *Reconciler) upsertLocked(p *pods.Pod) {
	ctx := context.Background()
	uid := p.Pod.UID
	cur, ok := r.current[uid]
	switch {
	case !ok:
		p = r.withProbes(p, nil)
		r.setLocked(p)
		// Workers first, so the first status generation already knows
		// the pod's probes (and triggers readiness at once, M7c).
		manager.AddPodProbes(ctx, r.opts.Manager, p.Pod, p.Probes)
		r.opts.Listener.PodAdded(p)
		r.log.Info("pod added", "pod", podName(p.Pod), "podUID", string(uid), "origin", p.Origin)
	case cur.SpecHash != p.SpecHash:
		r.stopLocked(cur)
		p = r.withProbes(p, nil)
		r.setLocked(p)
		r.opts.Listener.PodAdded(p)
		manager.AddPodProbes(ctx, r.opts.Manager, p.Pod, p.Probes) // (again every ReaddInterval while the old workers exit)
		r.log.Info("pod replaced: its probes changed", "pod", podName(p.Pod), "podUID", string(uid), "origin", p.Origin)
	case cur.StatusHash != p.StatusHash:
		p = r.withProbes(p, cur.Probes)
		r.setLocked(p)
		r.opts.Listener.PodStatusChanged(p)
		manager.AddPodProbes(ctx, r.opts.Manager, p.Pod, p.Probes) // recreates workers that ended (W5.2, W8)
	default:
		r.setLocked(r.withProbes(p, cur.Probes)) // same pod; keep the latest origin
	}
}

// withProbes returns p with its probes: those it came with, else same (the
// current pod's, for the same spec), else worked out now with the mode's
// policy. The source's Pod is not changed.
func (r *Reconciler) withProbes(p *pods.Pod, same *podprobes.View) *pods.Pod {
	if p.Probes != nil {
		return p
	}
	q := *p
	q.Probes = same
	if q.Probes == nil {
		q.Probes = podprobes.Of(p.Pod, r.opts.Probes)
	}
	return &q
}

// setLocked makes p the current pod of its UID. Caller holds mu.
func (r *Reconciler) setLocked(p *pods.Pod) {
	r.current[p.Pod.UID] = p
	r.viewsMu.Lock()
	r.views[p.Pod.UID] = p.Probes
	r.viewsMu.Unlock()
}

// Probes returns the probes of the current pod with the UID, as worked out
// for its spec (podprobes.View), or false when there is no such pod.
func (r *Reconciler) Probes(uid types.UID) (*podprobes.View, bool) {
	r.viewsMu.RLock()
	defer r.viewsMu.RUnlock()
	v, ok := r.views[uid]
	return v, ok
}

func (r *Reconciler) removeLocked(cur *pods.Pod) {
	r.stopLocked(cur)
	delete(r.current, cur.Pod.UID)
	r.viewsMu.Lock()
	delete(r.views, cur.Pod.UID)
	r.viewsMu.Unlock()
	r.opts.Listener.PodRemoved(cur)
	r.log.Info("pod removed", "pod", podName(cur.Pod), "podUID", string(cur.Pod.UID), "origin", cur.Origin)
}

// cleanupLocked is the kubelet's CleanupPods with the current pods as the
// desired set (M5).
func (r *Reconciler) cleanupLocked() {
	desired := make(map[types.UID]sets.Empty, len(r.current))
	for uid := range r.current {
		desired[uid] = sets.Empty{}
	}
	r.opts.Manager.CleanupPods(desired)
}

// stopLocked stops the pod's workers (K5) and remembers its UID until they
// have surely exited: their in-flight run (up to 3 attempts of the longest
// probe timeout, P2) plus slack.
func (r *Reconciler) stopLocked(cur *pods.Pod) {
	pod := cur.Pod
	r.opts.Manager.StopLivenessAndStartup(pod)
	r.opts.Manager.RemovePod(pod)
	r.stopping[pod.UID] = r.clock.Now().Add(2*time.Second + 3*cur.Probes.LongestTimeout())
	if r.readd == nil {
		r.readd = r.clock.NewTimer(ReaddInterval)
		select {
		case r.readdMade <- struct{}{}:
		default:
		}
	}
}

// Run repeats AddPod every ReaddInterval for pods whose workers are
// stopping, and for every pod every SyncFrequency (then calls OnSync),
// until ctx is done.
func (r *Reconciler) Run(ctx context.Context) {
	sync := r.clock.NewTicker(r.opts.SyncFrequency)
	defer sync.Stop()
	defer r.stopReadd()
	for {
		r.mu.Lock()
		var readd <-chan time.Time
		if r.readd != nil {
			readd = r.readd.C()
		}
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-sync.C():
			r.addAll()
			if r.opts.OnSync != nil {
				r.opts.OnSync()
			}
		case <-r.readdMade:
		case <-readd:
			r.readdPending()
		}
	}
}

func (r *Reconciler) stopReadd() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.readd != nil {
		r.readd.Stop()
		r.readd = nil
	}
}

// readdPending calls AddPod again for current pods whose UID has workers
// stopping.
func (r *Reconciler) readdPending() {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock.Now()
	for uid, until := range r.stopping {
		if p, ok := r.current[uid]; ok {
			manager.AddPodProbes(context.Background(), r.opts.Manager, p.Pod, p.Probes)
		}
		if now.After(until) {
			delete(r.stopping, uid)
			if _, ok := r.current[uid]; !ok && r.opts.OnWorkersGone != nil {
				r.opts.OnWorkersGone(uid)
			}
		}
	}
	if r.readd != nil {
		if len(r.stopping) == 0 {
			r.readd.Stop()
			r.readd = nil
		} else {
			r.readd.Reset(ReaddInterval)
		}
	}
}

// addAll calls AddPod for every pod, as each kubelet pod sync does (M2).
func (r *Reconciler) addAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.current {
		manager.AddPodProbes(context.Background(), r.opts.Manager, p.Pod, p.Probes)
	}
}

// Pods returns the current pods, in no particular order.
func (r *Reconciler) Pods() []*pods.Pod {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*pods.Pod, 0, len(r.current))
	for _, p := range r.current {
		out = append(out, p)
	}
	return out
}

// DrainBound bounds the wait for in-flight probes at shutdown: the longest
// timeout of the current pods' probes (podprobes.View.LongestTimeout: the
// probes probed runs, millisecond offsets included) plus one second, at
// least two seconds. A run still retrying a handler error past it (P2) is
// abandoned: its attempts errored, so its result would have been discarded
// (W5.10).
func (r *Reconciler) DrainBound() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	longest := time.Second
	for _, p := range r.current {
		longest = max(longest, p.Probes.LongestTimeout())
	}
	return longest + time.Second
}

func podName(pod *v1.Pod) string { return pod.Namespace + "/" + pod.Name }
