// Package manager is a drop-in for the kubelet's prober manager
// (pkg/kubelet/prober): it keeps one worker state per (pod UID, container,
// probe type), runs the workers' state machines (spec §3, W-rules) when the
// scheduler says they are due, and fills Started/Ready in pod statuses
// (spec §2, M-rules).
//
// Unlike the kubelet there is no goroutine and no ticker per worker: each
// worker is an entry in a timing wheel (package scheduler) whose due runs are
// handed to a bounded pool (package runtime).
package manager

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/clock"

	"github.com/probed/probed/manager/podprobes"
	"github.com/probed/probed/manager/results"
	"github.com/probed/probed/runtime"
	"github.com/probed/probed/scheduler"
)

// StatusProvider returns the cached status of a pod, as the kubelet's status
// manager does. The worker reads the pod IP, the container statuses and the
// phase from it on every run (W5.1).
type StatusProvider interface {
	GetPodStatus(uid types.UID) (v1.PodStatus, bool)
}

// Manager manages pod probing (spec §2).
type Manager interface {
	// AddPod creates the workers of the pod's probes that do not exist yet
	// (M1, M2). It is idempotent and called on every pod sync.
	AddPod(ctx context.Context, pod *v1.Pod)
	// StopLivenessAndStartup signals the liveness and startup workers of the
	// pod's containers to stop; readiness keeps running (M3, K5).
	StopLivenessAndStartup(pod *v1.Pod)
	// RemovePod signals every worker of the pod to stop (M4).
	RemovePod(pod *v1.Pod)
	// CleanupPods signals every worker whose pod UID is not in desiredPods
	// to stop (M5). A nil map stops all.
	CleanupPods(desiredPods map[types.UID]sets.Empty)
	// UpdatePodStatus sets Started and Ready of the container statuses in
	// podStatus (M7–M9) and triggers a readiness run for a started container
	// without a Success result (M7c, the manual-trigger path).
	UpdatePodStatus(ctx context.Context, pod *v1.Pod, podStatus *v1.PodStatus)
	// Close stops scheduling, cancels in-flight probes, waits for them
	// (bounded by ctx) and releases the pool. Stop is asynchronous in the
	// kubelet (M6); Close is the one synchronous teardown. Keep draining the
	// results managers' Updates until Close returns.
	Close(ctx context.Context) error
}

// Observer receives a record of every executed probe run (not of runs that
// short-circuit before the handler, W5.1–W5.9). It is called on the pool
// goroutine after the result has been applied and must be fast.
type Observer interface {
	ProbeRan(rec RunRecord)
}

// Observers calls each of its observers in turn.
type Observers []Observer

// ProbeRan implements Observer.
func (o Observers) ProbeRan(rec RunRecord) {
	for _, x := range o {
		x.ProbeRan(rec)
	}
}

// RunRecord describes one executed probe run.
type RunRecord struct {
	PodUID    types.UID
	Namespace string
	PodName   string
	// Pod is the pod snapshot the worker was created from (read-only):
	// what an event about the run refers to (runtime.ContainerRef).
	Pod           *v1.Pod
	ContainerName string
	ContainerID   string
	ProbeType     runtime.ProbeType
	// Origin is where the probe is declared (the pod's spec or its
	// probed.io/probes annotation).
	Origin runtime.Origin
	Kind   string // handler kind: http, tcp, exec, grpc or a plugin kind
	// Period and Timeout are the probe's (runtime.TimingOf: sub-second for
	// an annotation probe with millisecond offsets); for an annotation
	// probe with periods by state, Period is the one in effect after the
	// run.
	Period, Timeout time.Duration
	Start           time.Time
	Duration        time.Duration
	// Result is the handler's verdict; Errored runs carry the error instead
	// and were discarded (W5.10).
	Result runtime.Result
	Err    error
	// Discarded: the manager stopped the run before it ended (its pod was
	// removed, the manager closed); its result was discarded.
	Discarded bool
	Attempts  int
	// Message is safe to show and log: the failure or warning text, or the
	// error, redacted by the runtime (runtime/redact); never a response
	// body (BR-22). Empty on success.
	Message string
	// Cached is the worker's result after the threshold logic (W10–W13).
	Cached results.Result
	// Previous is the container instance's verdict before the run:
	// Unknown until a run reached a threshold (the initial values of W1
	// are no verdict), else the last one applied. Transition: the run
	// applied a verdict other than Previous (the first one included) —
	// the entries of the agent's health-event log (GET
	// /events?type=transition).
	Previous   results.Result
	Transition bool
	// FirstCheck: the first executed run for this container instance.
	FirstCheck bool
	// TimeToFirstSuccess is set on the run that gave the container
	// instance its first Success verdict: the time from the container's
	// start (StartedAt) to the end of the run; zero otherwise, and for a
	// container that started before the manager.
	TimeToFirstSuccess time.Duration
	// Count is the run's result's count toward its threshold (W10's
	// resultRun), Threshold that threshold: failureThreshold after a
	// Failure, successThreshold after a Success or Warning. Both are zero
	// for an errored run and for one whose result was discarded (the
	// manager stopping it).
	Count, Threshold int32
	// Failures counts the failed runs since the container instance's last
	// Success verdict, this one included.
	Failures int32
	// ErroredBefore: the container instance's previous executed run was
	// errored too.
	ErroredBefore bool
}

// Options configure New.
type Options struct {
	// Status is required.
	Status StatusProvider
	// Liveness, Readiness and Startup results managers; nil: a new one
	// each, whose updates nobody else can read: the manager discards them
	// until Close (a results manager's Set blocks while its Updates are
	// not drained, R4). Give the ones whose updates you read, and read
	// them until Close returns.
	Liveness, Readiness, Startup results.Manager
	// Clock drives all timing (scheduling, initial delays, restart windows,
	// and the default runtime's attempt deadlines: a probe's timeoutSeconds
	// passes when this clock passes it, runtime.WithTimeout); nil: the real
	// clock. A Runtime given below keeps the clock it was built with
	// (runtime.Options.Clock): build it with this one.
	Clock clock.WithTicker
	// TracerProvider for probe spans; nil: the global provider.
	TracerProvider trace.TracerProvider

	// Runtime runs the probes. Nil: a new runtime with the built-in http,
	// tcp, exec (ExecRunner) and grpc handlers, sized by PoolSize and
	// ExecPoolSize, closed by Close. A given runtime is not closed by Close.
	Runtime *runtime.Runtime
	// PoolSize, SlowPoolSize and ExecPoolSize size the default runtime's
	// pools (see runtime.Options).
	PoolSize, SlowPoolSize, ExecPoolSize int
	// ExecRunner runs exec probes for the default runtime; nil: the command
	// runs on this host (plugins/exec LocalRunner).
	ExecRunner ExecRunner
	// Recorder receives the events of the probe runs (ProbeEvents: the
	// kubelet's K4, and an annotation probe's where its threshold stands);
	// nil: none.
	Recorder runtime.Recorder
	// Events selects the runs that record an event: the kubelet's
	// EventsAll, or EventsTransitions.
	Events EventMode
	// Consequence says, in the event of a liveness or startup Failure
	// verdict of an annotation probe, what the verdict leads to (the end
	// of a sentence: "the container is to be restarted (…)"), as the
	// actuator decided it; nil, or "": DefaultFailureConsequence, the
	// kubelet's.
	Consequence func(rec RunRecord) string

	// MetricsRegisterer receives prober_probe_total and
	// prober_probe_duration_seconds (X1–X4); nil: they are kept but not
	// registered anywhere.
	MetricsRegisterer prometheus.Registerer
	// RuntimeMetricsRegisterer, when set, receives probed's own metrics:
	// scheduler lag, backlog, skipped runs, pool busy and capacity, probes
	// by handler and result (docs/operations.md).
	RuntimeMetricsRegisterer prometheus.Registerer
	// NoPerPodLabels leaves the container, pod, namespace and pod_uid labels
	// of prober_probe_total and prober_probe_duration_seconds empty: one
	// series per probe type and result instead of per worker, for very dense
	// nodes (docs/operations.md gives the series counts). The label names
	// stay, so queries keep working.
	NoPerPodLabels bool
	// Logger receives the manager's logs; nil: slog.Default().
	Logger *slog.Logger
	// Observer, when set, sees every executed run (after the events of
	// Recorder are recorded).
	Observer Observer

	// AnyRunningSurvives makes every container that is running when the
	// manager starts a survivor of a restart of the agent (SurvivedRestart
	// with window 0: no initial result, W6c; readiness kept until the first
	// real result, M9), not only those running for more than the kubelet's
	// KubeletRestartWindow. Cluster mode sets it: there the pod's
	// readiness-gate condition is what the previous agent decided for the
	// container, and the new agent keeps it until its own first verdict. With
	// the kubelet's window, a container that turned ready less than 10 s
	// before probed restarted got the initial Failure and its pod flipped to
	// not ready (seen on a real kubelet: TestNodeProbedRestartNeverFlipsReady).
	AnyRunningSurvives bool
	// Probes is the policy AddPod works a pod's probes out with
	// (manager/podprobes) when it is not given them (AddPodProbes): the
	// zero policy runs the containers' own probes, as the kubelet, and
	// the probed.io/probes annotation's, any plugin kind accepted (a kind
	// no handler serves yet errors its runs until one does). Cluster mode
	// leaves the spec's probes to the kubelet
	// (podprobes.LeaveSpecToKubelet).
	Probes podprobes.Policy
	// Admit, when set, is asked by AddPod before it starts the workers of
	// a pod's probes of other origins than the spec (the annotation's),
	// with the pod and the periods of all of them (of a probe with periods
	// by state, the shortest: runtime.Timing.Shortest); when it returns
	// false none of them start (the spec's probes are not affected). AddPod asks on every call, so
	// a pod refused once starts at a later AddPod (the periodic pod sync)
	// that Admit allows. Cluster mode's node budget (agent/kube/limits).
	Admit func(pod *v1.Pod, periods []time.Duration) bool

	// Scheduler tuning (see package scheduler): wheel tick (default 10 ms),
	// shards (default GOMAXPROCS), and the spread window of first runs
	// added after start (default 1 s).
	Tick           time.Duration
	Shards         int
	FirstRunSpread time.Duration
	// Coalesce is the window within which due runs start from one wake-up
	// of the scheduler and the pool (scheduler.Options.Coalesce): a run is
	// at most this much (less one tick) late, never misses a period and
	// keeps its phase; a probe whose period is shorter than the window
	// runs at its own tick. 0, or less than two ticks: off.
	Coalesce time.Duration
}

// probeKey identifies a worker (spec §2: pod UID, container name, probe type).
type probeKey struct {
	podUID        types.UID
	containerName string
	probeType     runtime.ProbeType
}

type manager struct {
	clock    clock.WithTicker
	start    time.Time
	status   StatusProvider
	results  [3]results.Manager // by runtime.ProbeType
	rt       *runtime.Runtime
	ownRT    bool
	sched    *scheduler.Scheduler[*worker]
	metrics  *proberMetrics
	rtm      *runtimeMetrics // nil unless Options.RuntimeMetricsRegisterer
	log      *slog.Logger
	observer Observer
	tracer   trace.Tracer
	// realClock: Options.Clock is the real clock, so spans need no
	// explicit timestamps (see spanEnd).
	realClock bool
	// unsetTP is the global provider while none was set when New ran:
	// spans start only once otel.SetTracerProvider replaced it.
	unsetTP trace.TracerProvider

	ctx    context.Context // cancelled by Close: in-flight probes end
	cancel context.CancelFunc
	closed atomic.Bool
	runs   sync.WaitGroup // dispatched runs of this manager

	restartWindow time.Duration // of SurvivedRestart
	probes        podprobes.Policy
	admit         func(*v1.Pod, []time.Duration) bool

	mu      sync.RWMutex
	workers workerSet

	// lacking are the pods whose status lacked what a probe needs to run
	// (status.go, noteLack), logged once each; an entry goes with the
	// pod's last worker. Touched only by runs that cannot probe, never on
	// a healthy run's way.
	lackMu  sync.Mutex
	lacking map[types.UID]struct{}

	// own are the results managers New made for nil options; discard
	// drains their updates until shutdown closes stopDiscard.
	own         []results.Manager
	stopDiscard chan struct{}
	discarding  sync.WaitGroup
}

// New returns a Manager. It fails when Options.Status is nil or the
// runtime cannot be built.
func New(opts Options) (Manager, error) {
	if opts.Status == nil {
		return nil, errors.New("manager: Options.Status is required")
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	var defaultGlobal trace.TracerProvider
	if opts.TracerProvider == nil {
		opts.TracerProvider = otel.GetTracerProvider()
		defaultGlobal = unsetGlobal()
	}
	m := &manager{
		clock:         opts.Clock,
		start:         opts.Clock.Now(),
		status:        opts.Status,
		log:           opts.Logger,
		observer:      observerOf(opts),
		restartWindow: KubeletRestartWindow,
		probes:        opts.Probes,
		admit:         opts.Admit,
		tracer:        tracerOf(opts.TracerProvider),
		realClock:     runtime.IsRealClock(opts.Clock),
		unsetTP:       defaultGlobal,
		workers:       newWorkerSet(),
		lacking:       map[types.UID]struct{}{},
	}
	if opts.AnyRunningSurvives {
		m.restartWindow = 0
	}
	for i, rm := range []results.Manager{opts.Liveness, opts.Readiness, opts.Startup} {
		if rm == nil {
			rm = results.NewManager()
			m.own = append(m.own, rm)
		}
		m.results[i] = rm
	}
	metrics, err := newProberMetrics(opts.MetricsRegisterer, opts.NoPerPodLabels, m)
	if err != nil {
		return nil, err
	}
	m.metrics = metrics
	m.rt = opts.Runtime
	if m.rt == nil {
		rt, err := newDefaultRuntime(opts)
		if err != nil {
			metrics.unregister()
			return nil, err
		}
		m.rt, m.ownRT = rt, true
	}
	cleanup := func() {
		if m.ownRT {
			_ = m.rt.Close(context.Background())
		}
		metrics.unregister()
	}
	var observeLag func(int, time.Duration)
	if opts.RuntimeMetricsRegisterer != nil {
		if m.rtm, err = newRuntimeMetrics(opts.RuntimeMetricsRegisterer, m); err != nil {
			cleanup()
			return nil, fmt.Errorf("manager: registering runtime metrics: %w", err)
		}
		observeLag = m.rtm.observeLag
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	m.sched, err = scheduler.New(scheduler.Options[*worker]{
		Clock:          opts.Clock,
		Tick:           opts.Tick,
		Shards:         opts.Shards,
		Lanes:          runtime.NumLanes,
		FirstRunSpread: opts.FirstRunSpread,
		Coalesce:       opts.Coalesce,
		Dispatch:       m.dispatch,
		ObserveLag:     observeLag,
	})
	if err != nil {
		m.cancel()
		cleanup()
		if m.rtm != nil {
			m.rtm.unregister()
		}
		return nil, fmt.Errorf("manager: %w", err)
	}
	m.discard()
	return m, nil
}

// discard drains the updates of the results managers New made itself (nil
// Options.Liveness, Readiness, Startup), which no caller can read, so that
// their Set never blocks a run (R4); one goroutine for them all, stopped
// by shutdown once the runs have ended.
func (m *manager) discard() {
	m.stopDiscard = make(chan struct{})
	if len(m.own) == 0 {
		return
	}
	var own [3]<-chan results.Update // nil: never ready
	for i, rm := range m.own {
		own[i] = rm.Updates()
	}
	stop := m.stopDiscard
	m.discarding.Add(1)
	go func() {
		defer m.discarding.Done()
		for {
			select {
			case <-stop:
				return
			case <-own[0]:
			case <-own[1]:
			case <-own[2]:
			}
		}
	}()
}

// tracerOf returns the manager's tracer, or nil for the no-op provider
// (tracing off: no span is started at all).
func tracerOf(tp trace.TracerProvider) trace.Tracer {
	if _, ok := tp.(noop.TracerProvider); ok {
		return nil
	}
	return tp.Tracer("github.com/probed/probed/manager")
}

// initialGlobalTP is OpenTelemetry's global tracer provider as this
// package found it at init: the delegating default, which only forwards
// once otel.SetTracerProvider is called (then the global is another value).
var initialGlobalTP = otel.GetTracerProvider()

// unsetGlobal returns the global tracer provider when no provider has been
// set yet (OpenTelemetry's delegating default), else nil. The default is
// recognised by identity (the value the global had at this package's init)
// and by behaviour (its spans carry no span context until it delegates; an
// SDK's always do), not by its type's name, so a provider set in an earlier
// package's init is not mistaken for it.
func unsetGlobal() trace.TracerProvider {
	tp := otel.GetTracerProvider()
	if tp != initialGlobalTP || !startsNothing(tp) {
		return nil
	}
	return tp
}

// startsNothing reports whether tp's spans are neither recording nor carry a
// span context. The span started to find out is not ended, so nothing is
// exported.
func startsNothing(tp trace.TracerProvider) bool {
	_, span := tp.Tracer("github.com/probed/probed/manager").Start(context.Background(), "probe")
	return !span.IsRecording() && !span.SpanContext().IsValid()
}

// dispatch hands a due worker to the pool of its lane. It blocks while the
// pool is full; the scheduler measures the wait as lag.
func (m *manager) dispatch(_ scheduler.ID, w *worker) error {
	m.runs.Add(1)
	if err := m.rt.Submit(int(w.lane), w); err != nil {
		m.runs.Done()
		return err
	}
	return nil
}

// probedContainers lists the containers that get workers (M1): spec
// containers in order, then restartable (sidecar) init containers in order.
func probedContainers(pod *v1.Pod, visit func(c *v1.Container) bool) {
	for i := range pod.Spec.Containers {
		if !visit(&pod.Spec.Containers[i]) {
			return
		}
	}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if runtime.IsRestartable(c) && !visit(c) {
			return
		}
	}
}

// AddPod works the pod's probes out with Options.Probes (podprobes.Of)
// and adds them as AddPodProbes does.
func (m *manager) AddPod(ctx context.Context, pod *v1.Pod) {
	if m.closed.Load() || pod == nil {
		return
	}
	m.addPod(pod, podprobes.Of(pod, m.probes))
}

// AddPodProbes is AddPod with the pod's probes as its caller worked them
// out (podprobes.Of, once per pod and spec change: the agent's
// reconciler), for a Manager built by New; any other Manager gets
// AddPod(ctx, pod). A nil view is worked out as AddPod does.
func AddPodProbes(ctx context.Context, mgr Manager, pod *v1.Pod, probes *podprobes.View) {
	m, ok := mgr.(*manager)
	if !ok || probes == nil {
		mgr.AddPod(ctx, pod)
		return
	}
	if m.closed.Load() || pod == nil {
		return
	}
	m.addPod(pod, probes)
}

// addPod creates the workers of the view's probes that do not exist yet
// (M1, M2): the one road of every probe into the manager. Spec probes
// follow the kubelet's AddPod: a container whose probe of a type has a
// worker already is skipped for its remaining types (v1.37+, PR #138930).
// Probes of other origins are admitted together (Options.Admit), each
// added unless its key has a worker.
func (m *manager) addPod(pod *v1.Pod, view *podprobes.View) {
	admitted := true
	if m.admit != nil {
		var periods []time.Duration
		for i := range view.Probes {
			if p := &view.Probes[i]; p.Origin != runtime.OriginSpec {
				// A probe with periods by state may run at the shortest of
				// them for as long as it stays in that state.
				periods = append(periods, p.Timing().Shortest())
			}
		}
		admitted = len(periods) == 0 || m.admit(pod, periods)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	key := probeKey{podUID: pod.UID}
	var skip *v1.Container // a container whose remaining spec probes are skipped
	for i := range view.Probes {
		p := &view.Probes[i]
		spec := p.Origin == runtime.OriginSpec
		if (spec && p.Container == skip) || (!spec && !admitted) {
			continue
		}
		key.containerName, key.probeType = p.Container.Name, p.Type
		if _, ok := m.workers.get(key); ok {
			if spec {
				m.log.Debug(p.Type.String()+" probe already exists for container", "pod", klogPod(pod), "containerName", p.Container.Name)
				skip = p.Container
			}
			continue
		}
		m.startWorker(p.Spec(pod))
	}
}

// startWorker creates the worker of spec (the probe's snapshot, M2) and
// arms it. Caller holds m.mu for writing.
func (m *manager) startWorker(spec runtime.Spec) {
	w := newWorker(m, spec)
	key := w.key()
	// The kubelet is always fed defaulted specs (spec 1.2); a zero period
	// counts as the API default rather than panicking as its ticker would
	// (runtime.TimingOf). An annotation probe's period may be sub-second.
	period := w.period()
	h := keyHash(key)
	id, err := m.sched.Add(h, int(w.lane), period, w)
	if err != nil {
		return // closed
	}
	w.id = id
	m.workers.put(key, w)
	m.sched.Schedule(id, m.sched.Spread(h, period))
}

// keyHash is a stable hash of a worker key: it picks the shard and the
// stable phase, so a probe keeps its phase across agent restarts.
func keyHash(k probeKey) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(k.podUID))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(k.containerName))
	_, _ = h.Write([]byte{0, byte(k.probeType)})
	return h.Sum64()
}

func (m *manager) StopLivenessAndStartup(pod *v1.Pod) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	key := probeKey{podUID: pod.UID}
	// v1.38 (PR #141766): sidecars included; spec M3 prefers it.
	probedContainers(pod, func(c *v1.Container) bool {
		key.containerName = c.Name
		for _, pt := range [...]runtime.ProbeType{runtime.Liveness, runtime.Startup} {
			key.probeType = pt
			if w, ok := m.workers.get(key); ok {
				w.stop()
			}
		}
		return true
	})
}

func (m *manager) RemovePod(pod *v1.Pod) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	key := probeKey{podUID: pod.UID}
	probedContainers(pod, func(c *v1.Container) bool {
		key.containerName = c.Name
		for _, pt := range [...]runtime.ProbeType{runtime.Readiness, runtime.Liveness, runtime.Startup} {
			key.probeType = pt
			if w, ok := m.workers.get(key); ok {
				w.stop()
			}
		}
		return true
	})
}

func (m *manager) CleanupPods(desiredPods map[types.UID]sets.Empty) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	for uid := range m.workers.pods {
		if _, ok := desiredPods[uid]; !ok {
			m.workers.pod(uid, (*worker).stop)
		}
	}
}

// getWorker returns the worker of a key.
func (m *manager) getWorker(uid types.UID, container string, t runtime.ProbeType) (*worker, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	w, ok := m.workers.get(probeKey{uid, container, t})
	return w, ok
}

// removeWorker deletes the entry of a key (W4, by key, unconditionally)
// and, with it, the worker's metric series (X4).
func (m *manager) removeWorker(key probeKey) {
	m.mu.Lock()
	if w, ok := m.workers.get(key); ok {
		m.metrics.deleteSeries(w)
	}
	m.workers.remove(key)
	if _, left := m.workers.pods[key.podUID]; !left {
		m.forgetLack(key.podUID)
	}
	m.mu.Unlock()
}

// workerCount returns the number of workers (the kubelet's test helper).
func (m *manager) workerCount() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.workers.len()
}

func (m *manager) Close(ctx context.Context) error { return m.shutdown(ctx, false) }

// Drain stops a Manager built by New gracefully: no run starts any more,
// the runs in flight finish (each within its probe's timeout, so bound ctx
// by the longest timeout plus slack) and apply their results, and then the
// manager closes as Close does; runs still going when ctx ends are
// cancelled. For any other Manager it calls Close.
func Drain(ctx context.Context, mgr Manager) error {
	if m, ok := mgr.(*manager); ok {
		return m.shutdown(ctx, true)
	}
	return mgr.Close(ctx)
}

// shutdown is Close (drain false: in-flight probes are cancelled at once)
// and Drain (drain true: they may finish until ctx ends).
func (m *manager) shutdown(ctx context.Context, drain bool) error {
	if !m.closed.CompareAndSwap(false, true) {
		return nil
	}
	if !drain {
		m.cancel()
	}
	stopCancel := context.AfterFunc(ctx, m.cancel) // cancel whatever still runs when ctx ends
	defer stopCancel()
	defer m.cancel()
	schedDone := make(chan struct{})
	go func() {
		m.sched.Close()
		close(schedDone)
	}()
	var err error
	select {
	case <-schedDone:
	case <-ctx.Done():
		err = fmt.Errorf("manager: scheduler did not stop: %w", ctx.Err())
	}
	runsDone := make(chan struct{})
	go func() {
		m.runs.Wait()
		close(runsDone)
	}()
	select {
	case <-runsDone:
	case <-ctx.Done():
		if err == nil {
			err = fmt.Errorf("manager: probes still running: %w", ctx.Err())
		}
	}
	close(m.stopDiscard)
	m.discarding.Wait()
	if m.ownRT {
		if rerr := m.rt.Close(ctx); rerr != nil && err == nil {
			err = rerr
		}
	}
	m.mu.Lock()
	m.workers.clear(func(w *worker) {
		m.metrics.deleteSeries(w)
		w.prepared.Release() // the runs have ended (or been cancelled): e.g. a kept-alive connection
	})
	m.mu.Unlock()
	m.metrics.unregister()
	if m.rtm != nil {
		m.rtm.unregister()
	}
	return err
}

// klogPod formats a pod reference as "namespace/name" for logs.
func klogPod(pod *v1.Pod) string {
	if pod.Namespace == "" {
		return pod.Name
	}
	return pod.Namespace + "/" + pod.Name
}
