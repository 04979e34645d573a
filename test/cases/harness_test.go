// Package cases holds the acceptance tests of the bug-report cases
// (shared/cases/bug-reports.md). Each test runs the real prober manager
// (manager.New) with the real built-in handlers (manager.RegisterBuiltins,
// exec on plugins/exec LocalRunner) and the agent's status store
// (agent/store) as status provider, results consumer and container runtime,
// against real servers and processes on loopback.
//
// The manager and the store run on a fake clock: a test steps it and then
// waits until the manager's scheduler has caught up and is idle and every
// result update has been applied by the store (env.settle). Handlers still
// use real time for their own timeouts.
package cases

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/probed/probed/agent/actuate"
	"github.com/probed/probed/agent/events"
	"github.com/probed/probed/agent/manifest"
	"github.com/probed/probed/agent/simulator"
	"github.com/probed/probed/agent/store"
	"github.com/probed/probed/agent/verdicts"
	"github.com/probed/probed/internal/testlog"
	"github.com/probed/probed/manager"
	"github.com/probed/probed/manager/results"
	probeexec "github.com/probed/probed/plugins/exec"
	"github.com/probed/probed/runtime"
)

// IgnoreCurrent: ants starts its package-level default pool at init.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreCurrent()) }

// S is the scheduling slack of the cases' conventions.
const S = 500 * time.Millisecond

// epoch is where every test's fake clock starts.
var epoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// ---------------------------------------------------------------------------
// Results managers: the real ones, counted.

// countingResults wraps a real results manager and counts the updates it
// emits (R3: Set emits only when the cached value changes). The worker of a
// (container ID, probe type) is the only writer of its entry, so the
// Get-then-Set pair is exact.
type countingResults struct {
	results.Manager
	emitted atomic.Int64
}

func (c *countingResults) Set(id results.ContainerID, r results.Result, pod *v1.Pod) {
	if prev, ok := c.Manager.Get(id); !ok || prev != r {
		c.emitted.Add(1)
	}
	c.Manager.Set(id, r, pod)
}

// ---------------------------------------------------------------------------
// The environment.

type envOptions struct {
	logLevel slog.Level
	tracer   trace.TracerProvider
	execPool int
	// age is how long the manager has already run when the test starts.
	age time.Duration
}

type envOption func(*envOptions)

func withLogLevel(l slog.Level) envOption { return func(o *envOptions) { o.logLevel = l } }
func withTracer(tp trace.TracerProvider) envOption {
	return func(o *envOptions) { o.tracer = tp }
}
func withExecPool(n int) envOption { return func(o *envOptions) { o.execPool = n } }

// withAge makes the manager d old (fake time) before the test adds pods.
func withAge(d time.Duration) envOption { return func(o *envOptions) { o.age = d } }

// restartRec is one restart decided by the store, with its fake time.
type restartRec struct {
	simulator.Restart
	At time.Time
}

// runRec is one executed probe run (manager.Observer) with the real time it
// ended.
type runRec struct {
	manager.RunRecord
	RealEnd time.Time
}

type env struct {
	t      *testing.T
	clk    *testingclock.FakeClock
	start  time.Time // the manager's start (fake)
	rt     *runtime.Runtime
	mgr    manager.Manager
	store  *store.Store
	events *events.Recorder
	reg    *prometheus.Registry
	logs   *testlog.Buffer
	res    [3]*countingResults // by runtime.ProbeType

	applied atomic.Int64

	mu       sync.Mutex
	runs     []runRec
	restarts []restartRec
}

// ProbeRan implements manager.Observer.
func (e *env) ProbeRan(rec manager.RunRecord) {
	e.mu.Lock()
	e.runs = append(e.runs, runRec{RunRecord: rec, RealEnd: time.Now()})
	e.mu.Unlock()
}

// newEnv builds the runtime, the manager and the store on a fake clock and
// starts the store's update loop.
func newEnv(t *testing.T, opts ...envOption) *env {
	t.Helper()
	o := envOptions{logLevel: slog.LevelDebug, execPool: 8}
	for _, f := range opts {
		f(&o)
	}
	e := &env{
		t:    t,
		clk:  testingclock.NewFakeClock(epoch),
		reg:  prometheus.NewRegistry(),
		logs: &testlog.Buffer{},
	}
	e.start = e.clk.Now()
	logger := slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: o.logLevel}))
	e.events = events.New(10000, logger, e.clk)

	rt, err := runtime.New(runtime.Options{PoolSize: 256, ExecPoolSize: o.execPool, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	if err := manager.RegisterBuiltins(rt, &probeexec.LocalRunner{}); err != nil {
		t.Fatal(err)
	}
	e.rt = rt
	for i := range e.res {
		e.res[i] = &countingResults{Manager: results.NewManager()}
	}
	e.store = store.New(store.Options{Clock: e.clk, Logger: logger})
	sim := simulator.New(simulator.Options{Store: e.store, Clock: e.clk, Logger: logger,
		Notify: func(r simulator.Restart) {
			e.mu.Lock()
			e.restarts = append(e.restarts, restartRec{Restart: r, At: e.clk.Now()})
			e.mu.Unlock()
		}})
	e.mgr, err = manager.New(manager.Options{
		Status:            e.store,
		Liveness:          e.res[runtime.Liveness],
		Readiness:         e.res[runtime.Readiness],
		Startup:           e.res[runtime.Startup],
		Clock:             e.clk,
		TracerProvider:    o.tracer,
		Runtime:           rt,
		MetricsRegisterer: e.reg,
		Logger:            logger,
		Recorder:          e.events,
		Observer:          e,
	})
	if err != nil {
		t.Fatal(err)
	}
	e.store.SetProber(e.mgr)

	// manifest mode's consumers, as the agent wires them; the last one
	// counts the updates all of them have applied, for settle.
	fanout := verdicts.New(e.res[runtime.Liveness], e.res[runtime.Readiness], e.res[runtime.Startup],
		e.store, actuate.OnFailure(e.store.Pod, sim),
		verdicts.ConsumerFunc(func(runtime.ProbeType, results.Update) { e.applied.Add(1) }))
	storeCtx, cancelStore := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		fanout.Run(storeCtx)
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		// The fan-out keeps draining updates until Close returns (R4).
		if err := e.mgr.Close(ctx); err != nil {
			t.Errorf("manager Close: %v", err)
		}
		cancelStore()
		wg.Wait()
		if err := rt.Close(ctx); err != nil {
			t.Errorf("runtime Close: %v", err)
		}
	})
	if o.age > 0 {
		e.advance(o.age, time.Second)
	}
	return e
}

func (e *env) emitted() int64 {
	var n int64
	for _, r := range e.res {
		n += r.emitted.Load()
	}
	return n
}

// settle waits (in real time) until the manager is idle at the current fake
// time and the store has applied every result update, including the runs
// that applying them triggered.
func (e *env) settle() {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		if manager.Idle(e.mgr) {
			e1, a1 := e.emitted(), e.applied.Load()
			if e1 == a1 && manager.Idle(e.mgr) && e.emitted() == e1 && e.applied.Load() == a1 {
				return
			}
		}
		if time.Now().After(deadline) {
			st, _ := manager.StatsOf(e.mgr)
			e.t.Fatalf("never settled at t=%v: stats %+v, emitted %d, applied %d", e.now(), st, e.emitted(), e.applied.Load())
		}
		// Yield first (a sleep costs a timer wake-up of up to a
		// millisecond), then poll gently.
		if i < 200 {
			goruntime.Gosched()
		} else {
			time.Sleep(100 * time.Microsecond)
		}
	}
}

// now returns the fake time since the manager started.
func (e *env) now() time.Duration { return e.clk.Since(e.start) }

// advance steps the fake clock by d in steps of at most step, settling
// after each.
func (e *env) advance(d, step time.Duration) {
	e.t.Helper()
	e.advanceTo(e.clk.Now().Add(d), step, nil)
}

// advanceTo steps the fake clock to target in steps of at most step,
// settling after each and then calling each (if set); each returning false
// stops early. It reports whether it reached target.
func (e *env) advanceTo(target time.Time, step time.Duration, each func() bool) bool {
	e.t.Helper()
	for e.clk.Now().Before(target) {
		d := min(step, target.Sub(e.clk.Now()))
		e.clk.Step(d)
		e.settle()
		if each != nil && !each() {
			return e.clk.Now().Equal(target)
		}
	}
	return true
}

// ---------------------------------------------------------------------------
// Pods.

const testNamespace = "cases"

// newPod returns a pod (restartPolicy Always) with the containers.
func newPod(name string, containers ...v1.Container) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNamespace, UID: types.UID(name + "-uid")},
		Spec:       v1.PodSpec{Containers: containers, RestartPolicy: v1.RestartPolicyAlways},
	}
}

// add defaults and validates the pod as the API server would, then does
// what the agent does for a new pod (AddPod, then the store's first status)
// and settles. It returns the pod as defaulted.
func (e *env) add(pod *v1.Pod) *v1.Pod {
	e.t.Helper()
	pod = e.addNoSettle(pod)
	e.settle()
	return pod
}

func (e *env) addNoSettle(pod *v1.Pod) *v1.Pod {
	e.t.Helper()
	pod = pod.DeepCopy()
	manifest.SetDefaults(pod)
	if errs := manifest.ValidatePod(pod); len(errs) > 0 {
		e.t.Fatalf("pod %s is invalid: %v", pod.Name, errs.ToAggregate())
	}
	e.mgr.AddPod(context.Background(), pod)
	e.store.Put(pod)
	return pod
}

// remove does the kubelet's termination sequence (K5) without the grace
// period: StopLivenessAndStartup, RemovePod, then the pod leaves the store.
func (e *env) remove(pod *v1.Pod) {
	e.t.Helper()
	e.mgr.StopLivenessAndStartup(pod)
	e.mgr.RemovePod(pod)
	e.settle()
	e.store.Delete(pod.UID)
	e.settle()
}

// pod returns the pod with its current status.
func (e *env) pod(uid types.UID) *v1.Pod {
	e.t.Helper()
	p, ok := e.store.Pod(uid)
	if !ok {
		e.t.Fatalf("pod %s not in the store", uid)
	}
	return p
}

// container returns the current status of a container.
func (e *env) container(uid types.UID, name string) v1.ContainerStatus {
	e.t.Helper()
	p := e.pod(uid)
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == name {
			return cs
		}
	}
	e.t.Fatalf("pod %s has no status for container %s", uid, name)
	return v1.ContainerStatus{}
}

func started(cs v1.ContainerStatus) bool { return cs.Started != nil && *cs.Started }

func condition(p *v1.Pod, t v1.PodConditionType) v1.ConditionStatus {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return v1.ConditionUnknown
}

// cached returns the cached result of a container for a probe type.
func (e *env) cached(pt runtime.ProbeType, containerID string) (results.Result, bool) {
	return e.res[pt].Get(results.ParseContainerID(containerID))
}

// ---------------------------------------------------------------------------
// Records.

// runsOf returns the executed runs of a container's probe type, in order.
func (e *env) runsOf(container string, pt runtime.ProbeType) []runRec {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []runRec
	for _, r := range e.runs {
		if r.ContainerName == container && r.ProbeType == pt {
			out = append(out, r)
		}
	}
	return out
}

func (e *env) allRuns() []runRec {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]runRec(nil), e.runs...)
}

func (e *env) restartList() []restartRec {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]restartRec(nil), e.restarts...)
}

// since returns the fake time of t relative to base.
func since(t, base time.Time) time.Duration { return t.Sub(base) }

// ---------------------------------------------------------------------------
// Metrics.

type sample struct {
	labels map[string]string
	value  float64 // counter value, or histogram sample count
}

// gather returns the samples of a metric family in e.reg.
func (e *env) gather(name string) []sample {
	e.t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		e.t.Fatalf("Gather: %v", err)
	}
	var out []sample
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			out = append(out, sample{labels: labelMap(m), value: metricValue(mf.GetType(), m)})
		}
	}
	return out
}

func labelMap(m *dto.Metric) map[string]string {
	l := map[string]string{}
	for _, lp := range m.GetLabel() {
		l[lp.GetName()] = lp.GetValue()
	}
	return l
}

func metricValue(t dto.MetricType, m *dto.Metric) float64 {
	switch t {
	case dto.MetricType_COUNTER:
		return m.GetCounter().GetValue()
	case dto.MetricType_HISTOGRAM:
		return float64(m.GetHistogram().GetSampleCount())
	case dto.MetricType_GAUGE:
		return m.GetGauge().GetValue()
	}
	return 0
}

// probeTotal returns prober_probe_total for a pod's container, probe type
// and result label; 0 when the series does not exist.
func (e *env) probeTotal(pod *v1.Pod, container, probeType, result string) float64 {
	for _, s := range e.gather(manager.MetricProbeTotal) {
		l := s.labels
		if l["pod_uid"] == string(pod.UID) && l["container"] == container && l["probe_type"] == probeType && l["result"] == result {
			return s.value
		}
	}
	return 0
}

// ---------------------------------------------------------------------------
// Events.

func (e *env) eventList() []events.Event { return e.events.List() }

// eventsMatching returns the events whose message contains substr.
func (e *env) eventsMatching(substr string) []events.Event {
	var out []events.Event
	for _, ev := range e.eventList() {
		if strings.Contains(ev.Message, substr) {
			out = append(out, ev)
		}
	}
	return out
}

// ---------------------------------------------------------------------------
// Servers.

// reqRec is one request a test server received, at a fake time.
type reqRec struct {
	At     time.Time
	Method string
	Path   string
	Host   string
	Header http.Header
	Close  bool
	Remote string
	Local  string
	Body   int64
}

// server is a loopback HTTP server that records its requests.
type server struct {
	*httptest.Server
	Port int

	mu   sync.Mutex
	reqs []reqRec
}

type ctxKey struct{}

// startServer serves h on addr ("127.0.0.1:0") and records every request
// with the fake time of clk. cfg, if any, adjust the http.Server before it
// starts.
func startServer(t *testing.T, clk *testingclock.FakeClock, addr string, h http.HandlerFunc, cfg ...func(*http.Server)) *server {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	s := &server{}
	rec := func(w http.ResponseWriter, r *http.Request) {
		n, _ := r.Body.Read(make([]byte, 1))
		local := ""
		if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
			local = a.String()
		}
		s.mu.Lock()
		s.reqs = append(s.reqs, reqRec{At: clk.Now(), Method: r.Method, Path: r.URL.Path, Host: r.Host,
			Header: r.Header.Clone(), Close: r.Close, Remote: r.RemoteAddr, Local: local, Body: int64(n)})
		s.mu.Unlock()
		h(w, r)
	}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(rec))
	s.Listener.Close()
	s.Listener = ln
	for _, f := range cfg {
		f(s.Config)
	}
	s.Start()
	s.Port = ln.Addr().(*net.TCPAddr).Port
	t.Cleanup(s.Close)
	return s
}

// requests returns the recorded requests for path ("" = all).
func (s *server) requests(path string) []reqRec {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []reqRec
	for _, r := range s.reqs {
		if path == "" || r.Path == path {
			out = append(out, r)
		}
	}
	return out
}

// freePort returns a loopback port nothing listens on (it was just
// released).
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

// ---------------------------------------------------------------------------
// Probes.

func httpProbe(path string, port int) *v1.Probe {
	return &v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: path, Port: intstr.FromInt32(int32(port))}}}
}

func tcpProbe(port int) *v1.Probe {
	return &v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(int32(port))}}}
}

func execProbe(cmd ...string) *v1.Probe {
	return &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: cmd}}}
}

// timing sets a probe's timing fields (0 leaves the field to SetDefaults).
func timing(p *v1.Probe, initialDelay, period, timeout, success, failure int32) *v1.Probe {
	p.InitialDelaySeconds = initialDelay
	p.PeriodSeconds = period
	p.TimeoutSeconds = timeout
	p.SuccessThreshold = success
	p.FailureThreshold = failure
	return p
}

func ptr[T any](v T) *T { return &v }

func itoa(i int) string { return strconv.Itoa(i) }

func fmtDurs(ds []time.Duration) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = d.String()
	}
	return "[" + strings.Join(parts, " ") + "]"
}
