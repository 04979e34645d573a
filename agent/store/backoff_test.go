package store_test

import (
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/probed/probed/agent/events"
	"github.com/probed/probed/agent/store"
	"github.com/probed/probed/internal/nettest"
	"github.com/probed/probed/manager/results"
)

// crashLoopPod is a pod whose only container's liveness probe (period 1 s,
// threshold 1) fails whenever tg's /live answers 500.
func crashLoopPod(tg *nettest.Target, uid string, policy v1.RestartPolicy) *v1.Pod {
	pod := basicPod(types.UID(uid), v1.Container{Name: "app", Image: "img", LivenessProbe: httpProbe(tg, "/live")})
	pod.Spec.RestartPolicy = policy
	return pod
}

// killed steps the clock until the container is no longer running with id
// (its liveness probe failed and the simulator killed it) and returns its
// status then.
func (e *env) killed(pod *v1.Pod, id string) v1.ContainerStatus {
	e.t.Helper()
	e.stepUntil("the kill of "+id, func() bool {
		cs := e.container(pod.UID, "app")
		return cs.ContainerID != id || cs.State.Running == nil
	})
	return e.container(pod.UID, "app")
}

// TestK2_CrashLoopBackOffSequence: a container killed again and again by
// its liveness probe, through the real manager, backs off like the kubelet
// (kuberuntime doBackOff with flowcontrol.Backoff 10 s doubling to 300 s):
// the first two probe kills restart it at once (no earlier exit, then the
// first back-off entry), then each kill leaves it waiting with reason
// CrashLoopBackOff and the kubelet's message for 10 s, 20 s, 40 s, 80 s,
// 160 s, 300 s. At the cap the kill after a back-off restarts at once (the
// previous exit is then more than 300 s old: the kubelet checks the
// back-off against the pod status read before the kill), the next one waits
// 300 s again. It starts exactly at the end of a back-off (new container ID,
// restartCount+1, running), with a Killing and a BackOff event per back-off
// and Notify (the --on-restart command) only at the real start. While it
// waits its liveness probe does not run and the result of the old container
// ID is Failure (W8, W8a); the new ID is probed again (W6).
func TestK2_CrashLoopBackOffSequence(t *testing.T) {
	e := newEnv(t)
	tg := nettest.NewTarget(t)
	tg.Set("/live", 500)
	pod := crashLoopPod(tg, "crashy", v1.RestartPolicyAlways)
	e.add(pod)

	want := []time.Duration{0, 0, 10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second,
		160 * time.Second, 300 * time.Second, 0, 300 * time.Second}
	id := e.container(pod.UID, "app").ContainerID
	for i, wait := range want {
		cs := e.killed(pod, id)
		if wait == 0 {
			r := e.expectRestart()
			if !r.Restarted || r.BackOff != 0 || r.RestartCount != int32(i+1) || r.OldContainerID != id {
				t.Fatalf("kill %d: restart %+v, want an immediate restart %d of %s", i+1, r, i+1, id)
			}
			id = r.NewContainerID
			continue
		}
		// Waiting in CrashLoopBackOff: the old container ID stays (the
		// kubelet's status keeps the dead container's ID).
		msg := fmt.Sprintf("back-off %s restarting failed container=app pod=crashy_ns1(crashy)", wait)
		if cs.State.Waiting == nil || cs.State.Waiting.Reason != "CrashLoopBackOff" || cs.State.Waiting.Message != msg ||
			cs.ContainerID != id || cs.RestartCount != int32(i) || cs.Ready || cs.LastTerminationState.Terminated == nil {
			t.Fatalf("kill %d: status %+v, want waiting CrashLoopBackOff %q", i+1, cs, msg)
		}
		e.expectNoRestart()
		if got, ok := e.live.Get(results.ParseContainerID(id)); !ok || got != results.Failure {
			t.Errorf("kill %d: liveness result of the old ID = %v/%v, want Failure (W8)", i+1, got, ok)
		}
		if i == 2 {
			// W8a: a waiting container is not probed.
			before := tg.Hits("/live")
			for range 5 {
				e.step(time.Second)
				time.Sleep(20 * time.Millisecond)
			}
			if after := tg.Hits("/live"); after != before {
				t.Errorf("liveness ran %d times while the container waited", after-before)
			}
			e.step(wait - 5*time.Second - time.Millisecond)
		} else {
			e.step(wait - time.Millisecond)
		}
		if e.sim.Pending() != 1 {
			t.Fatalf("kill %d: started before its %s back-off ended", i+1, wait)
		}
		e.expectNoRestart()
		e.step(time.Millisecond)
		r := e.expectRestart()
		if !r.Restarted || r.BackOff != wait || r.RestartCount != int32(i+1) || r.OldContainerID != id || r.NewContainerID == id {
			t.Fatalf("kill %d: restart %+v, want restart %d after %s", i+1, r, i+1, wait)
		}
		// Running since now, unless its liveness probe already killed
		// the new container again (its first tick may be now).
		cs = e.container(pod.UID, "app")
		if last := cs.LastTerminationState.Terminated; cs.ContainerID == r.NewContainerID && cs.State.Running != nil {
			if cs.RestartCount != int32(i+1) || !cs.State.Running.StartedAt.Time.Equal(e.clk.Now()) {
				t.Fatalf("kill %d: status after the back-off %+v", i+1, cs)
			}
		} else if last == nil || last.ContainerID != r.NewContainerID || !last.StartedAt.Time.Equal(e.clk.Now()) {
			t.Fatalf("kill %d: status after the back-off %+v", i+1, cs)
		}
		id = r.NewContainerID
	}
	// The new container is probed (W6) and killed again.
	e.killed(pod, id)

	var killing, backOff *events.Event
	for _, ev := range e.events.List() {
		switch ev.Reason {
		case "Killing":
			killing = &ev
		case "BackOff":
			backOff = &ev
		}
	}
	if killing == nil || backOff == nil {
		t.Fatalf("events %+v: want Killing and BackOff", e.events.List())
	}
	if backOff.Type != v1.EventTypeWarning || backOff.Message != "Back-off restarting failed container app in pod crashy_ns1(crashy)" ||
		backOff.FieldPath != "spec.containers{app}" {
		t.Errorf("BackOff event = %+v", backOff)
	}
}

// TestK2_CrashLoopBackOffResetsAfterTenMinutes: a container that ran 10
// minutes since its last start has its back-off forgotten (the kubelet's
// HasExpiredFunc, 600 s, and crashLoopBackOff.GC): its next kill restarts
// it at once and the back-off after starts again at 10 s.
func TestK2_CrashLoopBackOffResetsAfterTenMinutes(t *testing.T) {
	e := newEnv(t)
	tg := nettest.NewTarget(t)
	tg.Set("/live", 500)
	pod := crashLoopPod(tg, "reset", v1.RestartPolicyAlways)
	e.add(pod)
	id := e.container(pod.UID, "app").ContainerID
	for range 2 { // immediate restarts
		e.killed(pod, id)
		id = e.expectRestart().NewContainerID
	}
	for _, wait := range []time.Duration{10 * time.Second, 20 * time.Second} {
		e.killed(pod, id)
		e.step(wait)
		r := e.expectRestart()
		if r.BackOff != wait {
			t.Fatalf("back-off %s, want %s", r.BackOff, wait)
		}
		id = r.NewContainerID
	}
	// Healthy for 10 minutes and a second.
	tg.Set("/live", 200)
	e.step(600*time.Second + time.Second)
	time.Sleep(50 * time.Millisecond)
	tg.Set("/live", 500)
	e.killed(pod, id)
	r := e.expectRestart()
	if r.BackOff != 0 {
		t.Fatalf("after 10 min of running: back-off %s, want an immediate restart", r.BackOff)
	}
	cs := e.killed(pod, r.NewContainerID)
	if cs.State.Waiting == nil || cs.State.Waiting.Message != "back-off 10s restarting failed container=app pod=reset_ns1(reset)" {
		t.Fatalf("the back-off after the reset: %+v, want 10s", cs.State)
	}
}

// TestW8b_RestartPolicyNeverNoBackOff: with restartPolicy Never a killed
// container stays terminated (exit 137), never waits in CrashLoopBackOff,
// and Notify reports it not restarted at the kill.
func TestW8b_RestartPolicyNeverNoBackOff(t *testing.T) {
	e := newEnv(t)
	tg := nettest.NewTarget(t)
	tg.Set("/live", 500)
	pod := crashLoopPod(tg, "never", v1.RestartPolicyNever)
	e.add(pod)
	id := e.container(pod.UID, "app").ContainerID
	cs := e.killed(pod, id)
	r := e.expectRestart()
	if r.Restarted || cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 137 || e.sim.Pending() != 0 {
		t.Fatalf("restart %+v, state %+v: want terminated, not restarted", r, cs.State)
	}
	for _, ev := range e.events.List() {
		if ev.Reason == "BackOff" {
			t.Errorf("BackOff event for a container that is not restarted: %+v", ev)
		}
	}
}

// TestW8b_RestartPolicyOnFailureBacksOff: a probe kill exits 137, so with
// restartPolicy OnFailure the container is restarted, and backs off, as
// with Always (ContainerShouldRestart).
func TestW8b_RestartPolicyOnFailureBacksOff(t *testing.T) {
	e := newEnv(t)
	tg := nettest.NewTarget(t)
	tg.Set("/live", 500)
	pod := crashLoopPod(tg, "onfailure", v1.RestartPolicyOnFailure)
	e.add(pod)
	id := e.container(pod.UID, "app").ContainerID
	for range 2 {
		e.killed(pod, id)
		id = e.expectRestart().NewContainerID
	}
	cs := e.killed(pod, id)
	if cs.State.Waiting == nil || cs.State.Waiting.Reason != "CrashLoopBackOff" {
		t.Fatalf("third kill with OnFailure: %+v, want CrashLoopBackOff", cs.State)
	}
}

// TestCrashLoopBackOffForgottenAtRestore: a container saved (--state-dir)
// waiting in CrashLoopBackOff starts when probed loads it again (new
// container ID, restartCount+1, running since now), as the kubelet, whose
// back-off is in memory, starts it at its first pod sync after a restart.
func TestCrashLoopBackOffForgottenAtRestore(t *testing.T) {
	e := newEnv(t)
	tg := nettest.NewTarget(t)
	pod := crashLoopPod(tg, "restored", v1.RestartPolicyAlways)
	e.st.Restore([]store.SavedPod{{UID: pod.UID, Namespace: "ns1", Name: "restored", Status: v1.PodStatus{
		PodIP: "127.0.0.1",
		ContainerStatuses: []v1.ContainerStatus{{Name: "app", ContainerID: "probed://old", RestartCount: 4,
			State:                v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 40s restarting failed container=app pod=restored_ns1(restored)"}},
			LastTerminationState: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 137, Reason: "Error", ContainerID: "probed://old"}}}},
	}}})
	e.add(pod)
	cs := e.container(pod.UID, "app")
	if cs.State.Running == nil || !cs.State.Running.StartedAt.Time.Equal(e.clk.Now()) || cs.RestartCount != 5 ||
		cs.ContainerID == "probed://old" || !generatedID.MatchString(cs.ContainerID) || cs.LastTerminationState.Terminated == nil {
		t.Fatalf("restored container %+v, want started again", cs)
	}
}
