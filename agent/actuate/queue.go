package actuate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"k8s.io/utils/lru"

	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/tenant"
)

// The Warning Events of a failure an action does not act on (after the
// kubelet's Unhealthy: the failure, and why nothing, or only this, was
// done).
const (
	ReasonLivenessProbeFailed = "LivenessProbeFailed"
	ReasonStartupProbeFailed  = "StartupProbeFailed"
)

// DefaultNamespaceShare is the fraction of a Queue's workers one namespace
// may hold at once (at least one): a quarter, as --namespace-pool-share's
// default for the probe pools, so that the failures of three namespaces
// still leave workers to a fourth.
const DefaultNamespaceShare = 0.25

// Options configure a Queue. Zero values take the defaults.
type Options struct {
	// Step is the action, with its guards around it. Required.
	Step Step
	// Texts are what the Queue's Events and logs say about it.
	Texts Texts
	// Recorder receives the Events (the agent's events.Tee). Required.
	Recorder runtime.Recorder
	// Clock drives the node's bucket, the backoff and the holds.
	Clock clock.WithTicker
	// Pacing: the node's bucket (every attempt takes a token), the backoff
	// of failed attempts, the attempts of one failure and the container
	// instances remembered.
	Pacing
	// Workers bounds the attempts in progress at once (default 1): a
	// restart lasts up to its grace period.
	Workers int
	// NamespaceShare is the fraction of Workers one namespace may hold at
	// once, at least one (default DefaultNamespaceShare); while others
	// wait, no more than its fair share of them (tenant.Shares).
	NamespaceShare float64
	// Services run beside the workers, until Run's context ends: what the
	// guards read (the namespace scope's informer).
	Services []func(ctx context.Context) error
	// Logger receives one line per decision and attempt (default
	// slog.Default()).
	Logger *slog.Logger
}

// Queue is the Actuator (and Announcer) of one action: the skeleton of the
// package doc. Create it with New and call Run, which owns its workers and
// services (call it with a cancelled context if the agent never starts:
// New starts the goroutine of the delays).
type Queue struct {
	opts    Options
	delays  workqueue.TypedDelayingInterface[*item]
	backoff workqueue.TypedRateLimiter[*item]
	node    *NodeBucket
	workers *tenant.Shares[string] // by namespace

	mu    sync.Mutex
	seen  *lru.Cache         // instance key -> *item
	lines map[string][]*item // due failures waiting for a worker, by namespace
}

var _ Announcer = (*Queue)(nil)

// item is one failed container instance; a pointer, so that a retried
// failure is the same key of the delays.
type item struct {
	f   Failure
	ref *v1.ObjectReference

	// Under Queue.mu: the plan (decided again while held) and whether
	// ContainerFailed took the failure.
	plan    Plan
	handled bool

	// Only the worker serving the item touches these (the delays never
	// hand one item to two workers).
	attempts int
	heldSaid bool // a Hold's Event was recorded
}

// New returns a Queue. Errors: no Step, no Recorder, a NamespaceShare
// outside 0..1.
func New(opts Options) (*Queue, error) {
	switch {
	case opts.Step == nil:
		return nil, errors.New("actuate: no step")
	case opts.Recorder == nil:
		return nil, errors.New("actuate: no event recorder")
	case opts.NamespaceShare < 0 || opts.NamespaceShare > 1:
		return nil, fmt.Errorf("actuate: namespace share %v: want a fraction of the workers between 0 (the default) and 1", opts.NamespaceShare)
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	opts.Pacing = opts.Pacing.WithDefaults()
	if opts.Workers <= 0 {
		opts.Workers = 1
	}
	if opts.NamespaceShare == 0 {
		opts.NamespaceShare = DefaultNamespaceShare
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	perNamespace := max(1, int64(math.Floor(float64(opts.Workers)*opts.NamespaceShare)))
	q := &Queue{
		opts:    opts,
		backoff: workqueue.NewTypedItemExponentialFailureRateLimiter[*item](opts.RetryBase, opts.RetryMax),
		node:    NewNodeBucket(opts.Interval, opts.Burst, opts.Clock),
		workers: tenant.NewShares[string](int64(opts.Workers), perNamespace),
		seen:    lru.New(opts.RememberInstances),
		lines:   map[string][]*item{},
		// Created here so that failures before Run are kept; Run stops
		// its goroutine.
		delays: workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[*item]{Clock: opts.Clock}),
	}
	return q, nil
}

// instance is the key of f's container instance: its container ID, or
// without one (a running container has one) the pod UID and container name.
func instance(f Failure) string {
	if f.ContainerID != "" {
		return f.ContainerID
	}
	return string(f.Pod.UID) + "/" + f.Container
}

// entry returns f's instance's item, planning it if it is new.
func (q *Queue) entry(f Failure) *item {
	key := instance(f)
	if v, ok := q.seen.Get(key); ok {
		return v.(*item)
	}
	// Planned outside the lock (a guard reads its informer's cache); a
	// concurrent first plan of the same instance keeps the one stored
	// first.
	p := q.opts.Step.Plan(f)
	q.mu.Lock()
	defer q.mu.Unlock()
	if v, ok := q.seen.Get(key); ok {
		return v.(*item)
	}
	it := &item{f: f, ref: runtime.ContainerRef(f.Pod, f.Container), plan: p}
	q.seen.Add(key, it)
	return it
}

// Consequence implements Announcer: what the action does about f (its
// instance's Decision, made now if it is new), as Texts.Say puts it.
func (q *Queue) Consequence(f Failure) string {
	if f.Pod == nil {
		return ""
	}
	it := q.entry(f)
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.opts.Texts.Say(it.plan.Decision)
}

// ContainerFailed implements Actuator: the first report of a container
// instance does what its Decision says; later ones do nothing. It never
// blocks.
func (q *Queue) ContainerFailed(f Failure) {
	if f.Pod == nil {
		return
	}
	it := q.entry(f)
	q.mu.Lock()
	if it.handled {
		q.mu.Unlock()
		return
	}
	it.handled = true
	d := it.plan.Decision
	q.mu.Unlock()
	if d.Do == Act {
		q.acting(it)
		q.delays.Add(it)
		return
	}
	q.decided(it, d)
}

// acting records that it is acted on.
func (q *Queue) acting(it *item) {
	if q.opts.Texts.Queued != "" {
		q.eventf(it, "Container %s failed %s probe, %s", it.f.Container, it.f.Probe.Lower(), q.opts.Texts.Queued)
	}
	q.log(it).Info("liveness action: " + q.opts.Texts.Work + " queued")
}

// decided records a Decision that does not act, and queues a held failure
// to be decided again.
func (q *Queue) decided(it *item, d Decision) {
	what := q.opts.Texts.Say(d)
	log := q.log(it)
	switch d.Do {
	case EventOnly:
		q.eventf(it, "Container %s failed %s probe; %s", it.f.Container, it.f.Probe.Lower(), what)
		log.Info("liveness action: event")
	case Hold:
		q.held(it, d.Why, d.After)
	default:
		q.eventf(it, "Container %s failed %s probe; %s", it.f.Container, it.f.Probe.Lower(), what)
		log.Info("liveness action: "+q.opts.Texts.Work+" refused", "why", d.Why)
	}
}

// held queues it to be tried again after after, recording why in an Event
// the first time.
func (q *Queue) held(it *item, why string, after time.Duration) {
	after = max(after, MinHold)
	if !it.heldSaid {
		it.heldSaid = true
		q.eventf(it, "Container %s failed %s probe; %s", it.f.Container, it.f.Probe.Lower(), q.opts.Texts.Say(Decision{Do: Hold, Why: why}))
	}
	q.delays.AddAfter(it, after)
	q.log(it).Info("liveness action: "+q.opts.Texts.Work+" held back", "why", why, "in", after)
}

// eventf records a Warning Event about it's probe's failure.
func (q *Queue) eventf(it *item, format string, args ...any) {
	reason := ReasonLivenessProbeFailed
	if it.f.Probe == runtime.Startup {
		reason = ReasonStartupProbeFailed
	}
	q.opts.Recorder.Eventf(it.ref, v1.EventTypeWarning, reason, format, args...)
}

func (q *Queue) log(it *item) *slog.Logger {
	return q.opts.Logger.With("pod", it.f.Pod.Namespace+"/"+it.f.Pod.Name, "container", it.f.Container, "containerID", it.f.ContainerID,
		"probe", it.f.Probe.Lower())
}

// Run serves the queue until ctx ends, runs the Services, then shuts the
// queue down and waits for its workers and services; an attempt in
// progress is abandoned (its context ends). It returns nil.
func (q *Queue) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, s := range q.opts.Services {
		wg.Go(func() { _ = s(ctx) })
	}
	wg.Go(func() {
		for {
			it, shutdown := q.delays.Get()
			if shutdown {
				return
			}
			if !q.due(it) {
				q.delays.Done(it)
				continue
			}
			// Each namespace's due failures wait in a line of their own,
			// in the order they came due, for a worker of the
			// namespace's share (tenant.Shares): one goroutine per
			// namespace waits, never in front of another namespace's
			// failures.
			ns := it.f.Pod.Namespace
			q.mu.Lock()
			line, waiting := q.lines[ns]
			q.lines[ns] = append(line, it)
			q.mu.Unlock()
			if !waiting {
				wg.Go(func() { q.serveLine(ctx, ns, &wg) })
			}
		}
	})
	<-ctx.Done()
	q.delays.ShutDown()
	wg.Wait()
	return nil
}

// due decides a held failure again, and reports whether it is to be
// attempted now.
func (q *Queue) due(it *item) bool {
	q.mu.Lock()
	d := it.plan.Decision
	q.mu.Unlock()
	if d.Do != Hold {
		return true
	}
	p := q.opts.Step.Plan(it.f)
	q.mu.Lock()
	it.plan = p
	q.mu.Unlock()
	switch p.Do {
	case Act:
		q.acting(it)
		return true
	case Hold:
		q.held(it, p.Why, p.After)
	default:
		q.decided(it, p.Decision)
	}
	return false
}

// serveLine gives namespace ns's due failures a worker each, in their
// order, while it has any.
func (q *Queue) serveLine(ctx context.Context, ns string, wg *sync.WaitGroup) {
	for {
		if err := q.workers.Take(ctx, ns, 1); err != nil {
			// Stopping: hand the line back.
			q.mu.Lock()
			line := q.lines[ns]
			delete(q.lines, ns)
			q.mu.Unlock()
			for _, it := range line {
				q.delays.Done(it)
			}
			return
		}
		q.mu.Lock()
		it := q.lines[ns][0]
		q.lines[ns] = q.lines[ns][1:]
		last := len(q.lines[ns]) == 0
		if last {
			delete(q.lines, ns)
		}
		q.mu.Unlock()
		// The token is taken here, in the line's order.
		token := q.token(it)
		wg.Go(func() {
			defer q.delays.Done(it)
			defer q.workers.Put(ns, 1)
			q.attempt(ctx, it, token)
		})
		if last {
			return
		}
	}
}

// token takes a token of the node's bucket for it's attempt: nil when one
// is there, else a timer that fires when it is.
func (q *Queue) token(it *item) clock.Timer {
	wait := q.node.Reserve()
	if wait <= 0 {
		return nil
	}
	t := q.opts.Clock.NewTimer(wait)
	q.log(it).Info("liveness action: "+q.opts.Texts.Work+" waits for the node's bucket", "in", wait)
	return t
}

// attempt runs one attempt of it on the worker it holds, once its token
// is there: the step's Act.
func (q *Queue) attempt(ctx context.Context, it *item, token clock.Timer) {
	if token != nil {
		select {
		case <-token.C():
		case <-ctx.Done():
			token.Stop()
			return
		}
	}
	if ctx.Err() != nil {
		return
	}
	q.outcome(ctx, it, it.plan.Act(ctx))
}

// outcome decides what follows an attempt that returned err.
func (q *Queue) outcome(ctx context.Context, it *item, err error) {
	log := q.log(it)
	work := q.opts.Texts.Work
	switch {
	case err == nil:
		q.finish(it)
	case ctx.Err() != nil:
		// Stopping: the attempt was cancelled, not refused.
	default:
		if r, ok := asRefusal(err); ok {
			q.finish(it)
			q.decided(it, Decision{Do: Refuse, Why: r.why})
			return
		}
		if h, ok := asHold(err); ok {
			q.held(it, h.why, h.after)
			return
		}
		if w, ok := asWait(err); ok {
			delay := max(q.backoff.When(it), w.after)
			q.delays.AddAfter(it, delay)
			log.Warn(w.what+", will retry", "in", delay, "error", w.err)
			return
		}
		it.attempts++
		if n := it.attempts; n >= q.opts.MaxAttempts {
			q.finish(it)
			log.Error(work+" failed, giving up", "attempts", n, "error", err)
			q.opts.Recorder.Eventf(it.ref, v1.EventTypeWarning, q.opts.Texts.FailedReason, "%s after %d attempts: %v", q.opts.Texts.Failed, n, err)
			return
		}
		delay := q.backoff.When(it)
		n := it.attempts // it is the delays' once AddAfter returns
		q.delays.AddAfter(it, delay)
		log.Warn(work+" failed, will retry", "attempt", n, "of", q.opts.MaxAttempts, "in", delay, "error", err)
	}
}

func (q *Queue) finish(it *item) {
	q.backoff.Forget(it)
	it.attempts = 0
}

// Remembered is how many container instances the Queue remembers (at most
// Pacing.RememberInstances).
func (q *Queue) Remembered() int { return q.seen.Len() }

// WorkersOf is how many workers namespace holds now.
func (q *Queue) WorkersOf(namespace string) int64 { return q.workers.Held(namespace) }
