package actuate

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"github.com/probed/probed/agent/guards"
	"github.com/probed/probed/agent/kube/share"
)

// The restart budget's annotations: a pod opts in with RestartBudgetAnnotation,
// a count of its workload's pods ("1") or a share of them ("20%", rounded
// up) that the liveness action may act on within the window,
// RestartBudgetWindowAnnotation (a Go duration, DefaultRestartBudgetWindow,
// from MinRestartBudgetWindow to MaxRestartBudgetWindow).
const (
	RestartBudgetAnnotation       = "probed.io/restart-budget"
	RestartBudgetWindowAnnotation = "probed.io/restart-budget-window"
	DefaultRestartBudgetWindow    = 5 * time.Minute
	MinRestartBudgetWindow        = 10 * time.Second
	MaxRestartBudgetWindow        = time.Hour
)

// HeldByBudget begins the Why of a failure the restart budget holds back.
const HeldByBudget = "held back by the restart budget"

// BudgetOptions configure RestartBudget.
type BudgetOptions struct {
	// Pods lists the node's pods (the workload's pods are those with the
	// same controller); required.
	Pods func() []*v1.Pod
	// Clock times the windows (the Queue's).
	Clock clock.Clock
	// Registerer takes probed_restarts_held_total; nil: none registered.
	Registerer prometheus.Registerer
}

// Budget is the restart budget, the storm guard of the liveness actions: a
// Step around an action's (the outermost, so that a failure another guard
// refuses takes no room). Create it with RestartBudget.
type Budget struct {
	next  Step
	opts  BudgetOptions
	held  prometheus.Counter
	mu    sync.Mutex
	acted map[string]map[string]time.Time // workload → instance → when acted on
	// waiting: the failures held now, by instance (at most
	// DefaultRememberInstances: one beyond drops another), for the status
	// views and the counter.
	waiting map[string]guards.Held
}

// RestartBudget puts the restart budget around next: for a pod that opts
// in (RestartBudgetAnnotation), at most the budget of its workload's pods
// on this node — the pods with its controller (ReplicaSet, StatefulSet,
// DaemonSet, Job …; a pod without one is its own workload) — are acted on
// within the window; another failure the step acts on is held (Hold) until
// the oldest action leaves the window, so the Event and the verdict's
// announcement say it is held back and why, and nothing announces a
// restart that waits. A room is taken when the decision acts and given
// back when the attempt is refused after all. A pod without the annotation
// passes unchanged; an invalid annotation acts as without it, the decision
// saying why.
func RestartBudget(next Step, opts BudgetOptions) (*Budget, error) {
	if opts.Pods == nil {
		return nil, fmt.Errorf("actuate: the restart budget needs the node's pods")
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	b := &Budget{next: next, opts: opts, acted: map[string]map[string]time.Time{}, waiting: map[string]guards.Held{},
		held: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "probed_restarts_held_total",
			Help: "Liveness or startup failures whose action (restart or evict) the restart budget (" + RestartBudgetAnnotation + ") held back, each counted once.",
		})}
	if opts.Registerer != nil {
		if err := opts.Registerer.Register(b.held); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// Held lists the failures held back now, by namespace, pod and container.
func (b *Budget) Held() []guards.Held {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []guards.Held
	for _, h := range b.waiting {
		out = append(out, h)
	}
	slices.SortFunc(out, func(a, c guards.Held) int {
		return strings.Compare(a.Namespace+"/"+a.Pod+"/"+a.Container, c.Namespace+"/"+c.Pod+"/"+c.Container)
	})
	return out
}

// Plan implements Step.
func (b *Budget) Plan(f Failure) Plan {
	p := b.next.Plan(f)
	raw, opted := f.Pod.Annotations[RestartBudgetAnnotation]
	if p.Do != Act || !opted {
		b.mu.Lock()
		delete(b.waiting, instance(f))
		b.mu.Unlock()
		return p
	}
	budget, err := share.Parse(RestartBudgetAnnotation, raw)
	window := DefaultRestartBudgetWindow
	if err == nil {
		window, err = budgetWindow(f.Pod)
	}
	if err != nil {
		p.Why = joinWhy(p.Why, fmt.Sprintf("without a restart budget (%v)", err))
		return p
	}
	key, name := workload(f.Pod)
	size := 0
	for _, pod := range b.opts.Pods() {
		if k, _ := workload(pod); k == key {
			size++
		}
	}
	size = max(size, 1)
	allowed := budget.Of(size, true)
	inst := instance(f)

	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.opts.Clock.Now()
	b.prune(now)
	acted := b.acted[key]
	var oldest time.Time
	inWindow := 0
	for i, at := range acted {
		if i == inst {
			delete(b.waiting, inst)
			return b.taking(p, key, inst) // its room is taken already
		}
		if now.Sub(at) < window {
			inWindow++
			if oldest.IsZero() || at.Before(oldest) {
				oldest = at
			}
		}
	}
	if inWindow < allowed {
		if acted == nil {
			acted = map[string]time.Time{}
			b.acted[key] = acted
		}
		acted[inst] = now
		delete(b.waiting, inst)
		return b.taking(p, key, inst)
	}
	after := window
	if !oldest.IsZero() {
		after = oldest.Add(window).Sub(now)
	}
	why := fmt.Sprintf("%s: %d of %s's %d pods on this node acted on in the last %s, %s=%s allows %d", HeldByBudget,
		inWindow, name, size, window, RestartBudgetAnnotation, budget, allowed)
	if _, said := b.waiting[inst]; !said {
		b.held.Inc()
		if len(b.waiting) >= DefaultRememberInstances {
			for k := range b.waiting {
				delete(b.waiting, k)
				break
			}
		}
	}
	b.waiting[inst] = guards.Held{Guard: guards.RestartBudget, Namespace: f.Pod.Namespace, Pod: f.Pod.Name, Container: f.Container, Why: why}
	return Plan{Decision: Decision{Do: Hold, Why: why, After: after}}
}

// taking returns p whose attempt gives the room back when it is refused
// after all (the namespace lost its label).
func (b *Budget) taking(p Plan, key, inst string) Plan {
	act := p.Act
	p.Act = func(ctx context.Context) error {
		err := act(ctx)
		if _, refused := asRefusal(err); refused {
			b.mu.Lock()
			delete(b.acted[key], inst)
			b.mu.Unlock()
		}
		return err
	}
	return p
}

// prune forgets actions older than the longest window, under b.mu.
func (b *Budget) prune(now time.Time) {
	for key, acted := range b.acted {
		for inst, at := range acted {
			if now.Sub(at) >= MaxRestartBudgetWindow {
				delete(acted, inst)
			}
		}
		if len(acted) == 0 {
			delete(b.acted, key)
		}
	}
}

// budgetWindow is the pod's window: RestartBudgetWindowAnnotation or the
// default.
func budgetWindow(pod *v1.Pod) (time.Duration, error) {
	raw, ok := pod.Annotations[RestartBudgetWindowAnnotation]
	if !ok {
		return DefaultRestartBudgetWindow, nil
	}
	d, err := time.ParseDuration(raw)
	if len(raw) > share.MaxLen || err != nil || d < MinRestartBudgetWindow || d > MaxRestartBudgetWindow {
		shown := fmt.Sprintf("%q", raw)
		if len(raw) > share.MaxLen {
			shown = fmt.Sprintf("a value of %d bytes", len(raw))
		}
		return 0, fmt.Errorf("annotation %s: want a duration from %s to %s such as \"5m\", not %s", RestartBudgetWindowAnnotation,
			MinRestartBudgetWindow, MaxRestartBudgetWindow, shown)
	}
	return d, nil
}

// workload is the key and name of the pod's workload: its controller (the
// owner reference marked controller), else the pod itself.
func workload(pod *v1.Pod) (key, name string) {
	if ref := metav1.GetControllerOfNoCopy(pod); ref != nil {
		return string(ref.UID), fmt.Sprintf("%s %s/%s", ref.Kind, pod.Namespace, ref.Name)
	}
	return string(pod.UID), fmt.Sprintf("pod %s/%s", pod.Namespace, pod.Name)
}

func joinWhy(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
