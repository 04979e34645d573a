package manager

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/probed/probed/manager/results"
	"github.com/probed/probed/runtime"
)

// IgnoreCurrent: ants starts its package-level default pool at init.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreCurrent()) }

// Fixtures of the kubelet's prober tests (spec §8 common_test.go).
const (
	testPodUID        = types.UID("pOd_UiD")
	testContainerName = "cOnTaInEr_NaMe"
	testContainerID   = "test://cOnTaInEr_Id"
)

var testContainerIDParsed = results.ContainerID{Type: "test", ID: "cOnTaInEr_Id"}

// fakeStatus is a StatusProvider backed by a map, like the kubelet's
// status manager in its prober tests.
type fakeStatus struct {
	panics   atomic.Bool // GetPodStatus panics while set
	mu       sync.Mutex
	statuses map[types.UID]v1.PodStatus
}

func newFakeStatus() *fakeStatus { return &fakeStatus{statuses: map[types.UID]v1.PodStatus{}} }

func (f *fakeStatus) GetPodStatus(uid types.UID) (v1.PodStatus, bool) {
	if f.panics.Load() {
		panic("fake status provider panics")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.statuses[uid]
	if !ok {
		return v1.PodStatus{}, false
	}
	return *s.DeepCopy(), true
}

func (f *fakeStatus) set(uid types.UID, s v1.PodStatus) {
	f.mu.Lock()
	f.statuses[uid] = *s.DeepCopy()
	f.mu.Unlock()
}

func (f *fakeStatus) del(uid types.UID) {
	f.mu.Lock()
	delete(f.statuses, uid)
	f.mu.Unlock()
}

// fakeExec is a handler for kind "exec" that returns a settable verdict,
// the kubelet tests' fake exec prober.
type fakeExec struct {
	result atomic.Int32 // runtime.Result
	err    atomic.Pointer[error]
	calls  atomic.Int64
	// gate, when set, holds each probe until it is closed or the probe's
	// context ends (then the probe errors with the context's error).
	gate atomic.Pointer[chan struct{}]
	// during, when set, runs inside every probe (e.g. to move a fake clock
	// as a slow target would).
	during atomic.Pointer[func()]
}

func (f *fakeExec) set(r runtime.Result) { f.result.Store(int32(r)) }

func (f *fakeExec) setErr(err error) {
	if err == nil {
		f.err.Store(nil)
		return
	}
	f.err.Store(&err)
}

func (f *fakeExec) Prepare(*runtime.Spec) (runtime.Prober, error) {
	return runtime.ProberFunc(func(ctx context.Context, _ runtime.Target) (runtime.Outcome, error) {
		f.calls.Add(1)
		if d := f.during.Load(); d != nil {
			(*d)()
		}
		if g := f.gate.Load(); g != nil {
			select {
			case <-*g:
			case <-ctx.Done():
				return runtime.Outcome{Result: runtime.Unknown}, ctx.Err()
			}
		}
		if e := f.err.Load(); e != nil {
			return runtime.Outcome{Result: runtime.Unknown}, *e
		}
		return runtime.Outcome{Result: runtime.Result(f.result.Load()), Output: "fake"}, nil
	}), nil
}

type testEnv struct {
	t      testing.TB
	m      *manager
	clk    *testingclock.FakeClock
	status *fakeStatus
	exec   *fakeExec
	live   results.Manager
	ready  results.Manager
	start  results.Manager
	drain  sync.WaitGroup
	stop   chan struct{}
	// updates seen by the drainer, per probe type
	mu      sync.Mutex
	updates map[runtime.ProbeType][]results.Update
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newTestEnv builds a manager on a fake clock whose runtime has the fake
// exec handler (tests of real handlers live with the handlers and in the
// agent's tests). A goroutine drains the results managers'
// updates (as the kubelet's sync loop does) until cleanup.
func newTestEnv(t testing.TB, mutate ...func(*Options)) *testEnv {
	t.Helper()
	env := &testEnv{
		t:       t,
		clk:     testingclock.NewFakeClock(fakeNow),
		status:  newFakeStatus(),
		exec:    &fakeExec{},
		live:    results.NewManager(),
		ready:   results.NewManager(),
		start:   results.NewManager(),
		stop:    make(chan struct{}),
		updates: map[runtime.ProbeType][]results.Update{},
	}
	env.exec.set(runtime.Success)
	rt, err := runtime.New(runtime.Options{PoolSize: 16, ExecPoolSize: 4, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Register(runtime.KindExec, env.exec); err != nil {
		t.Fatal(err)
	}
	opts := Options{
		Status:    env.status,
		Liveness:  env.live,
		Readiness: env.ready,
		Startup:   env.start,
		Clock:     env.clk,
		Runtime:   rt,
		Logger:    quietLogger(),
		Shards:    1,
		// A registry, so the prober metrics are counted (X1–X4).
		MetricsRegisterer: prometheus.NewRegistry(),
	}
	for _, f := range mutate {
		f(&opts)
	}
	mi, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	env.m = mi.(*manager)
	for pt, rm := range map[runtime.ProbeType]results.Manager{runtime.Liveness: env.live, runtime.Readiness: env.ready, runtime.Startup: env.start} {
		env.drain.Add(1)
		go func(pt runtime.ProbeType, ch <-chan results.Update) {
			defer env.drain.Done()
			for {
				select {
				case u := <-ch:
					env.mu.Lock()
					env.updates[pt] = append(env.updates[pt], u)
					env.mu.Unlock()
				case <-env.stop:
					return
				}
			}
		}(pt, rm.Updates())
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := env.m.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
		close(env.stop)
		env.drain.Wait()
		if err := rt.Close(ctx); err != nil {
			t.Errorf("runtime Close: %v", err)
		}
	})
	return env
}

// idle waits (in real time) until the scheduler has processed the current
// fake time and no run is queued or in flight.
func (e *testEnv) idle() {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !e.m.sched.Idle() {
		if time.Now().After(deadline) {
			e.t.Fatalf("scheduler never went idle: %+v", e.m.sched.Stats())
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// step moves the fake clock and waits for the runs it caused.
func (e *testEnv) step(d time.Duration) {
	e.t.Helper()
	e.clk.Step(d)
	e.idle()
}

// runOnce makes the worker run doProbe exactly once (a manual trigger, as
// the kubelet's tests call doProbe directly) and waits for it.
func (e *testEnv) runOnce(w *worker) {
	e.t.Helper()
	e.idle()
	e.m.sched.Trigger(w.id)
	e.idle()
}

func (e *testEnv) worker(uid types.UID, name string, pt runtime.ProbeType) *worker {
	e.t.Helper()
	w, ok := e.m.getWorker(uid, name, pt)
	if !ok {
		e.t.Fatalf("no %v worker for %s/%s", pt, uid, name)
	}
	return w
}

// waitGone waits until the worker of the key has exited (M6: stop is async).
func (e *testEnv) waitGone(uid types.UID, name string, pt runtime.ProbeType) {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, ok := e.m.getWorker(uid, name, pt); !ok {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%v worker for %s/%s still exists", pt, uid, name)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func (e *testEnv) waitWorkerCount(n int) {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for e.m.workerCount() != n {
		if time.Now().After(deadline) {
			e.t.Fatalf("workerCount = %d, want %d", e.m.workerCount(), n)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func (e *testEnv) results(pt runtime.ProbeType) results.Manager { return e.m.results[pt] }

// cached returns the cached result of the test container for pt.
func (e *testEnv) cached(pt runtime.ProbeType) (results.Result, bool) {
	return e.results(pt).Get(testContainerIDParsed)
}

func (e *testEnv) expectCached(pt runtime.ProbeType, want results.Result) {
	e.t.Helper()
	got, ok := e.cached(pt)
	if !ok || got != want {
		e.t.Fatalf("%v cached result = %v (found %v), want %v", pt, got, ok, want)
	}
}

func (e *testEnv) expectNoCached(pt runtime.ProbeType) {
	e.t.Helper()
	if got, ok := e.cached(pt); ok {
		e.t.Fatalf("%v cached result = %v, want none", pt, got)
	}
}

// Probe helpers: the fixtures' defaults Timeout 1, Period 1, Success 1,
// Failure 1 (spec §8).
func execProbe() *v1.Probe {
	return &v1.Probe{
		ProbeHandler:     v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}},
		TimeoutSeconds:   1,
		PeriodSeconds:    1,
		SuccessThreshold: 1,
		FailureThreshold: 1,
	}
}

func probeOf(pt runtime.ProbeType, p *v1.Probe) v1.Container {
	c := v1.Container{Name: testContainerName}
	switch pt {
	case runtime.Liveness:
		c.LivenessProbe = p
	case runtime.Readiness:
		c.ReadinessProbe = p
	case runtime.Startup:
		c.StartupProbe = p
	}
	return c
}

func testPod(containers ...v1.Container) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{UID: testPodUID, Name: "test_pod", Namespace: "test"},
		Spec: v1.PodSpec{
			Containers:    containers,
			RestartPolicy: v1.RestartPolicyNever,
		},
	}
}

// runningStatus is the fixtures' running pod status: phase Running, one
// container running since startedAt with the given Started.
func runningStatus(startedAt time.Time, started bool) v1.PodStatus {
	return v1.PodStatus{
		Phase: v1.PodRunning,
		PodIP: "127.0.0.1",
		ContainerStatuses: []v1.ContainerStatus{{
			Name:        testContainerName,
			ContainerID: testContainerID,
			State:       v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(startedAt)}},
			Started:     &started,
		}},
	}
}

// fakeNow is where every test's fake clock starts.
var fakeNow = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

var errFake = errors.New("fake handler error")
