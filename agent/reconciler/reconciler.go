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
	"github.com/probed/probed/manager/customprobe"
	"github.com/probed/probed/runtime"
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
		current: map[types.UID]*pods.Pod{}, stopping: map[types.UID]time.Time{}, readdMade: make(chan struct{}, 1)}
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
		r.current[uid] = p
		// Workers first, so the first status generation already knows
		// the pod's probes (and triggers readiness at once, M7c).
		r.opts.Manager.AddPod(ctx, p.Pod)
		r.opts.Listener.PodAdded(p)
		r.log.Info("pod added", "pod", podName(p.Pod), "podUID", string(uid), "origin", p.Origin)
	case cur.SpecHash != p.SpecHash:
		r.stopLocked(cur.Pod)
		r.current[uid] = p
		r.opts.Listener.PodAdded(p)
		r.opts.Manager.AddPod(ctx, p.Pod) // (again every ReaddInterval while the old workers exit)
		r.log.Info("pod replaced: its probes changed", "pod", podName(p.Pod), "podUID", string(uid), "origin", p.Origin)
	case cur.StatusHash != p.StatusHash:
		r.current[uid] = p
		r.opts.Listener.PodStatusChanged(p)
		r.opts.Manager.AddPod(ctx, p.Pod) // recreates workers that ended (W5.2, W8)
	default:
		r.current[uid] = p // same pod; keep the latest origin
	}
}

func (r *Reconciler) removeLocked(cur *pods.Pod) {
	r.stopLocked(cur.Pod)
	delete(r.current, cur.Pod.UID)
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
func (r *Reconciler) stopLocked(pod *v1.Pod) {
	r.opts.Manager.StopLivenessAndStartup(pod)
	r.opts.Manager.RemovePod(pod)
	r.stopping[pod.UID] = r.clock.Now().Add(2*time.Second + 3*LongestTimeout(pod))
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
			r.opts.Manager.AddPod(context.Background(), p.Pod)
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
		r.opts.Manager.AddPod(context.Background(), p.Pod)
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
// probe timeout of the current pods plus one second, at least two seconds.
// A run still retrying a handler error past it (P2) is abandoned: its
// attempts errored, so its result would have been discarded (W5.10).
func (r *Reconciler) DrainBound() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	longest := time.Second
	for _, p := range r.current {
		longest = max(longest, LongestTimeout(p.Pod))
	}
	return longest + time.Second
}

// LongestTimeout is the longest timeout of the pod's probes
// (runtime.TimingOf): the spec probes of its containers and init containers
// and the custom probes of its probed.io/probes annotation, with their
// timeoutMilliseconds; at least one second.
func LongestTimeout(pod *v1.Pod) time.Duration {
	longest := time.Second
	consider := func(pr *v1.Probe, ms *runtime.Milliseconds) {
		if pr != nil {
			longest = max(longest, runtime.TimingOf(pr, ms).Timeout)
		}
	}
	for _, cs := range [][]v1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for i := range cs {
			consider(cs[i].LivenessProbe, nil)
			consider(cs[i].ReadinessProbe, nil)
			consider(cs[i].StartupProbe, nil)
		}
	}
	custom, _ := customprobe.Parse(pod, nil)
	for i := range custom {
		consider(&custom[i].Probe, custom[i].Offsets())
	}
	return longest
}

func podName(pod *v1.Pod) string { return pod.Namespace + "/" + pod.Name }
