package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/ants/v2"
	v1 "k8s.io/api/core/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/clock"

	"github.com/probed/probed/runtime/bound"
	"github.com/probed/probed/runtime/egress"
	"github.com/probed/probed/runtime/expect"
	"github.com/probed/probed/runtime/redact"
	"github.com/probed/probed/runtime/tenant"
)

// MaxAttempts is the number of tries per run when a handler errors (spec P2,
// the kubelet's maxProbeRetries).
const MaxAttempts = 3

// Recorder receives events: the probe events of spec K4 (recorded by the
// manager's ProbeEvents from the runs' records, not by the runtime, which
// knows nothing of thresholds) and the actuators'. It is the subset of
// client-go's record.EventRecorder they use, so a kubelet-style recorder
// (or record.FakeRecorder) plugs in unchanged. The object is a
// *v1.ObjectReference to the container (ContainerRef).
type Recorder interface {
	Eventf(object k8sruntime.Object, eventtype, reason, messageFmt string, args ...interface{})
}

// ProbeRecorder is a Recorder that also keeps where the probe of an event
// is declared (Spec.Origin): a probe run's events are recorded through
// ProbeEventf when the Recorder has it, so the agent's event ring,
// its API and the API server's Events can say whether the probe is the
// spec's or the probed.io/probes annotation's. The message is the same as
// Eventf's.
type ProbeRecorder interface {
	Recorder
	ProbeEventf(origin Origin, object k8sruntime.Object, eventtype, reason, messageFmt string, args ...interface{})
}

// Lanes: each lane has its own bounded pool, so slow exec probes never
// starve network probes (DESIGN: give slow work its own lane).
const (
	LaneNetwork = 0 // http, tcp, grpc and plugin kinds
	LaneExec    = 1 // exec probes (a process per run)
	// LaneSlow takes network probes whose last run was slow (half its
	// timeout or more): hung targets wait out their timeouts here and never
	// hold the slots the healthy probes need.
	LaneSlow = 2
	NumLanes = 3
)

// Task is one unit of work run on a pool: a worker's probe run.
type Task interface{ Run() }

// Options configure a Runtime.
type Options struct {
	// PoolSize bounds the network probes running at once; default 256.
	// Healthy network probes take milliseconds, so this is rate × latency
	// with a wide margin; a small pool keeps a CPU stall from putting
	// hundreds of probes in flight at once, each timing out while it waits
	// for a core.
	PoolSize int
	// SlowPoolSize bounds the slow lane: network probes that took half
	// their timeout or more, each holding a slot up to its timeout; default
	// 1024. Size it by the rate of slow probes × their timeout.
	SlowPoolSize int
	// ExecPoolSize bounds exec probes running at once; default 64.
	ExecPoolSize int
	// PodShare and NamespaceShare bound the slots of each lane that the
	// runs of one pod, and of one namespace, hold at once: a fraction of
	// the lane's size (0.125: an eighth), at least one slot; zero: no
	// bound (the default, as the kubelet, which has no shared pool). A run
	// over its share is parked, not queued in front of other pods' runs,
	// and starts when a run of its own pod or namespace ends (see Owned).
	// Only Owned tasks are bounded.
	PodShare, NamespaceShare float64
	// Logger receives the runtime's logs; nil uses slog.Default().
	Logger *slog.Logger
	// Clock bounds every attempt: its deadline, the probe's timeoutSeconds
	// (P3), passes when this clock passes it (WithTimeout). Nil: the real
	// clock. A manager's default runtime takes the manager's Options.Clock;
	// a runtime given to a manager should be built with the same clock.
	Clock clock.Clock
	// Egress, when set, restricts where probes connect (cluster mode,
	// runtime/egress): every run's context carries the policy of its
	// target — the pod's IPs (Target.PodIP and Target.PodIPs) plus the
	// rule's ranges — which the built-in handlers' dialer checks for every
	// connection (redirects included), the plugin host sends on to
	// plugins, and under which handlers withhold the bytes a target sent
	// from their texts. Nil: unrestricted, the kubelet's behaviour.
	Egress *egress.Rule
}

// Runtime owns the handler registry and the pools. It is safe for
// concurrent use.
type Runtime struct {
	log    *slog.Logger
	clock  clock.Clock
	egress *egress.Rule

	mu       sync.RWMutex
	handlers map[string]Handler

	pools  [NumLanes]*ants.PoolWithFuncGeneric[Task]
	shares [NumLanes]*tenant.Lane[Task] // nil: the lane has no bound per owner
	busy   [NumLanes]atomic.Int64
	runs   sync.WaitGroup
}

// The default pool sizes (goroutines) of the three lanes.
const (
	DefaultPoolSize     = 256
	DefaultSlowPoolSize = 1024
	DefaultExecPoolSize = 64
)

// New creates a Runtime with no handlers and starts its pools.
func New(opts Options) (*Runtime, error) {
	if opts.PoolSize <= 0 {
		opts.PoolSize = DefaultPoolSize
	}
	if opts.SlowPoolSize <= 0 {
		opts.SlowPoolSize = DefaultSlowPoolSize
	}
	if opts.ExecPoolSize <= 0 {
		opts.ExecPoolSize = DefaultExecPoolSize
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	r := &Runtime{log: opts.Logger, clock: opts.Clock, egress: opts.Egress, handlers: map[string]Handler{}}
	sizes := [NumLanes]int{LaneNetwork: opts.PoolSize, LaneExec: opts.ExecPoolSize, LaneSlow: opts.SlowPoolSize}
	for lane, size := range sizes {
		lane := lane
		r.shares[lane] = tenant.NewLane[Task](size, opts.PodShare, opts.NamespaceShare)
		p, err := ants.NewPoolWithFuncGeneric(size, func(t Task) {
			r.busy[lane].Add(1)
			defer r.busy[lane].Add(-1)
			// A run that ends hands its slot to the next parked run of
			// its namespace, if any (shares).
			for t != nil {
				t = r.runOne(lane, t)
			}
		},
			ants.WithExpiryDuration(time.Minute),
		)
		if err != nil {
			r.release(context.Background())
			return nil, fmt.Errorf("runtime: pool for lane %d: %w", lane, err)
		}
		r.pools[lane] = p
	}
	return r, nil
}

// Register adds a handler for kind. It fails when the kind is taken.
func (r *Runtime) Register(kind string, h Handler) error {
	if kind == "" || h == nil {
		return errors.New("runtime: Register needs a kind and a handler")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.handlers[kind]; ok {
		return fmt.Errorf("runtime: a handler for kind %q is already registered", kind)
	}
	r.handlers[kind] = h
	return nil
}

// Unregister removes the handler of kind; probes prepared before keep theirs.
func (r *Runtime) Unregister(kind string) {
	r.mu.Lock()
	delete(r.handlers, kind)
	r.mu.Unlock()
}

// HasKind reports whether a handler serves kind.
func (r *Runtime) HasKind(kind string) bool {
	r.mu.RLock()
	_, ok := r.handlers[kind]
	r.mu.RUnlock()
	return ok
}

// Kinds returns the registered kinds, sorted.
func (r *Runtime) Kinds() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.handlers))
	for k := range r.handlers {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// LaneOf returns the pool lane for a kind: exec probes run in their own
// lane, every other kind starts in the network lane.
func LaneOf(kind string) int {
	if kind == KindExec {
		return LaneExec
	}
	return LaneNetwork
}

// NextLane returns the lane for a probe's next run given its lane now, how
// long its last run took and its timeout: a network probe that took half
// its timeout or more moves to the slow lane; a slow-lane probe that took
// under a quarter of it moves back. Exec probes stay in their lane.
func NextLane(lane int, took, timeout time.Duration) int {
	switch {
	case lane == LaneNetwork && took >= timeout/2:
		return LaneSlow
	case lane == LaneSlow && took < timeout/4:
		return LaneNetwork
	}
	return lane
}

// Submit runs t on the pool of lane, blocking while that pool is full. It
// fails with ants.ErrPoolClosed after Close. With shares, an Owned task
// whose pod or namespace holds its share of the lane is parked and Submit
// returns nil at once: the task runs later, in the slot of a run of its
// own namespace.
func (r *Runtime) Submit(lane int, t Task) error {
	if lane < 0 || lane >= NumLanes {
		lane = LaneNetwork
	}
	r.runs.Add(1)
	var owner Owner
	s := r.shares[lane]
	if s != nil {
		if o, ok := t.(Owned); ok {
			owner = o.Owner()
			if !s.Acquire(owner, t) {
				return nil // parked: runs when a run of its owner ends
			}
		} else {
			s = nil
		}
	}
	if err := r.pools[lane].Invoke(t); err != nil {
		if s != nil {
			// The slot would go to the namespace's next parked run: the
			// pool is closed, so each of them ends unrun in turn.
			for next, ok := s.Release(owner); ok; next, ok = s.Release(next.(Owned).Owner()) {
				r.runs.Done()
			}
		}
		r.runs.Done()
		return err
	}
	return nil
}

// runOne runs t, recovering a panic, and returns the parked run its slot
// goes to next (shares), or nil.
func (r *Runtime) runOne(lane int, t Task) (next Task) {
	defer r.runs.Done()
	defer func() {
		if v := recover(); v != nil {
			r.log.Error("probe task panicked", "panic", v)
		}
		if s := r.shares[lane]; s != nil {
			if o, ok := t.(Owned); ok {
				next, _ = s.Release(o.Owner())
			}
		}
	}()
	t.Run()
	return nil
}

// PoolStats describes one lane's pool.
type PoolStats struct {
	Capacity int `json:"capacity"` // the pool's size
	Busy     int `json:"busy"`     // tasks running now
	Waiting  int `json:"waiting"`  // submitters blocked on a full pool
	// Workers counts the pool's live goroutines, idle ones included (ants
	// keeps idle workers for a minute before it lets them go).
	Workers int `json:"workers"`
	// PodSlots and NamespaceSlots are the most slots the runs of one pod,
	// and of one namespace, hold at once (Options.PodShare,
	// NamespaceShare); both Capacity when the lane has no shares.
	PodSlots       int `json:"podSlots"`
	NamespaceSlots int `json:"namespaceSlots"`
	// Parked counts the runs waiting now because their pod or namespace
	// holds its share; ParkedTotal every run that ever waited so.
	Parked      int    `json:"parked"`
	ParkedTotal uint64 `json:"parkedTotal"`
}

// Stats returns the pool figures of every lane, indexed by lane.
func (r *Runtime) Stats() [NumLanes]PoolStats {
	var out [NumLanes]PoolStats
	for lane, p := range r.pools {
		if p == nil {
			continue
		}
		ps := PoolStats{Capacity: p.Cap(), Busy: int(r.busy[lane].Load()), Waiting: p.Waiting(), Workers: p.Running(),
			PodSlots: p.Cap(), NamespaceSlots: p.Cap()}
		if s := r.shares[lane]; s != nil {
			ps.PodSlots, ps.NamespaceSlots = s.PodSlots(), s.NamespaceSlots()
			ps.Parked, ps.ParkedTotal = int(s.Parked()), s.ParkedTotal()
		}
		out[lane] = ps
	}
	return out
}

// Prepared is a probe bound to its handler, built once per worker. It is
// small and may be embedded by value (PrepareInto). A Prepared is used by
// one Run at a time (a worker never overlaps its runs).
type Prepared struct {
	Spec *Spec
	// prober is the handler's prober, or a preparationError whose every
	// attempt fails with the preparation error (P5).
	prober Prober
	// unresolved: no handler served the kind when the probe was prepared;
	// every Run looks the kind up again.
	unresolved bool
	// policy is the egress policy of the last run and the pod IPs it was
	// built for (Options.Egress): a run for unchanged IPs reuses it.
	policy *runPolicy
}

// runPolicy is an egress policy and the target IPs it was built for.
type runPolicy struct {
	podIP  string
	podIPs []v1.PodIP
	policy *egress.Policy
}

// egressPolicy returns the policy of a run for t under rule (nil rule:
// nil, unrestricted), reusing the last one when t's IPs are unchanged.
func (p *Prepared) egressPolicy(rule *egress.Rule, t Target) *egress.Policy {
	if rule == nil {
		return nil
	}
	if c := p.policy; c != nil && c.podIP == t.PodIP && slices.Equal(c.podIPs, t.PodIPs) {
		return c.policy
	}
	ips := make([]netip.Addr, 0, 1+len(t.PodIPs))
	if ip, err := netip.ParseAddr(t.PodIP); err == nil {
		ips = append(ips, ip)
	}
	for _, pip := range t.PodIPs {
		if ip, err := netip.ParseAddr(pip.IP); err == nil {
			ips = append(ips, ip)
		}
	}
	p.policy = &runPolicy{podIP: t.PodIP, podIPs: slices.Clone(t.PodIPs), policy: rule.Policy(ips...)}
	return p.policy.policy
}

// preparationError is the prober of a probe that could not be prepared:
// every attempt returns the error (retried per P2, then discarded, P5).
type preparationError struct{ err error }

func (e *preparationError) Probe(context.Context, Target) (Outcome, error) {
	return Outcome{Result: Unknown, ExitCode: -1}, e.err
}

// CarriesTrace reports whether the probe's prober sends the run's trace
// context on (TraceCarrier). A probe whose kind no handler serves yet
// counts as carrying it: the handler that turns up may be a plugin.
func (p *Prepared) CarriesTrace() bool {
	if p.unresolved {
		return true
	}
	tc, ok := p.prober.(TraceCarrier)
	return ok && tc.CarriesTrace()
}

// Release frees what the probe's prober holds between runs (Releaser: an
// HTTP probe's kept connection). The owner calls it when the probe is
// removed, after its last run has ended; a prober that holds nothing
// ignores it. Idempotent for the built-in handlers.
func (p *Prepared) Release() {
	if r, ok := p.prober.(Releaser); ok {
		r.Release()
	}
}

// Err returns the preparation error, if any.
func (p *Prepared) Err() error {
	if pe, ok := p.prober.(*preparationError); ok {
		return pe.err
	}
	return nil
}

// Prepare binds spec to the handler of spec.Kind. It never fails: a
// missing handler (P4: "missing probe handler for <pod>:<container>"), an
// unknown kind or a handler's Prepare error is kept and makes every run of
// the probe errored, as the kubelet does for a probe it cannot run.
//
// A kind no handler serves yet ("no handler serves probe kind ...") is not
// kept forever: every Run looks the kind up again, and once a handler is
// registered for it (e.g. a plugin that started late) the probe is prepared
// with it and runs normally from then on.
func (r *Runtime) Prepare(spec *Spec) *Prepared {
	p := &Prepared{}
	r.PrepareInto(p, spec)
	return p
}

// PrepareInto is Prepare into a Prepared the caller owns (a worker embeds
// it, saving an allocation per probe). spec must outlive p.
func (r *Runtime) PrepareInto(p *Prepared, spec *Spec) {
	*p = Prepared{Spec: spec}
	p.bind(r)
}

// bind resolves the handler of the spec's kind and prepares the spec with it.
func (p *Prepared) bind(r *Runtime) {
	spec := p.Spec
	p.unresolved = false
	if spec.Kind == "" {
		p.prober = &preparationError{fmt.Errorf("missing probe handler for %s:%s", podName(spec), containerName(spec))}
		return
	}
	r.mu.RLock()
	h, ok := r.handlers[spec.Kind]
	r.mu.RUnlock()
	if !ok {
		p.prober, p.unresolved = &preparationError{fmt.Errorf("no handler serves probe kind %q", spec.Kind)}, true
		return
	}
	pr, err := h.Prepare(spec)
	if err != nil {
		pr = &preparationError{err}
	}
	p.prober = pr
}

// Report is the outcome of one run. Run redacts and cuts it (runtime/redact,
// runtime/bound): the Output of a non-success and the Err never carry the
// container's environment values, URL query values or credentials, and are
// at most bound.MessageBytes long.
type Report struct {
	Outcome Outcome
	// Err is set when every attempt errored (P2, P5): the worker discards
	// the run (W5.10).
	Err      error
	Attempts int
}

// Run probes once (spec P1–P6): up to MaxAttempts attempts while the handler
// errors, each with a deadline of the probe's timeout (P3) on the runtime's
// clock, derived from ctx (WithTimeout: with an injected clock the attempt
// ends when that clock passes the deadline, never on real time). It records
// no event: the worker applies the threshold, and the manager's
// ProbeEvents records the run's event from its record (P5, P6, K4).
// t.Attempt is set per attempt. An attempt the prober could not make for lack of its own
// resources (EMFILE, ENOBUFS ...: ClassifyAttempt) counts as an error, not
// as a Failure of the target (a deliberate deviation from the kubelet,
// docs/probes.md). An annotation probe's answer must also meet its
// expect's latency and certificate checks (checkAnswer; the handler
// applies the status and body checks). Under Options.Egress every
// attempt's context carries the egress policy of t
// (runtime/egress.FromContext).
func (r *Runtime) Run(ctx context.Context, p *Prepared, t Target) Report {
	var rep Report
	if p.unresolved && r.HasKind(p.Spec.Kind) {
		p.bind(r)
	}
	if pe, ok := p.prober.(*preparationError); ok {
		// Every attempt would fail the same way: the run is errored
		// without calling anything (P2's retries would change nothing).
		rep = Report{Outcome: Outcome{Result: Unknown, ExitCode: -1}, Err: pe.err, Attempts: MaxAttempts}
	} else {
		ctx = egress.WithPolicy(ctx, p.egressPolicy(r.egress, t))
		timeout := p.Spec.Timeout()
		ex := ExpectOf(p.Spec)
		for attempt := 1; attempt <= MaxAttempts; attempt++ {
			t.Attempt = attempt
			var start time.Time
			if ex != nil {
				start = r.clock.Now()
			}
			deadline := newAttemptDeadline(ctx, r.clock, timeout) // WithTimeout
			out, err := ClassifyAttempt(p.prober.Probe(deadline.ctx, t))
			deadline.end()
			if ex != nil && err == nil {
				out = r.checkAnswer(ex, out, r.clock.Since(start))
			}
			rep = Report{Outcome: out, Err: err, Attempts: attempt}
			if err == nil || ctx.Err() != nil {
				break
			}
		}
	}
	return cleanReport(p.Spec, rep)
}

// checkAnswer applies an annotation probe's expectations that hold for any
// handler (runtime/expect): the attempt's latency on the runtime's clock
// (maxLatencyMilliseconds) and the certificate the target presented
// (certificateExpiresAfterDays, against the runtime's clock). An answer
// that fails one becomes a Failure whose output names the check and the
// measured value; a Failure stays the handler's.
func (r *Runtime) checkAnswer(ex *expect.Expect, out Outcome, took time.Duration) Outcome {
	if out.Result != Success && out.Result != Warning {
		return out
	}
	why := expect.Latency(ex, took)
	if why == "" {
		why = expect.Certificate(ex, out.NotAfter, r.clock.Now())
	}
	if why == "" {
		return out
	}
	return Outcome{Result: Failure, Output: why, StatusCode: out.StatusCode, ExitCode: out.ExitCode, NotAfter: out.NotAfter}
}

// cleanReport hides secrets in what a run reports (runtime/redact: the
// container's environment values, secret-named plugin parameters, URL
// query values, credential pairs) and then cuts it to bound.MessageBytes
// (runtime/bound: a target's answer, or an error quoting a 250 KB path,
// is the target's or the manifest's length otherwise), so that events,
// history, logs and spans built from the report never show secrets and
// never grow with what a pod or a target sends. A success's output is
// shown nowhere and is left as it is (an HTTP body up to 10 KiB, per run).
func cleanReport(spec *Spec, rep Report) Report {
	if rep.Err == nil && (rep.Outcome.Result == Success || rep.Outcome.Output == "") {
		return rep
	}
	var params map[string]string
	if spec.Plugin != nil {
		params = spec.Plugin.Params
	}
	secrets := redact.ForContainer(spec.Container, params)
	rep.Outcome.Output = bound.Cut(secrets.Text(rep.Outcome.Output), bound.MessageBytes)
	rep.Err = bound.Error(secrets.Error(rep.Err), bound.MessageBytes)
	return rep
}

// Close stops accepting tasks and waits, bounded by ctx, for running tasks
// and the pools' goroutines to end. Callers cancel the contexts of
// in-flight probes first so that they return promptly.
func (r *Runtime) Close(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		r.runs.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = fmt.Errorf("runtime: probes still running at close: %w", ctx.Err())
	}
	if rerr := r.release(ctx); rerr != nil && err == nil {
		err = rerr
	}
	return err
}

func (r *Runtime) release(ctx context.Context) error {
	var err error
	for _, p := range r.pools {
		if p == nil {
			continue
		}
		if rerr := p.ReleaseContext(ctx); rerr != nil && err == nil {
			err = fmt.Errorf("runtime: releasing pool: %w", rerr)
		}
	}
	return err
}

// ContainerRef is the object reference of a container inside its pod, as
// the kubelet builds it for events (pkg/kubelet/container GenerateContainerRef):
// the pod's kind, API version, namespace, name and UID, and the field path
// spec.containers{NAME}, spec.initContainers{NAME} (sidecars included) or
// spec.ephemeralContainers{NAME}. An empty container name refers to the pod
// itself. It is the one place the agent's events build references.
func ContainerRef(pod *v1.Pod, container string) *v1.ObjectReference {
	ref := &v1.ObjectReference{
		Kind:            "Pod",
		APIVersion:      "v1",
		Namespace:       pod.Namespace,
		Name:            pod.Name,
		UID:             pod.UID,
		ResourceVersion: pod.ResourceVersion,
	}
	if container == "" {
		return ref
	}
	field := "spec.containers"
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == container {
			field = "spec.initContainers"
			break
		}
	}
	for i := range pod.Spec.EphemeralContainers {
		if pod.Spec.EphemeralContainers[i].Name == container {
			field = "spec.ephemeralContainers"
			break
		}
	}
	ref.FieldPath = field + "{" + container + "}"
	return ref
}

// podName formats the pod as the kubelet's format.Pod does: name_namespace(uid).
func podName(spec *Spec) string {
	if spec.Pod == nil {
		return "<nil>"
	}
	return fmt.Sprintf("%s_%s(%s)", spec.Pod.Name, spec.Pod.Namespace, spec.Pod.UID)
}

func containerName(spec *Spec) string {
	if spec.Container == nil {
		return ""
	}
	return spec.Container.Name
}
