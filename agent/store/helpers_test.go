package store_test

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/probed/probed/agent/actuate"
	"github.com/probed/probed/agent/events"
	"github.com/probed/probed/agent/simulator"
	"github.com/probed/probed/agent/store"
	"github.com/probed/probed/agent/verdicts"
	"github.com/probed/probed/internal/nettest"
	"github.com/probed/probed/internal/testlog"
	"github.com/probed/probed/manager"
	"github.com/probed/probed/manager/results"
)

// IgnoreCurrent: ants starts its package-level default pool at init.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreCurrent()) }

var fakeNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// httpProbe returns a defaulted HTTP probe of tg's path: period 1 s,
// timeout 1 s, thresholds 1.
func httpProbe(tg *nettest.Target, path string) *v1.Probe {
	return &v1.Probe{
		ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{
			Path: path, Port: intstr.FromInt32(int32(tg.Port)), Scheme: v1.URISchemeHTTP,
		}},
		TimeoutSeconds: 1, PeriodSeconds: 1, SuccessThreshold: 1, FailureThreshold: 1,
	}
}

// env is a store driven by a real manager on a fake clock, with the store
// consuming the results managers' updates as the agent's sync loop does.
type env struct {
	t        *testing.T
	clk      *testingclock.FakeClock
	st       *store.Store
	mgr      manager.Manager
	live     results.Manager
	ready    results.Manager
	start    results.Manager
	logs     *testlog.Buffer
	restarts chan simulator.Restart
	sim      *simulator.Simulator
	events   *events.Recorder
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{
		t:        t,
		clk:      testingclock.NewFakeClock(fakeNow),
		live:     results.NewManager(),
		ready:    results.NewManager(),
		start:    results.NewManager(),
		logs:     &testlog.Buffer{},
		restarts: make(chan simulator.Restart, 100),
	}
	logger := slog.New(slog.NewJSONHandler(e.logs, nil))
	e.st = store.New(store.Options{Clock: e.clk, Logger: logger, PodIP: "127.0.0.1"})
	// The store is tested with manifest mode's other rooms: the container
	// simulator behind the liveness/startup actuator, fed by the fan-out.
	e.events = events.New(1000, logger, e.clk)
	sim := simulator.New(simulator.Options{Store: e.st, Clock: e.clk, Logger: logger, Recorder: e.events,
		Notify: func(r simulator.Restart) { e.restarts <- r }})
	e.sim = sim
	fanout := verdicts.New(e.live, e.ready, e.start, e.st, actuate.OnFailure(e.st.Pod, sim))
	mgr, err := manager.New(manager.Options{
		Status:       e.st,
		Liveness:     e.live,
		Readiness:    e.ready,
		Startup:      e.start,
		Clock:        e.clk,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		PoolSize:     16,
		ExecPoolSize: 2,
		Shards:       1,
	})
	if err != nil {
		t.Fatal(err)
	}
	e.mgr = mgr
	e.st.SetProber(mgr)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		fanout.Run(ctx)
	}()
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		// The store keeps draining updates until the manager is closed (R4).
		if err := mgr.Close(cctx); err != nil {
			t.Errorf("manager Close: %v", err)
		}
		cancel()
		<-done
		sim.Close()
	})
	return e
}

// add registers the pod with the manager, then puts it into the store (the
// agent's order).
func (e *env) add(pod *v1.Pod) {
	e.t.Helper()
	e.mgr.AddPod(context.Background(), pod)
	e.st.Put(pod)
}

// step moves the fake clock.
func (e *env) step(d time.Duration) { e.clk.Step(d) }

// eventually polls cond in real time for up to 5 s.
func (e *env) eventually(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// stepUntil steps the fake clock by one period plus a tick, waiting up to
// 300 ms of real time after each step, until cond holds (for up to 5 s).
func (e *env) stepUntil(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out waiting for %s", what)
		}
		e.step(time.Second + 10*time.Millisecond)
		// Let the runs the step caused finish before stepping again: a
		// step while a run is in flight passes its 1 s timeout on the
		// fake clock (a false Failure; a loaded CI machine took over the
		// 300 ms this once waited). Then let the store apply their
		// results.
		for !manager.Idle(e.mgr) {
			if time.Now().After(deadline) {
				e.t.Fatalf("timed out waiting for %s: the manager's runs never finished", what)
			}
			time.Sleep(time.Millisecond)
		}
		settle := time.Now().Add(300 * time.Millisecond)
		for !cond() && time.Now().Before(settle) {
			time.Sleep(2 * time.Millisecond)
		}
	}
}

func (e *env) status(uid types.UID) v1.PodStatus {
	e.t.Helper()
	st, ok := e.st.GetPodStatus(uid)
	if !ok {
		e.t.Fatalf("no status for pod %s", uid)
	}
	return st
}

func (e *env) container(uid types.UID, name string) v1.ContainerStatus {
	e.t.Helper()
	st := e.status(uid)
	for _, list := range [][]v1.ContainerStatus{st.ContainerStatuses, st.InitContainerStatuses} {
		for _, cs := range list {
			if cs.Name == name {
				return cs
			}
		}
	}
	e.t.Fatalf("pod %s has no status for container %s", uid, name)
	return v1.ContainerStatus{}
}

func (e *env) isReady(uid types.UID, name string) bool {
	return e.container(uid, name).Ready
}

func (e *env) expectRestart() simulator.Restart {
	e.t.Helper()
	select {
	case r := <-e.restarts:
		return r
	case <-time.After(5 * time.Second):
		e.t.Fatal("no restart")
	}
	return simulator.Restart{}
}

func (e *env) expectNoRestart() {
	e.t.Helper()
	select {
	case r := <-e.restarts:
		e.t.Fatalf("unexpected restart: %+v", r)
	default:
	}
}

// barrier makes sure the store has applied every update sent so far on rm's
// channel: it sends a Failure for a throw-away pod's container and waits for
// that pod's restart (updates of one channel are applied in order).
func (e *env) barrier(rm results.Manager) {
	e.t.Helper()
	uid := types.UID("barrier-" + strconv.FormatInt(time.Now().UnixNano(), 36))
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: string(uid), Namespace: "barrier", UID: uid},
		Spec: v1.PodSpec{RestartPolicy: v1.RestartPolicyAlways,
			Containers: []v1.Container{{Name: "b", Image: "b"}}},
	}
	e.st.Put(pod) // not added to the manager: no worker touches it
	id := e.container(uid, "b").ContainerID
	rm.Set(results.ParseContainerID(id), results.Failure, pod)
	for {
		r := e.expectRestart()
		if r.Pod.UID == uid {
			break
		}
		e.t.Fatalf("unexpected restart before the barrier: %+v", r)
	}
	e.st.Delete(uid)
}

func ptr[T any](v T) *T { return &v }

func cond(st v1.PodStatus, t v1.PodConditionType) *v1.PodCondition {
	for i := range st.Conditions {
		if st.Conditions[i].Type == t {
			return &st.Conditions[i]
		}
	}
	return nil
}
