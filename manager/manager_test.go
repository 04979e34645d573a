package manager

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/probed/probed/manager/results"
	"github.com/probed/probed/runtime"
)

func named(name string, c v1.Container) v1.Container {
	c.Name = name
	return c
}

func podWith(uid types.UID, containers ...v1.Container) *v1.Pod {
	p := testPod(containers...)
	p.UID = uid
	p.Name = string(uid)
	return p
}

func (e *testEnv) expectWorkers(want ...probeKey) {
	e.t.Helper()
	e.m.mu.RLock()
	defer e.m.mu.RUnlock()
	if e.m.workers.len() != len(want) {
		e.t.Fatalf("workers = %d (%v), want %d (%v)", e.m.workers.len(), keysOf(&e.m.workers), len(want), want)
	}
	for _, k := range want {
		if _, ok := e.m.workers.get(k); !ok {
			e.t.Fatalf("missing worker %v; have %v", k, keysOf(&e.m.workers))
		}
	}
}

func keysOf(s *workerSet) []probeKey {
	var out []probeKey
	s.each(func(w *worker) { out = append(out, w.key()) })
	return out
}

// PM1 TestAddRemovePods (spec §8.1, M1, M2, M4, M6).
func TestPM1_AddRemovePods(t *testing.T) {
	e := newTestEnv(t)
	noProbePod := podWith("no_probe_pod", v1.Container{Name: "no_probe1"}, v1.Container{Name: "no_probe2"})
	probePod := podWith("probe_pod",
		v1.Container{Name: "no_probe1"},
		named("readiness", probeOf(runtime.Readiness, execProbe())),
		v1.Container{Name: "no_probe2"},
		named("liveness", probeOf(runtime.Liveness, execProbe())),
		v1.Container{Name: "no_probe3"},
		named("startup", probeOf(runtime.Startup, execProbe())),
	)
	ctx := context.Background()
	e.m.AddPod(ctx, noProbePod)
	e.expectWorkers()

	e.m.AddPod(ctx, probePod)
	want := []probeKey{
		{"probe_pod", "readiness", runtime.Readiness},
		{"probe_pod", "liveness", runtime.Liveness},
		{"probe_pod", "startup", runtime.Startup},
	}
	e.expectWorkers(want...)
	// Idempotent (called on every pod sync).
	e.m.AddPod(ctx, probePod)
	e.expectWorkers(want...)

	e.m.RemovePod(noProbePod)
	e.expectWorkers(want...)

	e.m.RemovePod(probePod)
	e.waitWorkerCount(0)
	e.m.RemovePod(probePod) // no-op
	e.waitWorkerCount(0)
}

// PM2 TestAddPodContinuesAfterExistingWorker (v1.37+, PR #138930).
func TestPM2_AddPodContinuesAfterExistingWorker(t *testing.T) {
	e := newTestEnv(t)
	pod := podWith("pod",
		named("A", probeOf(runtime.Readiness, execProbe())),
		named("B", probeOf(runtime.Readiness, execProbe())),
	)
	e.m.AddPod(context.Background(), pod)
	e.worker("pod", "B", runtime.Readiness).stop()
	e.waitGone("pod", "B", runtime.Readiness)
	e.m.AddPod(context.Background(), pod)
	e.expectWorkers(probeKey{"pod", "A", runtime.Readiness}, probeKey{"pod", "B", runtime.Readiness})
}

// M2: the duplicate branch continues with the next container, so a missing
// liveness worker behind an existing startup worker of the same container is
// not recreated in that call (spec M2 note).
func TestM2_ContinueSkipsRestOfContainer(t *testing.T) {
	e := newTestEnv(t)
	c := v1.Container{Name: "c", StartupProbe: execProbe(), LivenessProbe: execProbe()}
	pod := podWith("pod", c)
	e.m.AddPod(context.Background(), pod)
	e.worker("pod", "c", runtime.Liveness).stop()
	e.waitGone("pod", "c", runtime.Liveness)
	e.m.AddPod(context.Background(), pod)
	e.expectWorkers(probeKey{"pod", "c", runtime.Startup})
}

func restartableInit(name string) v1.Container {
	always := v1.ContainerRestartPolicyAlways
	return v1.Container{
		Name:           name,
		RestartPolicy:  &always,
		ReadinessProbe: execProbe(),
		LivenessProbe:  execProbe(),
		StartupProbe:   execProbe(),
	}
}

// PM3 TestAddRemovePodsWithRestartableInitContainer (spec §8.1, M1).
func TestPM3_AddRemovePodsWithRestartableInitContainer(t *testing.T) {
	for _, restartable := range []bool{true, false} {
		t.Run(fmt.Sprint("restartable=", restartable), func(t *testing.T) {
			e := newTestEnv(t)
			init := restartableInit("restartable-init")
			if !restartable {
				init.RestartPolicy = nil
			}
			pod := podWith("pod")
			pod.Spec.InitContainers = []v1.Container{init}
			e.m.AddPod(context.Background(), pod)
			if restartable {
				e.expectWorkers(
					probeKey{"pod", "restartable-init", runtime.Readiness},
					probeKey{"pod", "restartable-init", runtime.Liveness},
					probeKey{"pod", "restartable-init", runtime.Startup},
				)
			} else {
				e.expectWorkers()
			}
			e.m.RemovePod(pod)
			e.waitWorkerCount(0)
			e.m.RemovePod(pod)
			e.waitWorkerCount(0)
		})
	}
}

func threeProbePod(uid types.UID) *v1.Pod {
	return podWith(uid,
		named("readiness", probeOf(runtime.Readiness, execProbe())),
		named("liveness", probeOf(runtime.Liveness, execProbe())),
		named("startup", probeOf(runtime.Startup, execProbe())),
	)
}

// PM4 TestCleanupPods (spec §8.1, M5).
func TestPM4_CleanupPods(t *testing.T) {
	e := newTestEnv(t)
	e.m.AddPod(context.Background(), threeProbePod("cleanup"))
	e.m.AddPod(context.Background(), threeProbePod("keep"))
	e.m.CleanupPods(map[types.UID]sets.Empty{"keep": {}})
	e.waitWorkerCount(3)
	e.expectWorkers(
		probeKey{"keep", "readiness", runtime.Readiness},
		probeKey{"keep", "liveness", runtime.Liveness},
		probeKey{"keep", "startup", runtime.Startup},
	)
}

// PM5 TestCleanupRepeated (spec §8.1): stop is idempotent; no deadlock.
func TestPM5_CleanupRepeated(t *testing.T) {
	e := newTestEnv(t)
	for i := 0; i < 100; i++ {
		e.m.AddPod(context.Background(), threeProbePod(types.UID(fmt.Sprint("pod", i))))
	}
	e.waitWorkerCount(300)
	for i := 0; i < 10; i++ {
		e.m.CleanupPods(map[types.UID]sets.Empty{})
	}
	e.waitWorkerCount(0)
}

// M3: StopLivenessAndStartup stops liveness and startup workers, of
// sidecars too (v1.38), and keeps readiness running.
func TestM3_StopLivenessAndStartup(t *testing.T) {
	e := newTestEnv(t)
	pod := threeProbePod("pod")
	pod.Spec.InitContainers = []v1.Container{restartableInit("sidecar")}
	e.m.AddPod(context.Background(), pod)
	e.m.StopLivenessAndStartup(pod)
	e.waitWorkerCount(2)
	e.expectWorkers(probeKey{"pod", "readiness", runtime.Readiness}, probeKey{"pod", "sidecar", runtime.Readiness})
}

// PM6 TestUpdatePodStatus (spec §8.1, M7, M8): Ready and Started from the
// results caches and the existence of workers.
func TestPM6_UpdatePodStatus(t *testing.T) {
	e := newTestEnv(t)
	running := v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(e.clk.Now())}}
	terminated := v1.ContainerState{Terminated: &v1.ContainerStateTerminated{StartedAt: metav1.NewTime(e.clk.Now())}}
	cs := func(name string, state v1.ContainerState) v1.ContainerStatus {
		return v1.ContainerStatus{Name: name, ContainerID: "test://" + name + "_id", State: state}
	}
	unprobed := cs("unprobed_container", running)
	probedReady := cs("probed_container_ready", running)
	probedPending := cs("probed_container_pending", running)
	probedUnready := cs("probed_container_unready", running)
	notStarted := cs("not_started_container", running)
	startedNoReadiness := cs("started_container_no_readiness", running)
	terminatedC := cs("terminated_container", terminated)
	podStatus := v1.PodStatus{
		Phase: v1.PodRunning,
		ContainerStatuses: []v1.ContainerStatus{
			unprobed, probedReady, probedPending, probedUnready, notStarted, startedNoReadiness, terminatedC,
		},
	}
	pod := podWith(testPodUID,
		named(unprobed.Name, probeOf(runtime.Liveness, execProbe())),
		named(probedReady.Name, probeOf(runtime.Readiness, execProbe())),
		named(probedPending.Name, probeOf(runtime.Readiness, execProbe())),
		named(probedUnready.Name, probeOf(runtime.Readiness, execProbe())),
		named(notStarted.Name, probeOf(runtime.Startup, execProbe())),
		named(startedNoReadiness.Name, probeOf(runtime.Startup, execProbe())),
		named(terminatedC.Name, probeOf(runtime.Readiness, execProbe())),
	)
	pod.Status = podStatus
	// The status provider has no entry: the workers never probe, the test
	// drives the caches itself.
	e.m.AddPod(context.Background(), pod)
	pod2 := pod
	e.ready.Set(results.ParseContainerID(probedReady.ContainerID), results.Success, pod2)
	e.ready.Set(results.ParseContainerID(probedUnready.ContainerID), results.Failure, pod2)
	e.start.Set(results.ParseContainerID(startedNoReadiness.ContainerID), results.Success, pod2)
	e.ready.Set(results.ParseContainerID(terminatedC.ContainerID), results.Success, pod2)

	e.m.UpdatePodStatus(context.Background(), pod, &podStatus)
	want := map[string]struct{ ready, started bool }{
		unprobed.Name:           {true, true},
		probedReady.Name:        {true, true},
		probedPending.Name:      {false, true},
		probedUnready.Name:      {false, true},
		notStarted.Name:         {false, false},
		startedNoReadiness.Name: {true, true},
		terminatedC.Name:        {false, false},
	}
	for _, c := range podStatus.ContainerStatuses {
		w := want[c.Name]
		if c.Ready != w.ready {
			t.Errorf("%s Ready = %v, want %v", c.Name, c.Ready, w.ready)
		}
		if c.Started == nil || *c.Started != w.started {
			t.Errorf("%s Started = %v, want %v", c.Name, c.Started, w.started)
		}
	}
}

// PM7 TestUpdatePodStatusWithInitContainers (spec §8.1, M7 f–i).
func TestPM7_UpdatePodStatusWithInitContainers(t *testing.T) {
	for _, restartable := range []bool{false, true} {
		t.Run(fmt.Sprint("restartable=", restartable), func(t *testing.T) {
			e := newTestEnv(t)
			now := metav1.NewTime(e.clk.Now())
			running := v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: now}}
			terminated := v1.ContainerState{Terminated: &v1.ContainerStateTerminated{StartedAt: now, ExitCode: 0}}
			mk := func(name string) v1.Container {
				c := v1.Container{Name: name, StartupProbe: execProbe()}
				if restartable {
					always := v1.ContainerRestartPolicyAlways
					c.RestartPolicy = &always
				}
				return c
			}
			pod := podWith(testPodUID)
			pod.Spec.InitContainers = []v1.Container{mk("not_started"), mk("started"), mk("terminated")}
			status := v1.PodStatus{InitContainerStatuses: []v1.ContainerStatus{
				{Name: "not_started", ContainerID: "test://a", State: running},
				{Name: "started", ContainerID: "test://b", State: running},
				{Name: "terminated", ContainerID: "test://c", State: terminated},
			}}
			e.m.AddPod(context.Background(), pod)
			if !restartable {
				// Regular init containers get no workers (M1); the upstream
				// test plants a startup worker for the first one.
				key := probeKey{testPodUID, "not_started", runtime.Startup}
				e.m.mu.Lock()
				planted := &worker{rs: runtime.Spec{ProbeType: runtime.Startup, Pod: pod, Container: &pod.Spec.InitContainers[0]}}
				e.m.workers.put(key, planted)
				e.m.mu.Unlock()
				defer e.m.removeWorker(key)
			}
			e.start.Set(results.ParseContainerID("test://b"), results.Success, pod)
			e.m.UpdatePodStatus(context.Background(), pod, &status)
			wantStarted := []bool{false, true, false}
			wantReady := []bool{false, false, true}
			if restartable {
				wantReady = []bool{false, true, false}
			}
			for i, c := range status.InitContainerStatuses {
				if c.Started == nil || *c.Started != wantStarted[i] {
					t.Errorf("%s Started = %v, want %v", c.Name, c.Started, wantStarted[i])
				}
				if c.Ready != wantReady[i] {
					t.Errorf("%s Ready = %v, want %v", c.Name, c.Ready, wantReady[i])
				}
			}
		})
	}
}

// PM8 TestUpdateReadiness (spec §8.1): a real readiness worker with the
// fake exec; a goroutine copies readiness updates into the status as the
// sync loop does; the clock ticks the worker.
func TestPM8_UpdateReadiness(t *testing.T) {
	e := newTestEnv(t)
	pod := testPod(probeOf(runtime.Readiness, execProbe()))
	e.status.set(testPodUID, runningStatus(e.clk.Now(), true))
	e.m.AddPod(context.Background(), pod)

	isReady := func() bool {
		st, _ := e.status.GetPodStatus(testPodUID)
		e.m.UpdatePodStatus(context.Background(), pod, &st)
		return st.ContainerStatuses[0].Ready
	}
	waitReady := func(want bool) {
		t.Helper()
		for i := 0; i < 10; i++ {
			e.step(time.Second + 10*time.Millisecond)
			if isReady() == want {
				return
			}
		}
		t.Fatalf("Ready never became %v", want)
	}
	waitReady(true)
	e.exec.set(runtime.Failure)
	waitReady(false)
}

// M7c: a started container whose readiness result is missing or Failure
// triggers a readiness run now (the manual-trigger path), without waiting
// for its period. (Within one period of the manager's start a worker's
// first run waits for its spread phase instead, as the kubelet's start
// jitter does, W3; BR-24 in test/cases covers that.)
func TestM7c_UpdatePodStatusTriggersReadiness(t *testing.T) {
	e := newTestEnv(t)
	p := execProbe()
	p.PeriodSeconds = 3600
	e.step(3601 * time.Second) // the manager runs for longer than the period
	pod := testPod(probeOf(runtime.Readiness, p))
	e.status.set(testPodUID, runningStatus(e.clk.Now(), true))
	e.m.AddPod(context.Background(), pod)
	st, _ := e.status.GetPodStatus(testPodUID)
	e.m.UpdatePodStatus(context.Background(), pod, &st)
	if st.ContainerStatuses[0].Ready {
		t.Fatal("Ready before any readiness result")
	}
	e.idle() // no clock step: only the trigger can have run the probe
	if calls := e.exec.calls.Load(); calls != 1 {
		t.Fatalf("probe calls after UpdatePodStatus = %d, want 1 (manual trigger)", calls)
	}
	e.expectCached(runtime.Readiness, results.Success)
	st, _ = e.status.GetPodStatus(testPodUID)
	e.m.UpdatePodStatus(context.Background(), pod, &st)
	if !st.ContainerStatuses[0].Ready {
		t.Fatal("not Ready after the triggered success")
	}
	e.idle()
	if calls := e.exec.calls.Load(); calls != 1 {
		t.Fatalf("a Ready container was triggered again: %d calls", calls)
	}
}

// M9: after an agent restart, a container that was Ready stays Ready until
// its first real readiness result, when the pod's Ready condition was True;
// otherwise it is not ready.
func TestM9_ReadinessPreservedAcrossRestart(t *testing.T) {
	for _, condTrue := range []bool{true, false} {
		t.Run(fmt.Sprint("podReady=", condTrue), func(t *testing.T) {
			e := newTestEnv(t)
			p := execProbe()
			p.PeriodSeconds = 3600
			pod := testPod(probeOf(runtime.Readiness, p))
			cond := v1.ConditionFalse
			if condTrue {
				cond = v1.ConditionTrue
			}
			pod.Status.Conditions = []v1.PodCondition{{Type: v1.PodReady, Status: cond}}
			// Started 1 h before the manager: a container surviving a restart.
			st := runningStatus(e.clk.Now().Add(-time.Hour), true)
			e.exec.setErr(errFake) // keep the cache empty: every run errors
			e.status.set(testPodUID, st)
			e.m.AddPod(context.Background(), pod)
			e.m.UpdatePodStatus(context.Background(), pod, &st)
			if got := st.ContainerStatuses[0].Ready; got != condTrue {
				t.Fatalf("Ready = %v, want %v", got, condTrue)
			}
			// W6c: no initial value is written for a restart.
			e.idle()
			e.expectNoCached(runtime.Readiness)
		})
	}
}

// W6c with Options.AnyRunningSurvives (cluster mode): a container that
// started 3 s before the manager (inside the kubelet's 10 s window) gets no
// initial readiness value, so a readiness gate written by the previous agent
// is kept until the first real result; with the kubelet's window it gets
// the initial Failure (the flip TestNodeProbedRestartNeverFlipsReady saw on
// a real kubelet). A container started after the manager is new either way.
func TestW6c_AnyRunningSurvives(t *testing.T) {
	for _, tc := range []struct {
		any       bool
		startedAt time.Duration // relative to the manager's start
		initial   bool          // an initial Failure is cached
	}{
		{false, -3 * time.Second, true},
		{true, -3 * time.Second, false},
		{false, -time.Hour, false},
		{true, -time.Hour, false},
		{true, time.Second, true},
	} {
		t.Run(fmt.Sprintf("any=%v,startedAt=%v", tc.any, tc.startedAt), func(t *testing.T) {
			e := newTestEnv(t, func(o *Options) { o.AnyRunningSurvives = tc.any })
			pod := testPod(probeOf(runtime.Readiness, execProbe()))
			e.exec.setErr(errFake) // every run errors: only the initial value can be cached
			e.status.set(testPodUID, runningStatus(fakeNow.Add(tc.startedAt), true))
			e.m.AddPod(context.Background(), pod)
			e.step(2 * time.Second)
			if tc.initial {
				e.expectCached(runtime.Readiness, results.Failure)
			} else {
				e.expectNoCached(runtime.Readiness)
			}
		})
	}
}

// M9 applies only while a container has no readiness result yet: a pod
// whose Ready condition was False when the agent (re)started, with
// containers started well before it (here 1 h, past the 10 s window), becomes
// Ready once the readiness probes succeed. The loop plays the kubelet's
// status manager: each round publishes the pod's Ready condition computed
// from the containers' Ready (all ready ⇒ True), so the deadlock
// (Ready=False keeps every container not-ready, which keeps Ready=False)
// shows as a fixed point that never reaches Ready.
func TestM9_ReadinessResultEndsPreservation(t *testing.T) {
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprint("containers=", n), func(t *testing.T) {
			e := newTestEnv(t)
			pod := testPod()
			var st v1.PodStatus
			st.Phase, st.PodIP = v1.PodRunning, "127.0.0.1"
			started := true
			for i := range n {
				name := fmt.Sprintf("c%d", i)
				pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Name: name, ReadinessProbe: execProbe()})
				st.ContainerStatuses = append(st.ContainerStatuses, v1.ContainerStatus{
					Name:        name,
					ContainerID: "test://" + name,
					State:       v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(fakeNow.Add(-time.Hour))}},
					Started:     &started,
				})
			}
			// Restored from the agent's state: the pod was not ready.
			pod.Status.Conditions = []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionFalse}}
			e.status.set(testPodUID, st)
			e.m.AddPod(context.Background(), pod)

			generate := func() v1.PodStatus {
				t.Helper()
				got, _ := e.status.GetPodStatus(testPodUID)
				e.m.UpdatePodStatus(context.Background(), pod, &got)
				allReady := v1.ConditionTrue
				for _, c := range got.ContainerStatuses {
					if !c.Ready {
						allReady = v1.ConditionFalse
					}
				}
				pod.Status.Conditions = []v1.PodCondition{{Type: v1.PodReady, Status: allReady}}
				return got
			}
			// Before any result: preserved as not ready (the pod was not ready).
			for i, c := range generate().ContainerStatuses {
				if c.Ready {
					t.Fatalf("container %d Ready before any readiness result with pod Ready=False", i)
				}
			}
			// One period plus a tick: every readiness probe runs and succeeds.
			e.step(2 * time.Second)
			for i := range n {
				id := results.ContainerID{Type: "test", ID: fmt.Sprintf("c%d", i)}
				if r, ok := e.ready.Get(id); !ok || r != results.Success {
					t.Fatalf("container %d readiness result = %v (found %v), want Success", i, r, ok)
				}
			}
			for round := range 3 {
				got := generate()
				for i, c := range got.ContainerStatuses {
					if !c.Ready {
						t.Fatalf("round %d: container %d not Ready after its readiness successes (M9 applied past the first result)", round, i)
					}
				}
				if pod.Status.Conditions[0].Status != v1.ConditionTrue {
					t.Fatalf("round %d: pod Ready = %v, want True", round, pod.Status.Conditions[0].Status)
				}
			}
		})
	}
}

// Close: no goroutine outlives it (goleak in TestMain), later calls no-op.
func TestCloseReleasesEverything(t *testing.T) {
	status := newFakeStatus()
	m, err := New(Options{Status: status, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	pod := testPod(probeOf(runtime.Liveness, &v1.Probe{
		ProbeHandler:  v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstrInt(1)}},
		PeriodSeconds: 1, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3,
	}))
	status.set(testPodUID, runningStatus(time.Now(), true))
	m.AddPod(context.Background(), pod)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	m.AddPod(context.Background(), pod) // no-op after Close
	if n := m.(*manager).workerCount(); n != 0 {
		t.Fatalf("workers after Close = %d", n)
	}
}

func intstrInt(p int) intstr.IntOrString { return intstr.FromInt32(int32(p)) }

func TestNewRequiresStatus(t *testing.T) {
	if _, err := New(Options{}); err == nil {
		t.Fatal("New without Status succeeded")
	}
}

// Drain (issue #5, SIGTERM): no new run starts, the run in flight finishes
// and its result is applied; Close instead cancels it (errored, discarded).
func TestDrainLetsInFlightProbesFinish(t *testing.T) {
	for _, drain := range []bool{true, false} {
		t.Run(fmt.Sprint("drain=", drain), func(t *testing.T) {
			e := newTestEnv(t)
			gate := make(chan struct{})
			e.exec.gate.Store(&gate)
			e.status.set(testPodUID, runningStatus(fakeNow, true))
			e.m.AddPod(context.Background(), testPod(probeOf(runtime.Readiness, execProbe())))
			e.m.sched.Trigger(e.worker(testPodUID, testContainerName, runtime.Readiness).id)
			deadline := time.Now().Add(10 * time.Second)
			for e.exec.calls.Load() == 0 {
				if time.Now().After(deadline) {
					t.Fatal("probe never started")
				}
				time.Sleep(time.Millisecond)
			}
			done := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if drain {
					done <- Drain(ctx, e.m)
				} else {
					done <- e.m.Close(ctx)
				}
			}()
			if drain {
				select {
				case err := <-done:
					t.Fatalf("Drain returned (%v) while a probe was in flight", err)
				case <-time.After(50 * time.Millisecond):
				}
				e.m.AddPod(context.Background(), podWith("late", probeOf(runtime.Liveness, execProbe())))
				close(gate)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			r, ok := e.ready.Get(testContainerIDParsed)
			if drain && (!ok || r != results.Success) {
				t.Fatalf("after Drain the in-flight result = %v (found %v), want Success applied", r, ok)
			}
			if !drain && ok && r == results.Success {
				t.Fatal("Close let the in-flight probe succeed; it must be cancelled")
			}
			if calls := e.exec.calls.Load(); calls != 1 {
				t.Fatalf("probe calls = %d, want 1: nothing starts after Drain/Close", calls)
			}
			if !drain {
				close(gate)
			}
		})
	}
}

// Issue #6: with NoPerPodLabels the prober metrics keep their names and
// label names but aggregate over pods: one series per probe type and
// result, shared by every worker, left in place when pods go.
func TestNoPerPodLabelsAggregates(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := newTestEnv(t, func(o *Options) { o.MetricsRegisterer = reg; o.NoPerPodLabels = true })
	for _, uid := range []types.UID{"a", "b", "c"} {
		st := runningStatus(fakeNow, true)
		e.status.set(uid, st)
		p := podWith(uid, probeOf(runtime.Readiness, execProbe()))
		p.Spec.Containers[0].Name = testContainerName
		e.m.AddPod(context.Background(), p)
		e.runOnce(e.worker(uid, testContainerName, runtime.Readiness))
	}
	count := func() (series int, total float64) {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != MetricProbeTotal {
				continue
			}
			for _, m := range mf.GetMetric() {
				series++
				total += m.GetCounter().GetValue()
				for _, l := range m.GetLabel() {
					switch l.GetName() {
					case "container", "pod", "namespace", "pod_uid":
						if l.GetValue() != "" {
							t.Fatalf("label %s=%q, want empty", l.GetName(), l.GetValue())
						}
					}
				}
			}
		}
		return
	}
	if s, n := count(); s != 1 || n != 3 {
		t.Fatalf("prober_probe_total: %d series, total %v; want 1 series counting 3 runs", s, n)
	}
	e.m.CleanupPods(nil)
	e.waitWorkerCount(0)
	if s, n := count(); s != 1 || n != 3 {
		t.Fatalf("after the pods went: %d series, total %v; want the aggregated series kept", s, n)
	}
}

// A scrape of /metrics/probes reads every worker's series while the
// workers' first runs create them (X1, X2): under -race this test failed
// before the series pointer was made atomic (the agent's e2e SIGTERM test
// found it when a scrape met a pod's first probe).
func TestScrapeDuringFirstRuns(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := newTestEnv(t, func(o *Options) { o.MetricsRegisterer = reg })
	stop := make(chan struct{})
	scraped := make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				scraped <- n
				return
			default:
			}
			if _, err := reg.Gather(); err != nil {
				t.Error(err)
			}
			n++
		}
	}()
	const pods = 50
	for i := range pods {
		uid := types.UID(fmt.Sprintf("pod-%d", i))
		e.status.set(uid, runningStatus(fakeNow, true))
		p := podWith(uid, probeOf(runtime.Readiness, execProbe()))
		p.Spec.Containers[0].Name = testContainerName
		e.m.AddPod(context.Background(), p)
		e.runOnce(e.worker(uid, testContainerName, runtime.Readiness))
	}
	close(stop)
	if n := <-scraped; n == 0 {
		t.Fatal("the scraper never ran")
	}
	var total float64
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == MetricProbeTotal {
			for _, m := range mf.GetMetric() {
				total += m.GetCounter().GetValue()
			}
		}
	}
	if total != pods {
		t.Fatalf("prober_probe_total sums to %v, want %d (one run per pod)", total, pods)
	}
}
