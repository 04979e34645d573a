package manager

import (
	"context"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/probed/probed/manager/results"
	"github.com/probed/probed/runtime"
)

var allTypes = []runtime.ProbeType{runtime.Liveness, runtime.Readiness, runtime.Startup}

// newWorkerEnv sets up one worker of type pt on the fixtures' pod with the
// given probe, the status given, and returns it without running it.
func newWorkerEnv(t *testing.T, pt runtime.ProbeType, p *v1.Probe, pod *v1.Pod, status *v1.PodStatus) (*testEnv, *worker) {
	t.Helper()
	e := newTestEnv(t)
	if pod == nil {
		pod = testPod(probeOf(pt, p))
	}
	if status != nil {
		e.status.set(pod.UID, *status)
	}
	e.m.AddPod(context.Background(), pod)
	return e, e.worker(pod.UID, testContainerName, pt)
}

func (e *testEnv) lastUpdate(pt runtime.ProbeType) (results.Update, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	u := e.updates[pt]
	if len(u) == 0 {
		return results.Update{}, false
	}
	return u[len(u)-1], true
}

func (e *testEnv) waitUpdate(pt runtime.ProbeType, want results.Result) {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if u, ok := e.lastUpdate(pt); ok && u.Result == want && u.ContainerID == testContainerIDParsed {
			return
		}
		if time.Now().After(deadline) {
			u, _ := e.lastUpdate(pt)
			e.t.Fatalf("last %v update = %+v, want %v", pt, u, want)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func (e *testEnv) exists(pt runtime.ProbeType) bool {
	_, ok := e.m.getWorker(testPodUID, testContainerName, pt)
	return ok
}

// WK1 TestDoProbe (spec §8.2, W5 steps in order).
func TestWK1_DoProbe(t *testing.T) {
	for _, pt := range allTypes {
		t.Run(pt.String(), func(t *testing.T) {
			now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			running := func() v1.PodStatus { return runningStatus(now, pt != runtime.Startup) }

			t.Run("no pod status", func(t *testing.T) {
				e, w := newWorkerEnv(t, pt, execProbe(), nil, nil)
				e.runOnce(w)
				if !e.exists(pt) {
					t.Fatal("worker stopped, want continue")
				}
				e.expectNoCached(pt)
			})
			t.Run("pod failed", func(t *testing.T) {
				st := running()
				st.Phase = v1.PodFailed
				e, w := newWorkerEnv(t, pt, execProbe(), nil, &st)
				e.runOnce(w)
				e.waitGone(testPodUID, testContainerName, pt)
				e.expectNoCached(pt)
				if _, ok := e.lastUpdate(pt); ok {
					t.Fatal("a result was written")
				}
			})
			t.Run("pod deleting", func(t *testing.T) {
				pod := testPod(probeOf(pt, execProbe()))
				ts := metav1.NewTime(now)
				pod.DeletionTimestamp = &ts
				st := running()
				e, w := newWorkerEnv(t, pt, execProbe(), pod, &st)
				e.runOnce(w)
				if pt == runtime.Readiness {
					if !e.exists(pt) {
						t.Fatal("readiness worker stopped on deletion (W9 is liveness/startup only)")
					}
					e.expectCached(pt, results.Success)
					if e.exec.calls.Load() != 1 {
						t.Fatal("readiness did not probe")
					}
					return
				}
				e.waitGone(testPodUID, testContainerName, pt)
				e.waitUpdate(pt, results.Success) // forced Success, then removed (W4)
				e.expectNoCached(pt)
				if e.exec.calls.Load() != 0 {
					t.Fatal("probed although the pod is being deleted")
				}
			})
			t.Run("container missing", func(t *testing.T) {
				st := running()
				st.ContainerStatuses[0].Name = "other"
				e, w := newWorkerEnv(t, pt, execProbe(), nil, &st)
				e.runOnce(w)
				if !e.exists(pt) {
					t.Fatal("stopped")
				}
				e.expectNoCached(pt)
			})
			t.Run("container waiting", func(t *testing.T) {
				st := running()
				st.ContainerStatuses[0].State = v1.ContainerState{Waiting: &v1.ContainerStateWaiting{}}
				e, w := newWorkerEnv(t, pt, execProbe(), nil, &st)
				e.runOnce(w)
				if !e.exists(pt) {
					t.Fatal("stopped")
				}
				e.expectCached(pt, results.Failure)
			})
			t.Run("container terminated, restartPolicy Never", func(t *testing.T) {
				st := running()
				st.ContainerStatuses[0].State = v1.ContainerState{Terminated: &v1.ContainerStateTerminated{StartedAt: metav1.NewTime(now)}}
				e, w := newWorkerEnv(t, pt, execProbe(), nil, &st)
				e.runOnce(w)
				e.waitGone(testPodUID, testContainerName, pt)
				e.waitUpdate(pt, results.Failure)
			})
			t.Run("probe success", func(t *testing.T) {
				st := running()
				e, w := newWorkerEnv(t, pt, execProbe(), nil, &st)
				e.runOnce(w)
				if !e.exists(pt) {
					t.Fatal("stopped")
				}
				e.expectCached(pt, results.Success)
			})
			t.Run("negative initial delay", func(t *testing.T) {
				st := running()
				p := execProbe()
				p.InitialDelaySeconds = -100
				e, w := newWorkerEnv(t, pt, p, nil, &st)
				e.runOnce(w)
				e.expectCached(pt, results.Success)
			})
		})
	}
}

// WK1 (newer upstream, PR #133072): a terminated sidecar in a Never pod
// keeps its worker (container restartPolicy Always restarts it, W8b).
func TestWK1_TerminatedSidecarKeepsWorker(t *testing.T) {
	e := newTestEnv(t)
	pod := testPod()
	always := v1.ContainerRestartPolicyAlways
	sidecar := probeOf(runtime.Readiness, execProbe())
	sidecar.RestartPolicy = &always
	pod.Spec.InitContainers = []v1.Container{sidecar}
	st := v1.PodStatus{Phase: v1.PodRunning, InitContainerStatuses: []v1.ContainerStatus{{
		Name: testContainerName, ContainerID: testContainerID,
		State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 0}},
	}}}
	e.status.set(testPodUID, st)
	e.m.AddPod(context.Background(), pod)
	e.runOnce(e.worker(testPodUID, testContainerName, runtime.Readiness))
	if !e.exists(runtime.Readiness) {
		t.Fatal("terminated sidecar's worker stopped")
	}
	e.expectCached(runtime.Readiness, results.Failure)
}

// W8b (ContainerRestartRules, default on): with pod restartPolicy OnFailure
// a container that exited 0 ends the worker, one that exited 1 keeps it.
func TestW8b_OnFailureRestartRules(t *testing.T) {
	for _, code := range []int32{0, 1} {
		t.Run(fmt.Sprint("exit=", code), func(t *testing.T) {
			pod := testPod(probeOf(runtime.Liveness, execProbe()))
			pod.Spec.RestartPolicy = v1.RestartPolicyOnFailure
			st := runningStatus(fakeNow, true)
			st.ContainerStatuses[0].State = v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: code}}
			e, w := newWorkerEnv(t, runtime.Liveness, nil, pod, &st)
			e.runOnce(w)
			if code == 0 {
				e.waitGone(testPodUID, testContainerName, runtime.Liveness)
			} else if !e.exists(runtime.Liveness) {
				t.Fatal("worker of a container that will restart stopped")
			}
		})
	}
}

// WK2 TestInitialDelay (spec §8.2, W5.8).
func TestWK2_InitialDelay(t *testing.T) {
	for _, pt := range allTypes {
		t.Run(pt.String(), func(t *testing.T) {
			p := execProbe()
			p.InitialDelaySeconds = 10
			e := newTestEnv(t)
			st := runningStatus(e.clk.Now(), pt != runtime.Startup)
			e.status.set(testPodUID, st)
			e.m.AddPod(context.Background(), testPod(probeOf(pt, p)))
			w := e.worker(testPodUID, testContainerName, pt)
			e.runOnce(w)
			want := map[runtime.ProbeType]results.Result{runtime.Liveness: results.Success, runtime.Readiness: results.Failure, runtime.Startup: results.Unknown}[pt]
			e.expectCached(pt, want)
			if e.exec.calls.Load() != 0 {
				t.Fatal("probed during the initial delay")
			}
			st.ContainerStatuses[0].State.Running.StartedAt = metav1.NewTime(e.clk.Now().Add(-100 * time.Second))
			e.status.set(testPodUID, st)
			e.runOnce(w)
			e.expectCached(pt, results.Success)
		})
	}
}

// BR-11 (recommended bound): the first attempt comes right after the
// initial delay, not up to a period later; never before it.
func TestBR11_FirstProbeRightAfterInitialDelay(t *testing.T) {
	e := newTestEnv(t)
	p := execProbe()
	p.InitialDelaySeconds = 10
	p.PeriodSeconds = 300
	// The agent has run for longer than the period when the pod comes.
	e.step(301 * time.Second)
	e.status.set(testPodUID, runningStatus(e.clk.Now(), true))
	e.m.AddPod(context.Background(), testPod(probeOf(runtime.Readiness, p)))
	t0 := e.clk.Now()
	for e.exec.calls.Load() == 0 {
		if e.clk.Since(t0) > 12*time.Second {
			t.Fatalf("no attempt by t=%v", e.clk.Since(t0))
		}
		e.step(100 * time.Millisecond)
	}
	at := e.clk.Since(t0)
	if at < 10*time.Second || at > 11*time.Second {
		t.Fatalf("first attempt at t=%v, want within [10s, 11s]", at)
	}
	e.expectCached(runtime.Readiness, results.Success)
}

// BR-11 right after the agent starts: the scheduler is younger than the
// period, so first placements spread over the whole period (BR-24), but the
// wake-up at the end of the initial delay still comes within a second.
func TestBR11_FirstProbeRightAfterInitialDelayWhileSchedulerYoung(t *testing.T) {
	e := newTestEnv(t)
	p := execProbe()
	p.InitialDelaySeconds = 10
	p.PeriodSeconds = 300
	t0 := e.clk.Now()
	e.status.set(testPodUID, runningStatus(t0, true))
	e.m.AddPod(context.Background(), testPod(probeOf(runtime.Readiness, p)))
	// The first placement may come anywhere in the period: make it come
	// during the delay, as it does for a pod whose container started
	// before the agent.
	e.m.sched.Trigger(e.worker(testPodUID, testContainerName, runtime.Readiness).id)
	e.idle()
	for e.exec.calls.Load() == 0 {
		if e.clk.Since(t0) > 12*time.Second {
			t.Fatalf("no attempt by t=%v", e.clk.Since(t0))
		}
		e.step(100 * time.Millisecond)
	}
	if at := e.clk.Since(t0); at < 10*time.Second || at > 11*time.Second {
		t.Fatalf("first attempt at t=%v, want within [10s, 11s]", at)
	}
}

// W5.8: the kubelet re-reads the status at every tick during the initial
// delay, so when StartedAt moves earlier (a late or corrected status) the
// probe runs within one period, not when the delay first computed ends.
func TestW5_8_InitialDelayRecheckedEveryPeriod(t *testing.T) {
	e := newTestEnv(t)
	p := execProbe()
	p.InitialDelaySeconds = 300
	p.PeriodSeconds = 10
	st := runningStatus(e.clk.Now(), true)
	e.status.set(testPodUID, st)
	e.m.AddPod(context.Background(), testPod(probeOf(runtime.Readiness, p)))
	// Let the worker see the delay and re-arm.
	for i := 0; i < 30; i++ {
		e.step(time.Second)
	}
	if n := e.exec.calls.Load(); n != 0 {
		t.Fatalf("%d attempts during the initial delay", n)
	}
	st.ContainerStatuses[0].State.Running.StartedAt = metav1.NewTime(e.clk.Now().Add(-time.Hour))
	e.status.set(testPodUID, st)
	t0 := e.clk.Now()
	for e.exec.calls.Load() == 0 {
		if e.clk.Since(t0) > 11*time.Second {
			t.Fatalf("no attempt %v after StartedAt moved an hour earlier (period 10s)", e.clk.Since(t0))
		}
		e.step(100 * time.Millisecond)
	}
	e.expectCached(runtime.Readiness, results.Success)
}

// WK3 TestFailureThreshold (spec §8.2, W10, W11).
func TestWK3_FailureThreshold(t *testing.T) {
	p := execProbe()
	p.SuccessThreshold, p.FailureThreshold = 1, 3
	st := runningStatus(fakeNow, true)
	e, w := newWorkerEnv(t, runtime.Readiness, p, nil, &st)
	for i := 0; i < 2; i++ {
		e.exec.set(runtime.Success)
		for j := 0; j < 3; j++ {
			e.runOnce(w)
			e.expectCached(runtime.Readiness, results.Success)
		}
		e.exec.set(runtime.Failure)
		for j := 0; j < 2; j++ {
			e.runOnce(w)
			e.expectCached(runtime.Readiness, results.Success)
		}
		for j := 0; j < 3; j++ {
			e.runOnce(w)
			e.expectCached(runtime.Readiness, results.Failure)
		}
	}
}

// WK4 TestSuccessThreshold (spec §8.2, W11).
func TestWK4_SuccessThreshold(t *testing.T) {
	p := execProbe()
	p.SuccessThreshold, p.FailureThreshold = 3, 1
	st := runningStatus(fakeNow, true)
	e, w := newWorkerEnv(t, runtime.Readiness, p, nil, &st)
	for i := 0; i < 2; i++ {
		e.exec.set(runtime.Success)
		for j := 0; j < 5; j++ {
			e.runOnce(w)
			want := results.Success
			if j < 2 {
				want = results.Failure
			}
			e.expectCached(runtime.Readiness, want)
		}
		e.exec.set(runtime.Failure)
		e.runOnce(w)
		e.expectCached(runtime.Readiness, results.Failure)
	}
}

// WK5 TestStartupProbeSuccessThreshold (spec §8.2, W13: startup holds after
// its verdict).
func TestWK5_StartupProbeSuccessThreshold(t *testing.T) {
	p := execProbe()
	p.SuccessThreshold, p.FailureThreshold = 1, 3
	st := runningStatus(fakeNow, false)
	e, w := newWorkerEnv(t, runtime.Startup, p, nil, &st)
	e.runOnce(w)
	e.expectCached(runtime.Startup, results.Success)
	if !w.onHold || w.resultRun != 0 {
		t.Fatalf("onHold=%v resultRun=%d, want true 0", w.onHold, w.resultRun)
	}
	e.runOnce(w)
	if c := e.exec.calls.Load(); c != 1 {
		t.Fatalf("startup probe ran %d times; held after success it must not run again", c)
	}
}

// WK6 TestStartupProbeFailureThreshold (spec §8.2).
func TestWK6_StartupProbeFailureThreshold(t *testing.T) {
	p := execProbe()
	p.SuccessThreshold, p.FailureThreshold = 1, 3
	st := runningStatus(fakeNow, false)
	e, w := newWorkerEnv(t, runtime.Startup, p, nil, &st)
	e.exec.set(runtime.Failure)
	for i := 1; i <= 2; i++ {
		e.runOnce(w)
		e.expectCached(runtime.Startup, results.Unknown)
		if w.resultRun != int32(i) {
			t.Fatalf("resultRun = %d, want %d", w.resultRun, i)
		}
	}
	e.runOnce(w)
	e.expectCached(runtime.Startup, results.Failure)
	if !w.onHold || w.resultRun != 0 {
		t.Fatalf("onHold=%v resultRun=%d, want true 0", w.onHold, w.resultRun)
	}
}

// WK7 TestCleanUp (spec §8.2, W4, W14): stop ten times; the worker exits,
// its cached result and map entry are gone.
func TestWK7_CleanUp(t *testing.T) {
	for _, pt := range allTypes {
		t.Run(pt.String(), func(t *testing.T) {
			st := runningStatus(fakeNow, pt != runtime.Startup)
			e, w := newWorkerEnv(t, pt, execProbe(), nil, &st)
			e.runOnce(w)
			e.expectCached(pt, results.Success)
			for i := 0; i < 10; i++ {
				w.stop()
			}
			e.waitGone(testPodUID, testContainerName, pt)
			e.idle()
			e.expectNoCached(pt)
			w.stop() // after exit: still safe
		})
	}
}

// WK8 TestOnHoldOnLivenessOrStartupCheckFailure (spec §8.2, W6a, W13).
func TestWK8_OnHoldOnLivenessOrStartupCheckFailure(t *testing.T) {
	for _, pt := range []runtime.ProbeType{runtime.Liveness, runtime.Startup} {
		t.Run(pt.String(), func(t *testing.T) {
			st := runningStatus(fakeNow, pt != runtime.Startup)
			e, w := newWorkerEnv(t, pt, execProbe(), nil, &st)
			e.exec.set(runtime.Failure)
			e.runOnce(w)
			e.expectCached(pt, results.Failure)
			e.exec.set(runtime.Success)
			e.runOnce(w)
			e.expectCached(pt, results.Failure)
			// A new container ID lifts the hold.
			st.ContainerStatuses[0].ContainerID = "test://newCont_ID"
			e.status.set(testPodUID, st)
			e.runOnce(w)
			if r, _ := e.results(pt).Get(results.ContainerID{Type: "test", ID: "newCont_ID"}); r != results.Success {
				t.Fatalf("new container result = %v, want Success", r)
			}
			if pt == runtime.Liveness && w.onHold {
				t.Fatal("liveness still on hold after success")
			}
			if pt == runtime.Startup && !w.onHold {
				t.Fatal("startup not on hold after its success")
			}
			e.expectNoCached(pt) // the old container's result was removed (W6a)
		})
	}
}

// WK9 TestResultRunOnLivenessCheckFailure (spec §8.2).
func TestWK9_ResultRunOnLivenessCheckFailure(t *testing.T) {
	p := execProbe()
	p.SuccessThreshold, p.FailureThreshold = 1, 3
	st := runningStatus(fakeNow, true)
	e, w := newWorkerEnv(t, runtime.Liveness, p, nil, &st)
	steps := []struct {
		exec runtime.Result
		want results.Result
		run  int32
	}{
		{runtime.Success, results.Success, 1},
		{runtime.Failure, results.Success, 1},
		{runtime.Failure, results.Success, 2},
		{runtime.Failure, results.Failure, 0},
	}
	for i, s := range steps {
		e.exec.set(s.exec)
		e.runOnce(w)
		e.expectCached(runtime.Liveness, s.want)
		if w.resultRun != s.run {
			t.Fatalf("step %d: resultRun = %d, want %d", i, w.resultRun, s.run)
		}
	}
}

// WK10 TestResultRunOnStartupCheckFailure (spec §8.2).
func TestWK10_ResultRunOnStartupCheckFailure(t *testing.T) {
	p := execProbe()
	p.SuccessThreshold, p.FailureThreshold = 1, 3
	st := runningStatus(fakeNow, false)
	e, w := newWorkerEnv(t, runtime.Startup, p, nil, &st)
	e.exec.set(runtime.Failure)
	for i := int32(1); i <= 2; i++ {
		e.runOnce(w)
		e.expectCached(runtime.Startup, results.Unknown)
		if w.resultRun != i {
			t.Fatalf("resultRun = %d, want %d", w.resultRun, i)
		}
	}
	e.runOnce(w)
	e.expectCached(runtime.Startup, results.Failure)
	if w.resultRun != 0 {
		t.Fatalf("resultRun = %d, want 0", w.resultRun)
	}
}

// WK11 TestLivenessProbeDisabledByStarted (spec §8.2, W5.9).
func TestWK11_LivenessProbeDisabledByStarted(t *testing.T) {
	st := runningStatus(fakeNow, false)
	e, w := newWorkerEnv(t, runtime.Liveness, execProbe(), nil, &st)
	e.exec.set(runtime.Failure)
	e.runOnce(w)
	e.expectCached(runtime.Liveness, results.Success)
	if e.exec.calls.Load() != 0 {
		t.Fatal("liveness probed before the container started")
	}
	st.ContainerStatuses[0].Started = ptr(true)
	e.status.set(testPodUID, st)
	e.runOnce(w)
	e.expectCached(runtime.Liveness, results.Failure)
}

// WK12 TestStartupProbeDisabledByStarted (spec §8.2, W5.9).
func TestWK12_StartupProbeDisabledByStarted(t *testing.T) {
	p := execProbe()
	p.FailureThreshold = 2
	st := runningStatus(fakeNow, false)
	e, w := newWorkerEnv(t, runtime.Startup, p, nil, &st)
	e.exec.set(runtime.Failure)
	e.runOnce(w)
	e.expectCached(runtime.Startup, results.Unknown)
	e.exec.set(runtime.Success)
	e.runOnce(w)
	e.expectCached(runtime.Startup, results.Success)
	st.ContainerStatuses[0].Started = ptr(true)
	e.status.set(testPodUID, st)
	e.exec.set(runtime.Failure)
	before := e.exec.calls.Load()
	e.runOnce(w)
	e.expectCached(runtime.Startup, results.Success)
	if e.exec.calls.Load() != before {
		t.Fatal("startup probed after the container started")
	}
}

// W5.10, P2, BR-09: an errored probe is retried up to 3 times in the run
// and then discarded: no result change, no metric.
func TestW510_ErroredProbeDiscarded(t *testing.T) {
	p := execProbe()
	st := runningStatus(fakeNow, true)
	e, w := newWorkerEnv(t, runtime.Liveness, p, nil, &st)
	e.runOnce(w)
	e.expectCached(runtime.Liveness, results.Success)
	e.exec.setErr(errFake)
	before := e.exec.calls.Load()
	e.runOnce(w)
	if got := e.exec.calls.Load() - before; got != runtime.MaxAttempts {
		t.Fatalf("attempts = %d, want %d (P2)", got, runtime.MaxAttempts)
	}
	e.expectCached(runtime.Liveness, results.Success)
	if ws := w.series.Load(); ws == nil || ws.total[0].Load() == 0 {
		t.Fatal("the successful run was not counted")
	}
	if ws := w.series.Load(); ws.total[1].Load() != 0 || ws.total[2].Load() != 0 {
		t.Fatal("an errored probe was counted as failed (X1 counts non-errored runs only)")
	}
}

// BR-13: after a restart (new container ID) thresholds count afresh: a
// liveness probe needs failureThreshold new failures; a readiness probe with
// successThreshold 3 needs 3 successes of the new instance.
func TestBR13_ThresholdsPerContainerInstance(t *testing.T) {
	t.Run("liveness", func(t *testing.T) {
		p := execProbe()
		p.FailureThreshold = 5
		st := runningStatus(fakeNow, true)
		e, w := newWorkerEnv(t, runtime.Liveness, p, nil, &st)
		e.exec.set(runtime.Failure)
		for i := 0; i < 5; i++ {
			e.runOnce(w)
		}
		e.expectCached(runtime.Liveness, results.Failure)
		st.ContainerStatuses[0].ContainerID = "test://second"
		e.status.set(testPodUID, st)
		second := results.ContainerID{Type: "test", ID: "second"}
		for i := 0; i < 4; i++ {
			e.runOnce(w)
			if r, _ := e.live.Get(second); r != results.Success {
				t.Fatalf("instance 2 failed after %d failures, want 5", i+1)
			}
		}
		e.runOnce(w)
		if r, _ := e.live.Get(second); r != results.Failure {
			t.Fatalf("instance 2 = %v after 5 failures, want Failure", r)
		}
	})
	t.Run("readiness successThreshold", func(t *testing.T) {
		p := execProbe()
		p.SuccessThreshold = 3
		st := runningStatus(fakeNow, true)
		e, w := newWorkerEnv(t, runtime.Readiness, p, nil, &st)
		for i := 0; i < 5; i++ {
			e.runOnce(w)
		}
		e.expectCached(runtime.Readiness, results.Success)
		st.ContainerStatuses[0].ContainerID = "test://second"
		e.status.set(testPodUID, st)
		second := results.ContainerID{Type: "test", ID: "second"}
		for i := 0; i < 2; i++ {
			e.runOnce(w)
			if r, _ := e.ready.Get(second); r != results.Failure {
				t.Fatalf("restarted container Ready after %d successes, want 3", i+1)
			}
		}
		e.runOnce(w)
		if r, _ := e.ready.Get(second); r != results.Success {
			t.Fatalf("restarted container = %v after 3 successes", r)
		}
	})
}

// W9: the deletion shortcut looks at the worker's pod snapshot only; a
// later AddPod with a deleting pod object does not replace the snapshot
// (M2), so normal deletions go through StopLivenessAndStartup (M3).
func TestW9_DeletionShortcutUsesSnapshot(t *testing.T) {
	st := runningStatus(fakeNow, true)
	e, w := newWorkerEnv(t, runtime.Liveness, execProbe(), nil, &st)
	deleting := testPod(probeOf(runtime.Liveness, execProbe()))
	ts := metav1.NewTime(fakeNow)
	deleting.DeletionTimestamp = &ts
	e.m.AddPod(context.Background(), deleting)
	e.exec.set(runtime.Failure)
	e.runOnce(w)
	e.expectCached(runtime.Liveness, results.Failure)
	if !e.exists(runtime.Liveness) {
		t.Fatal("worker stopped")
	}
}

// W5 panics inside doProbe are swallowed and the worker keeps going.
func TestW5_PanicRecovered(t *testing.T) {
	e := newTestEnv(t)
	e.status.set(testPodUID, runningStatus(fakeNow, true))
	e.m.AddPod(context.Background(), testPod(probeOf(runtime.Liveness, execProbe())))
	w := e.worker(testPodUID, testContainerName, runtime.Liveness)
	e.runOnce(w)
	e.status.panics.Store(true)
	e.runOnce(w)
	e.status.panics.Store(false)
	if !e.exists(runtime.Liveness) {
		t.Fatal("worker stopped after a panic")
	}
	e.runOnce(w)
	e.expectCached(runtime.Liveness, results.Success)
}

func ptr[T any](v T) *T { return &v }

// Slow lane (DESIGN: a handful of hung targets must not delay the healthy
// ones): a network probe whose run took half its timeout or more runs in
// the slow lane next; back in the network lane once a run is fast again.
// Exec probes keep their lane.
func TestSlowLane(t *testing.T) {
	e := newTestEnv(t)
	if err := e.m.rt.Register(runtime.KindTCP, e.exec); err != nil {
		t.Fatal(err)
	}
	p := execProbe()
	p.Exec = nil
	p.TCPSocket = &v1.TCPSocketAction{Port: intstrInt(1)}
	e.status.set(testPodUID, runningStatus(fakeNow, true))
	e.m.AddPod(context.Background(), testPod(probeOf(runtime.Liveness, p)))
	w := e.worker(testPodUID, testContainerName, runtime.Liveness)
	laneOf := func() int { return int(w.lane) }
	if laneOf() != runtime.LaneNetwork {
		t.Fatalf("lane = %d, want network", laneOf())
	}
	slow := func() { e.clk.Step(600 * time.Millisecond) } // half the 1 s timeout or more
	e.exec.during.Store(&slow)
	e.runOnce(w)
	if laneOf() != runtime.LaneSlow {
		t.Fatalf("after a 600 ms run lane = %d, want slow (%d)", laneOf(), runtime.LaneSlow)
	}
	if n := e.m.rt.Stats()[runtime.LaneSlow].Workers; n != 0 {
		t.Fatalf("slow pool has %d workers before any slow-lane run", n)
	}
	e.runOnce(w)
	if e.m.rt.Stats()[runtime.LaneSlow].Workers == 0 {
		t.Fatal("the slow-lane run did not go to the slow pool")
	}
	fast := func() { e.clk.Step(100 * time.Millisecond) }
	e.exec.during.Store(&fast)
	e.runOnce(w)
	if laneOf() != runtime.LaneNetwork {
		t.Fatalf("after a 100 ms run lane = %d, want network again", laneOf())
	}

	// Exec probes stay in the exec lane however slow.
	e2 := newTestEnv(t)
	slow2 := func() { e2.clk.Step(600 * time.Millisecond) }
	e2.exec.during.Store(&slow2)
	e2.status.set(testPodUID, runningStatus(fakeNow, true))
	e2.m.AddPod(context.Background(), testPod(probeOf(runtime.Liveness, execProbe())))
	w2 := e2.worker(testPodUID, testContainerName, runtime.Liveness)
	e2.runOnce(w2)
	if int(w2.lane) != runtime.LaneExec {
		t.Fatalf("exec probe lane = %d, want exec", w2.lane)
	}
}

// W8b: ContainerShouldRestart gives the kubelet's answer
// (pkg/api/v1/pod/util.go ContainerShouldRestart and
// findMatchingContainerRestartRule), including the cases the API's
// validation would reject but a manifest or a library user can still feed.
func TestW8b_ContainerShouldRestartMatchesUpstream(t *testing.T) {
	always, onFailure, never := v1.ContainerRestartPolicyAlways, v1.ContainerRestartPolicyOnFailure, v1.ContainerRestartPolicyNever
	unknownPolicy := v1.ContainerRestartPolicy("Sometimes")
	rule := func(op v1.ContainerRestartRuleOnExitCodesOperator, codes ...int32) v1.ContainerRestartRule {
		return v1.ContainerRestartRule{Action: v1.ContainerRestartRuleActionRestart, ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: op, Values: codes}}
	}
	cases := []struct {
		name      string
		policy    *v1.ContainerRestartPolicy
		rules     []v1.ContainerRestartRule
		podPolicy v1.RestartPolicy
		exitCode  int32
		want      bool
	}{
		{"pod Always", nil, nil, v1.RestartPolicyAlways, 0, true},
		{"pod OnFailure, exit 0", nil, nil, v1.RestartPolicyOnFailure, 0, false},
		{"pod OnFailure, exit 1", nil, nil, v1.RestartPolicyOnFailure, 1, true},
		{"pod Never", nil, nil, v1.RestartPolicyNever, 1, false},
		{"pod unset", nil, nil, "", 0, true},
		{"pod unknown", nil, nil, "Sometimes", 0, true},
		{"container Never overrides pod Always", &never, nil, v1.RestartPolicyAlways, 1, false},
		{"container OnFailure, exit 0", &onFailure, nil, v1.RestartPolicyAlways, 0, false},
		{"container Always overrides pod Never", &always, nil, v1.RestartPolicyNever, 0, true},
		{"rule In matches", &never, []v1.ContainerRestartRule{rule(v1.ContainerRestartRuleOnExitCodesOpIn, 42)}, v1.RestartPolicyNever, 42, true},
		{"rule In misses", &never, []v1.ContainerRestartRule{rule(v1.ContainerRestartRuleOnExitCodesOpIn, 42)}, v1.RestartPolicyNever, 1, false},
		{"rule NotIn matches", &never, []v1.ContainerRestartRule{rule(v1.ContainerRestartRuleOnExitCodesOpNotIn, 0)}, v1.RestartPolicyNever, 3, true},
		// The unknown operator: the rule matches nothing, the next rule is
		// tried, then the container's policy.
		{"unknown operator, then policy", &never, []v1.ContainerRestartRule{rule("Maybe", 1)}, v1.RestartPolicyAlways, 1, false},
		{"unknown operator, then NotIn of the same code", &never, []v1.ContainerRestartRule{rule("Maybe", 1), rule(v1.ContainerRestartRuleOnExitCodesOpNotIn, 7)}, v1.RestartPolicyNever, 1, true},
		{"unknown operator under Always", &always, []v1.ContainerRestartRule{rule("Maybe", 1)}, v1.RestartPolicyNever, 1, true},
		{"rule without exitCodes is skipped", &never, []v1.ContainerRestartRule{{Action: v1.ContainerRestartRuleActionRestart}}, v1.RestartPolicyNever, 1, false},
		// Upstream reads the rules only with a container-level policy.
		{"rules without a container policy are ignored", nil, []v1.ContainerRestartRule{rule(v1.ContainerRestartRuleOnExitCodesOpIn, 42)}, v1.RestartPolicyNever, 42, false},
		// An unknown container policy falls back to the pod's.
		{"unknown container policy, pod Never", &unknownPolicy, nil, v1.RestartPolicyNever, 1, false},
		{"unknown container policy, pod OnFailure exit 0", &unknownPolicy, nil, v1.RestartPolicyOnFailure, 0, false},
		// A matching rule with another action falls back to the policy.
		{"matching non-Restart rule, policy Always", &always, []v1.ContainerRestartRule{{Action: "Ignore", ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{1}}}}, v1.RestartPolicyNever, 1, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &v1.Container{Name: "c", RestartPolicy: tc.policy, RestartPolicyRules: tc.rules}
			spec := &v1.PodSpec{RestartPolicy: tc.podPolicy}
			if got := ContainerShouldRestart(c, spec, tc.exitCode); got != tc.want {
				t.Fatalf("ContainerShouldRestart = %v, want %v", got, tc.want)
			}
		})
	}
}
