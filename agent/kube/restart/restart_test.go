package restart_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/probed/probed/agent/actuate"
	"github.com/probed/probed/agent/events"
	"github.com/probed/probed/agent/kube/cri"
	"github.com/probed/probed/agent/kube/nsscope"
	"github.com/probed/probed/agent/kube/restart"
	probeexec "github.com/probed/probed/plugins/exec"
	"github.com/probed/probed/runtime"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreCurrent()) }

// fakeRuntime records the calls of the actuator (the decisions are under
// test here; the real runtime's side is restart_cri_test.go's).
type fakeRuntime struct {
	mu      sync.Mutex
	calls   []string
	state   runtimeapi.ContainerState
	stopErr []error // returned by the next StopContainer calls, in order
}

func (f *fakeRuntime) ContainerID(s string) (string, error) {
	id, ok := strings.CutPrefix(s, "containerd://")
	if !ok {
		return "", fmt.Errorf("container ID %q is of another runtime", s)
	}
	return id, nil
}

func (f *fakeRuntime) record(call string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
}

// Resolve confirms every containerd:// container (the labels' check is
// agent/kube/cri's, tested against the real runtime).
func (f *fakeRuntime) Resolve(_ context.Context, statusID string, _ probeexec.PodContainer) (cri.Container, error) {
	id, err := f.ContainerID(statusID)
	return cri.Container{ID: id, StatusID: statusID}, err
}

func (f *fakeRuntime) ContainerStatus(_ context.Context, ctr cri.Container) (*runtimeapi.ContainerStatus, error) {
	id := ctr.ID
	f.record("ContainerStatus " + id)
	f.mu.Lock()
	defer f.mu.Unlock()
	return &runtimeapi.ContainerStatus{Id: id, State: f.state}, nil
}

func (f *fakeRuntime) ExecSync(_ context.Context, ctr cri.Container, cmd []string, timeout time.Duration) ([]byte, []byte, error) {
	f.record(fmt.Sprintf("ExecSync %s %q %v", ctr.ID, cmd, timeout))
	return nil, nil, nil
}

func (f *fakeRuntime) StopContainer(_ context.Context, ctr cri.Container, grace int64) error {
	f.record(fmt.Sprintf("StopContainer %s %d", ctr.ID, grace))
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.stopErr) > 0 {
		err := f.stopErr[0]
		f.stopErr = f.stopErr[1:]
		return err
	}
	return nil
}

func (f *fakeRuntime) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

type env struct {
	act     *actuate.Queue
	rt      *fakeRuntime
	events  *events.Recorder
	clock   *testingclock.FakeClock
	allowed map[string]string // namespace -> why not ("" allowed)
}

func newEnv(t *testing.T, probe *v1.Probe) *env {
	t.Helper()
	return newEnvWith(t, probe, nil)
}

// newEnvWith is newEnv with the step's options changed by mutate.
func newEnvWith(t *testing.T, probe *v1.Probe, mutate func(*restart.Options)) *env {
	t.Helper()
	e := &env{rt: &fakeRuntime{state: runtimeapi.ContainerState_CONTAINER_RUNNING},
		events: events.New(100, slog.New(slog.DiscardHandler), nil),
		clock:  testingclock.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)), allowed: map[string]string{}}
	opts := restart.Options{
		Runtime:  e.rt,
		Recorder: e.events,
		Probe:    func(*v1.Pod, string, runtime.ProbeType) *v1.Probe { return probe },
		Clock:    e.clock,
		Logger:   slog.New(slog.DiscardHandler),
	}
	if mutate != nil {
		mutate(&opts)
	}
	step, err := restart.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	// The agent's actuator of --liveness-action=restart: the queue
	// around the step in a namespace scope (e.allowed's).
	act, err := actuate.New(actuate.Options{Step: nsscope.Guard(namespaces(e.allowed), step), Texts: restart.Texts, Recorder: e.events,
		Clock: e.clock, Workers: restart.DefaultWorkers, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	e.act = act
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = act.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return e
}

// namespaces is a namespace scope: why not, by namespace (none: allowed).
type namespaces map[string]string

func (n namespaces) Known(ns string) (string, bool)                      { return n[ns], true }
func (n namespaces) Allows(_ context.Context, ns string) (string, error) { return n[ns], nil }
func (n namespaces) String() string                                      { return "test" }

func pod(grace int64, lifecycle *v1.Lifecycle) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "web", UID: "uid-1"},
		Spec: v1.PodSpec{
			TerminationGracePeriodSeconds: &grace,
			Containers:                    []v1.Container{{Name: "app", Lifecycle: lifecycle}},
		},
		Status: v1.PodStatus{PodIP: "127.0.0.1"},
	}
}

func (e *env) fail(p *v1.Pod, id string, t runtime.ProbeType) {
	e.act.ContainerFailed(actuate.Failure{Pod: p, Container: "app", ContainerID: id, Probe: t})
}

// waitCalls waits until the runtime saw n calls and returns them.
func (e *env) waitCalls(t *testing.T, n int) []string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		calls := e.rt.Calls()
		if len(calls) >= n {
			return calls
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d runtime calls, want %d: %q", len(calls), n, calls)
		}
		time.Sleep(time.Millisecond)
	}
}

// settle lets the workers take what is queued (nothing should come).
func (e *env) settle() { time.Sleep(50 * time.Millisecond) }

func (e *env) eventsOf(reason string) []events.Event {
	var out []events.Event
	for _, ev := range e.events.List() {
		if ev.Reason == reason {
			out = append(out, ev)
		}
	}
	return out
}

// K2, K3: a liveness failure is the kubelet's Normal Killing Event, then
// StopContainer with the probe's terminationGracePeriodSeconds, which
// overrides the pod's; a startup failure names its probe.
func TestRestartStopsWithTheProbesGracePeriod(t *testing.T) {
	g := int64(7)
	e := newEnv(t, &v1.Probe{TerminationGracePeriodSeconds: &g})
	e.fail(pod(30, nil), "containerd://c1", runtime.Liveness)
	calls := e.waitCalls(t, 2)
	if calls[0] != "ContainerStatus c1" || calls[1] != "StopContainer c1 7" {
		t.Fatalf("calls %q", calls)
	}
	ev := e.eventsOf(restart.ReasonKilling)
	if len(ev) != 1 || ev[0].Type != v1.EventTypeNormal || ev[0].Message != "Container app failed liveness probe, will be restarted" ||
		ev[0].FieldPath != "spec.containers{app}" {
		t.Fatalf("Killing events %+v", ev)
	}
}

// K3: without a probe grace period the pod's; a startup failure's message.
func TestRestartStopsWithThePodsGracePeriod(t *testing.T) {
	e := newEnv(t, nil)
	e.fail(pod(30, nil), "containerd://c1", runtime.Startup)
	if calls := e.waitCalls(t, 2); calls[1] != "StopContainer c1 30" {
		t.Fatalf("calls %q", calls)
	}
	if ev := e.eventsOf(restart.ReasonKilling); len(ev) != 1 || ev[0].Message != "Container app failed startup probe, will be restarted" {
		t.Fatalf("Killing events %+v", ev)
	}
}

// K2: under restartPolicy Never the kubelet's message says nothing of a
// restart (the container is stopped all the same).
func TestKillingMessageUnderRestartPolicyNever(t *testing.T) {
	e := newEnv(t, nil)
	p := pod(30, nil)
	p.Spec.RestartPolicy = v1.RestartPolicyNever
	e.fail(p, "containerd://c1", runtime.Liveness)
	e.waitCalls(t, 2)
	if ev := e.eventsOf(restart.ReasonKilling); len(ev) != 1 || ev[0].Message != "Container app failed liveness probe" {
		t.Fatalf("Killing events %+v", ev)
	}
}

// Once per container instance: another report of the same instance does
// nothing; the restarted container (a new ID) is restarted again.
func TestOncePerInstance(t *testing.T) {
	e := newEnv(t, nil)
	p := pod(30, nil)
	e.fail(p, "containerd://c1", runtime.Liveness)
	e.fail(p, "containerd://c1", runtime.Startup)
	e.waitCalls(t, 2)
	e.settle()
	if calls := e.rt.Calls(); len(calls) != 2 {
		t.Fatalf("calls %q, want one restart", calls)
	}
	e.fail(p, "containerd://c2", runtime.Liveness)
	if calls := e.waitCalls(t, 4); calls[3] != "StopContainer c2 30" {
		t.Fatalf("calls %q", calls)
	}
}

// Never for a terminating pod, nor for a container ID of another runtime:
// a Warning Event says why, and the runtime is not called.
func TestRefusedAtOnce(t *testing.T) {
	e := newEnv(t, nil)
	p := pod(30, nil)
	now := metav1.Now()
	p.DeletionTimestamp = &now
	e.fail(p, "containerd://c1", runtime.Liveness)
	e.fail(pod(30, nil), "docker://c2", runtime.Startup)
	e.settle()
	if calls := e.rt.Calls(); len(calls) != 0 {
		t.Fatalf("calls %q", calls)
	}
	if ev := e.eventsOf(restart.ReasonLivenessProbeFailed); len(ev) != 1 || ev[0].Type != v1.EventTypeWarning ||
		ev[0].Message != "Container app failed liveness probe; the container is not restarted: the pod is terminating" {
		t.Fatalf("events %+v", e.events.List())
	}
	if ev := e.eventsOf(restart.ReasonStartupProbeFailed); len(ev) != 1 ||
		!strings.HasPrefix(ev[0].Message, `Container app failed startup probe; the container is not restarted: container ID "docker://c2"`) {
		t.Fatalf("events %+v", e.events.List())
	}
}

// Only where the namespace policy allows it: elsewhere the Event says why
// and the container is neither looked at nor stopped.
func TestNamespaceNotAllowed(t *testing.T) {
	e := newEnv(t, nil)
	e.allowed["ns1"] = "namespace ns1 is not labelled probed.io/liveness-actions=enabled (label it to allow restarts)"
	e.fail(pod(30, nil), "containerd://c1", runtime.Liveness)
	deadline := time.Now().Add(5 * time.Second)
	for len(e.eventsOf(restart.ReasonLivenessProbeFailed)) == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	ev := e.eventsOf(restart.ReasonLivenessProbeFailed)
	if len(ev) != 1 || ev[0].Message != "Container app failed liveness probe; the container is not restarted: "+e.allowed["ns1"] {
		t.Fatalf("events %+v", e.events.List())
	}
	if calls := e.rt.Calls(); len(calls) != 0 || len(e.eventsOf(restart.ReasonKilling)) != 0 {
		t.Fatalf("calls %q", calls)
	}
}

// A container the runtime no longer runs is the kubelet's business: no
// Killing Event, no stop.
func TestNotRunningIsLeftAlone(t *testing.T) {
	e := newEnv(t, nil)
	e.rt.state = runtimeapi.ContainerState_CONTAINER_EXITED
	e.fail(pod(30, nil), "containerd://c1", runtime.Liveness)
	e.waitCalls(t, 1)
	e.settle()
	if calls := e.rt.Calls(); len(calls) != 1 || len(e.eventsOf(restart.ReasonKilling)) != 0 {
		t.Fatalf("calls %q, events %+v", calls, e.events.List())
	}
}

// The node's rate: 3 restarts at once, then one per 10 s (the failures are
// of one namespace, which holds 2 of the 8 workers at once).
func TestRateBoundPerNode(t *testing.T) {
	e := newEnv(t, nil)
	for i := range 4 {
		e.fail(pod(30, nil), fmt.Sprintf("containerd://c%d", i), runtime.Liveness)
	}
	e.waitCalls(t, 6)
	e.settle()
	if calls := e.rt.Calls(); len(calls) != 6 {
		t.Fatalf("%d calls before the bucket refills: %q", len(calls), calls)
	}
	e.clock.Step(actuate.DefaultInterval)
	if calls := e.waitCalls(t, 8); calls[7] != "StopContainer c3 30" {
		t.Fatalf("calls %q", calls)
	}
}

// K3 with a preStop hook: its time comes off the grace period (whole
// seconds); a hook that outlives the grace period is cut there and the stop
// still gets the kubelet's minimum of 2 s; an exec hook runs in the
// container without a timeout of its own.
func TestPreStopTakesFromTheGracePeriod(t *testing.T) {
	for _, tc := range []struct {
		name  string
		hook  v1.LifecycleHandler
		step  time.Duration
		stop  string
		event bool
	}{
		{"sleep within the grace period", v1.LifecycleHandler{Sleep: &v1.SleepAction{Seconds: 5}}, 5500 * time.Millisecond, "StopContainer c1 25", false},
		{"sleep past the grace period", v1.LifecycleHandler{Sleep: &v1.SleepAction{Seconds: 40}}, 30 * time.Second, "StopContainer c1 2", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, nil)
			e.fail(pod(30, &v1.Lifecycle{PreStop: &tc.hook}), "containerd://c1", runtime.Liveness)
			e.waitCalls(t, 1)
			deadline := time.Now().Add(5 * time.Second)
			for !e.clock.HasWaiters() && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			e.clock.Step(tc.step)
			if calls := e.waitCalls(t, 2); calls[1] != tc.stop {
				t.Fatalf("calls %q, want %s", calls, tc.stop)
			}
			if got := len(e.eventsOf(restart.ReasonFailedPreStopHook)); got != 0 {
				t.Fatalf("%d FailedPreStopHook events", got)
			}
		})
	}
	t.Run("exec", func(t *testing.T) {
		e := newEnv(t, nil)
		hook := &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"sh", "-c", "echo bye"}}}
		e.fail(pod(30, &v1.Lifecycle{PreStop: hook}), "containerd://c1", runtime.Liveness)
		calls := e.waitCalls(t, 3)
		if calls[1] != `ExecSync c1 ["sh" "-c" "echo bye"] 0s` || calls[2] != "StopContainer c1 30" {
			t.Fatalf("calls %q", calls)
		}
	})
}

// A tenant's hour-long grace period and preStop hook are cut at the cap
// (--liveness-action-max-grace-period), as the kubelet cuts a hook at the
// grace period: the hook gets the cap, the stop the kubelet's minimum of
// 2 s after it; without a hook the stop gets the cap. A grace period under
// the cap is the pod's own.
func TestGracePeriodIsCapped(t *testing.T) {
	hour := int64(3600)
	t.Run("preStop hook", func(t *testing.T) {
		e := newEnvWith(t, &v1.Probe{TerminationGracePeriodSeconds: &hour}, func(o *restart.Options) { o.MaxGracePeriod = 10 * time.Second })
		hook := &v1.LifecycleHandler{Sleep: &v1.SleepAction{Seconds: 3600}}
		e.fail(pod(3600, &v1.Lifecycle{PreStop: hook}), "containerd://c1", runtime.Liveness)
		e.waitCalls(t, 1)
		deadline := time.Now().Add(5 * time.Second)
		for e.clock.Waiters() < 2 && time.Now().Before(deadline) { // the delays' heartbeat and the hook's sleep
			time.Sleep(time.Millisecond)
		}
		e.clock.Step(9 * time.Second)
		e.settle()
		if calls := e.rt.Calls(); len(calls) != 1 {
			t.Fatalf("calls %q before the cap passed", calls)
		}
		e.clock.Step(time.Second)
		if calls := e.waitCalls(t, 2); calls[1] != "StopContainer c1 2" {
			t.Fatalf("calls %q, want the stop with the kubelet's minimum after the cap", calls)
		}
	})
	t.Run("no hook", func(t *testing.T) {
		e := newEnvWith(t, nil, func(o *restart.Options) { o.MaxGracePeriod = 10 * time.Second })
		e.fail(pod(3600, nil), "containerd://c1", runtime.Liveness)
		if calls := e.waitCalls(t, 2); calls[1] != "StopContainer c1 10" {
			t.Fatalf("calls %q", calls)
		}
	})
	t.Run("under the cap", func(t *testing.T) {
		e := newEnv(t, nil)
		e.fail(pod(45, nil), "containerd://c1", runtime.Liveness)
		if calls := e.waitCalls(t, 2); calls[1] != "StopContainer c1 45" {
			t.Fatalf("calls %q, want the pod's own 45 s under the default cap of %v", calls, restart.DefaultMaxGracePeriod)
		}
	})
}

// A stop the runtime refuses is retried after the backoff (5 s), without
// running the preStop hook again; after MaxAttempts a Warning
// RestartFailed Event.
func TestStopRetried(t *testing.T) {
	e := newEnv(t, nil)
	down := status.Error(codes.Unavailable, "connection refused")
	e.rt.stopErr = []error{down, nil}
	hook := &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"true"}}}
	e.fail(pod(30, &v1.Lifecycle{PreStop: hook}), "containerd://c1", runtime.Liveness)
	e.waitCalls(t, 3)
	e.settle()
	e.clock.Step(actuate.DefaultRetryBase)
	calls := e.waitCalls(t, 5)
	want := []string{"ContainerStatus c1", `ExecSync c1 ["true"] 0s`, "StopContainer c1 30", "ContainerStatus c1", "StopContainer c1 30"}
	if fmt.Sprint(calls) != fmt.Sprint(want) {
		t.Fatalf("calls %q\nwant  %q", calls, want)
	}
	if n := len(e.eventsOf(restart.ReasonKilling)); n != 1 {
		t.Fatalf("%d Killing events, want 1", n)
	}

	e2 := newEnv(t, nil)
	for range actuate.DefaultMaxAttempts {
		e2.rt.stopErr = append(e2.rt.stopErr, down)
	}
	e2.fail(pod(30, nil), "containerd://c1", runtime.Liveness)
	for i := 1; i <= actuate.DefaultMaxAttempts; i++ {
		e2.waitCalls(t, 2*i)
		e2.settle()
		e2.clock.Step(actuate.DefaultRetryMax)
	}
	ev := e2.eventsOf(restart.ReasonRestartFailed)
	if len(ev) != 1 || !strings.Contains(ev[0].Message, "after 5 attempts") || !strings.Contains(ev[0].Message, "connection refused") {
		t.Fatalf("events %+v", e2.events.List())
	}
	e2.settle()
	if n := len(e2.rt.Calls()); n != 2*actuate.DefaultMaxAttempts {
		t.Fatalf("%d calls after giving up", n)
	}
}

func TestNewErrors(t *testing.T) {
	rec := events.New(10, slog.New(slog.DiscardHandler), nil)
	for name, o := range map[string]restart.Options{
		"no runtime":                        {Recorder: rec},
		"no recorder":                       {Runtime: &fakeRuntime{}},
		"a cap under the kubelet's minimum": {Runtime: &fakeRuntime{}, Recorder: rec, MaxGracePeriod: time.Second},
	} {
		if _, err := restart.New(o); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	_, err := restart.New(restart.Options{Recorder: rec})
	if err == nil || !strings.Contains(err.Error(), "--container-runtime-endpoint") {
		t.Errorf("no runtime: %v", err)
	}
}
