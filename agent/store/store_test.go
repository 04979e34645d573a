package store_test

import (
	"fmt"
	"regexp"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/probed/probed/internal/nettest"
	"github.com/probed/probed/manager/results"
)

var generatedID = regexp.MustCompile(`^probed://[0-9a-f]{32}$`)

func basicPod(uid types.UID, containers ...v1.Container) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: string(uid), Namespace: "ns1", UID: uid},
		Spec:       v1.PodSpec{RestartPolicy: v1.RestartPolicyAlways, Containers: containers},
	}
}

// TestInitialStatus_NoManifestStatus: a pod without status gets the store's
// pod IP, phase Running, a start time, and one status per container: regular
// containers and sidecars running since the load (now) with a generated
// container ID, regular init containers completed (exit 0, Ready per M7h).
func TestInitialStatus_NoManifestStatus(t *testing.T) {
	e := newEnv(t)
	pod := basicPod("init-nostatus", v1.Container{Name: "app", Image: "img"}, v1.Container{Name: "other", Image: "img2"})
	pod.Spec.InitContainers = []v1.Container{
		{Name: "setup", Image: "setup"},
		{Name: "sidecar", Image: "side", RestartPolicy: ptr(v1.ContainerRestartPolicyAlways)},
	}
	kept := e.st.Put(pod)
	if kept.Status.Phase != "" || len(kept.Status.ContainerStatuses) != 0 {
		t.Errorf("Put returned a pod with a status: %+v", kept.Status)
	}
	st := e.status(pod.UID)
	if st.PodIP != "127.0.0.1" || len(st.PodIPs) != 1 || st.PodIPs[0].IP != "127.0.0.1" {
		t.Errorf("podIP = %q, podIPs = %v; want 127.0.0.1", st.PodIP, st.PodIPs)
	}
	if st.Phase != v1.PodRunning {
		t.Errorf("phase = %s, want Running", st.Phase)
	}
	if st.StartTime == nil || !st.StartTime.Time.Equal(fakeNow) {
		t.Errorf("startTime = %v, want %v", st.StartTime, fakeNow)
	}
	if len(st.ContainerStatuses) != 2 || st.ContainerStatuses[0].Name != "app" || st.ContainerStatuses[1].Name != "other" {
		t.Fatalf("container statuses = %+v, want app, other in spec order", st.ContainerStatuses)
	}
	ids := map[string]bool{}
	for _, name := range []string{"app", "other", "sidecar"} {
		cs := e.container(pod.UID, name)
		if cs.State.Running == nil || !cs.State.Running.StartedAt.Time.Equal(fakeNow) {
			t.Errorf("%s: state = %+v, want running since %v", name, cs.State, fakeNow)
		}
		if !generatedID.MatchString(cs.ContainerID) {
			t.Errorf("%s: containerID = %q, want a generated probed:// ID", name, cs.ContainerID)
		}
		if ids[cs.ContainerID] {
			t.Errorf("%s: containerID %q used twice", name, cs.ContainerID)
		}
		ids[cs.ContainerID] = true
		// No probes: started and ready (M7, M8).
		if cs.Started == nil || !*cs.Started || !cs.Ready {
			t.Errorf("%s: started=%v ready=%v, want true/true", name, cs.Started, cs.Ready)
		}
	}
	if cs := e.container(pod.UID, "app"); cs.Image != "img" {
		t.Errorf("app image = %q, want img", cs.Image)
	}
	setup := e.container(pod.UID, "setup")
	if setup.State.Terminated == nil || setup.State.Terminated.ExitCode != 0 || setup.State.Terminated.Reason != "Completed" {
		t.Errorf("regular init container state = %+v, want terminated Completed exit 0", setup.State)
	}
	if !setup.Ready {
		t.Errorf("completed regular init container not Ready (M7h)")
	}
	for _, ct := range []v1.PodConditionType{v1.PodScheduled, v1.PodInitialized, v1.ContainersReady, v1.PodReady} {
		if c := cond(st, ct); c == nil || c.Status != v1.ConditionTrue {
			t.Errorf("condition %s = %+v, want True", ct, c)
		}
	}
}

// TestInitialStatus_ManifestStatusKept: the manifest's status is kept (pod
// IP, container IDs, start times, restart counts); a container the status
// does not mention gets a running status since now with a generated ID.
func TestInitialStatus_ManifestStatusKept(t *testing.T) {
	e := newEnv(t)
	pod := basicPod("init-status", v1.Container{Name: "app", Image: "img"}, v1.Container{Name: "missing", Image: "img"})
	started := metav1.NewTime(fakeNow.Add(-time.Hour))
	pod.Status = v1.PodStatus{
		Phase: v1.PodRunning,
		PodIP: "10.1.2.3",
		ContainerStatuses: []v1.ContainerStatus{{
			Name:         "app",
			ContainerID:  "containerd://abc123",
			RestartCount: 4,
			State:        v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: started}},
		}},
	}
	e.st.Put(pod)
	st := e.status(pod.UID)
	if st.PodIP != "10.1.2.3" || len(st.PodIPs) != 1 || st.PodIPs[0].IP != "10.1.2.3" {
		t.Errorf("podIP = %q, podIPs = %v; want 10.1.2.3", st.PodIP, st.PodIPs)
	}
	app := e.container(pod.UID, "app")
	if app.ContainerID != "containerd://abc123" || app.RestartCount != 4 || app.State.Running == nil ||
		!app.State.Running.StartedAt.Equal(&started) || app.Image != "img" {
		t.Errorf("app status not kept: %+v", app)
	}
	missing := e.container(pod.UID, "missing")
	if missing.State.Running == nil || !missing.State.Running.StartedAt.Time.Equal(fakeNow) || !generatedID.MatchString(missing.ContainerID) {
		t.Errorf("missing container status = %+v, want running since now with a generated ID", missing)
	}
	if app.ContainerID == missing.ContainerID {
		t.Errorf("same container ID for two containers")
	}
}

// TestK2_LivenessFailureRestartsContainer: with a real manager and real
// HTTP probes, a liveness Failure of the current container restarts it: new
// container ID, StartedAt = now, restartCount+1, Started=false (startup
// probe pending again), Ready=false, last state terminated with exit 137;
// OnRestart gets reason LivenessProbe and the kubelet's message. The new
// container becomes Started and Ready again through its own probes and is
// restarted again when liveness keeps failing.
func TestK2_LivenessFailureRestartsContainer(t *testing.T) {
	e := newEnv(t)
	tg := nettest.NewTarget(t)
	pod := basicPod("k2-liveness", v1.Container{
		Name: "app", Image: "img",
		StartupProbe:   httpProbe(tg, "/start"),
		ReadinessProbe: httpProbe(tg, "/ready"),
		LivenessProbe:  httpProbe(tg, "/live"),
	})
	pod.Spec.TerminationGracePeriodSeconds = ptr(int64(45))
	e.add(pod)
	e.stepUntil("Started and Ready", func() bool {
		cs := e.container(pod.UID, "app")
		return cs.Started != nil && *cs.Started && cs.Ready
	})
	before := e.container(pod.UID, "app")
	e.expectNoRestart()

	tg.Set("/live", 500)
	e.stepUntil("a restart", func() bool { return len(e.restarts) > 0 })
	r := e.expectRestart()
	if r.Pod == nil || r.Pod.UID != pod.UID || r.Container != "app" {
		t.Fatalf("restart of %v/%s, want %s/app", r.Pod, r.Container, pod.UID)
	}
	if r.Reason != "LivenessProbe" || r.Message != "Container app failed liveness probe, will be restarted" {
		t.Errorf("reason/message = %q/%q", r.Reason, r.Message)
	}
	if r.GracePeriodSeconds != 45 || !r.Restarted || r.RestartCount != 1 {
		t.Errorf("restart = %+v, want grace 45, restarted, count 1", r)
	}
	if r.OldContainerID != before.ContainerID || r.NewContainerID == before.ContainerID || !generatedID.MatchString(r.NewContainerID) {
		t.Errorf("old/new IDs = %q/%q, before %q", r.OldContainerID, r.NewContainerID, before.ContainerID)
	}
	cs := e.container(pod.UID, "app")
	if cs.ContainerID != r.NewContainerID {
		t.Errorf("containerID = %q, want %q", cs.ContainerID, r.NewContainerID)
	}
	if cs.RestartCount != 1 {
		t.Errorf("restartCount = %d, want 1", cs.RestartCount)
	}
	if cs.State.Running == nil {
		t.Fatalf("restarted container not running: %+v", cs.State)
	}
	last := cs.LastTerminationState.Terminated
	if last == nil || last.ExitCode != 137 || last.ContainerID != before.ContainerID ||
		!last.StartedAt.Equal(&before.State.Running.StartedAt) {
		t.Errorf("lastState = %+v, want terminated exit 137 of %s", cs.LastTerminationState, before.ContainerID)
	} else if !cs.State.Running.StartedAt.Equal(&last.FinishedAt) || !cs.State.Running.StartedAt.After(before.State.Running.StartedAt.Time) ||
		cs.State.Running.StartedAt.Time.After(e.clk.Now()) {
		t.Errorf("new StartedAt %v: want the restart time (= old FinishedAt %v), after %v", cs.State.Running.StartedAt, last.FinishedAt, before.State.Running.StartedAt)
	}
	if cs.Started == nil || *cs.Started || cs.Ready {
		t.Errorf("after restart started=%v ready=%v, want false/false", cs.Started, cs.Ready)
	}
	if c := cond(e.status(pod.UID), v1.PodReady); c == nil || c.Status != v1.ConditionFalse {
		t.Errorf("pod Ready = %+v, want False", c)
	}

	// The new container starts, becomes ready and, liveness still failing,
	// is restarted again with its own ID.
	tg.Set("/live", 200)
	e.stepUntil("the new container Started and Ready", func() bool {
		cs := e.container(pod.UID, "app")
		return cs.Started != nil && *cs.Started && cs.Ready
	})
	e.expectNoRestart()
	tg.Set("/live", 500)
	e.stepUntil("a second restart", func() bool { return len(e.restarts) > 0 })
	r2 := e.expectRestart()
	if r2.OldContainerID != r.NewContainerID || r2.RestartCount != 2 || e.container(pod.UID, "app").RestartCount != 2 {
		t.Errorf("second restart = %+v, want old ID %s, count 2", r2, r.NewContainerID)
	}
}

// TestK2_StartupFailureRestartsContainer: a startup Failure restarts the
// container with reason StartupProbe, the kubelet's message and the startup
// probe's own terminationGracePeriodSeconds (BR-16 b).
func TestK2_StartupFailureRestartsContainer(t *testing.T) {
	e := newEnv(t)
	tg := nettest.NewTarget(t)
	tg.Set("/start", 500)
	startup := httpProbe(tg, "/start")
	startup.TerminationGracePeriodSeconds = ptr(int64(7))
	liveness := httpProbe(tg, "/live")
	liveness.TerminationGracePeriodSeconds = ptr(int64(5))
	pod := basicPod("k2-startup", v1.Container{Name: "app", Image: "img", StartupProbe: startup, LivenessProbe: liveness})
	pod.Spec.TerminationGracePeriodSeconds = ptr(int64(3600))
	e.add(pod)
	old := e.container(pod.UID, "app").ContainerID
	e.stepUntil("a restart", func() bool { return len(e.restarts) > 0 })
	r := e.expectRestart()
	if r.Reason != "StartupProbe" || r.Message != "Container app failed startup probe, will be restarted" ||
		r.GracePeriodSeconds != 7 || !r.Restarted || r.RestartCount != 1 || r.OldContainerID != old {
		t.Errorf("restart = %+v", r)
	}
	cs := e.container(pod.UID, "app")
	if cs.Started == nil || *cs.Started {
		t.Errorf("started = %v after a startup restart, want false", cs.Started)
	}
	if cs.LastTerminationState.Terminated == nil || cs.LastTerminationState.Terminated.ExitCode != 137 {
		t.Errorf("lastState = %+v, want exit 137", cs.LastTerminationState)
	}
}

// TestK3_BR16_KillGracePeriod: the grace period of a probe kill: the
// probe's terminationGracePeriodSeconds beats the pod's; without it the
// pod's (3600 s) is used; without either the API default 30 s; the startup
// probe's own value for a startup kill; a pod deletion grace period beats
// both.
func TestK3_BR16_KillGracePeriod(t *testing.T) {
	e := newEnv(t)
	deleted := metav1.NewTime(fakeNow)
	for i, tc := range []struct {
		name        string
		podGrace    *int64
		liveGrace   *int64
		startGrace  *int64
		deleteGrace *int64
		startup     bool
		want        int64
	}{
		{name: "probe-level beats pod-level", podGrace: ptr(int64(3600)), liveGrace: ptr(int64(5)), want: 5},
		{name: "pod-level without probe-level", podGrace: ptr(int64(3600)), want: 3600},
		{name: "default", want: 30},
		{name: "startup kill uses the startup probe's", podGrace: ptr(int64(3600)), liveGrace: ptr(int64(5)), startGrace: ptr(int64(7)), startup: true, want: 7},
		{name: "startup kill without startup probe-level", podGrace: ptr(int64(3600)), liveGrace: ptr(int64(5)), startup: true, want: 3600},
		{name: "deletion grace beats both", podGrace: ptr(int64(3600)), liveGrace: ptr(int64(5)), deleteGrace: ptr(int64(10)), want: 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			live := &v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{}}, PeriodSeconds: 1, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 1, TerminationGracePeriodSeconds: tc.liveGrace}
			start := live.DeepCopy()
			start.TerminationGracePeriodSeconds = tc.startGrace
			pod := basicPod(types.UID(fmt.Sprintf("grace-%d", i)), v1.Container{Name: "app", Image: "img", LivenessProbe: live, StartupProbe: start})
			pod.Spec.TerminationGracePeriodSeconds = tc.podGrace
			if tc.deleteGrace != nil {
				pod.DeletionTimestamp = &deleted
				pod.DeletionGracePeriodSeconds = tc.deleteGrace
			}
			// Not added to the manager: the update is the only input.
			e.st.Put(pod)
			id := results.ParseContainerID(e.container(pod.UID, "app").ContainerID)
			rm, reason := e.live, "LivenessProbe"
			if tc.startup {
				rm, reason = e.start, "StartupProbe"
			}
			rm.Set(id, results.Failure, pod)
			r := e.expectRestart()
			if r.GracePeriodSeconds != tc.want || r.Reason != reason {
				t.Errorf("grace = %d, reason %s; want %d, %s", r.GracePeriodSeconds, r.Reason, tc.want, reason)
			}
		})
	}
}

// TestK2_FailureOfOldContainerIDIgnored: a liveness or startup Failure for
// a container ID that is no longer the container's current one (a result
// of the killed instance) restarts nothing.
func TestK2_FailureOfOldContainerIDIgnored(t *testing.T) {
	e := newEnv(t)
	pod := basicPod("old-id", v1.Container{Name: "app", Image: "img"})
	e.st.Put(pod)
	oldID := results.ParseContainerID(e.container(pod.UID, "app").ContainerID)
	e.live.Set(oldID, results.Failure, pod)
	r := e.expectRestart()
	if r.NewContainerID == oldID.String() || r.RestartCount != 1 {
		t.Fatalf("first restart = %+v", r)
	}
	// A new Failure update for the old ID, on both channels.
	e.live.Remove(oldID)
	e.live.Set(oldID, results.Failure, pod)
	e.start.Set(oldID, results.Failure, pod)
	e.barrier(e.live)
	e.barrier(e.start)
	e.expectNoRestart()
	cs := e.container(pod.UID, "app")
	if cs.ContainerID != r.NewContainerID || cs.RestartCount != 1 || cs.State.Running == nil {
		t.Errorf("container changed by an old ID's failure: %+v", cs)
	}
	// A readiness Failure never restarts.
	// (No barrier on the readiness channel: give the store a moment.)
	e.ready.Set(results.ParseContainerID(cs.ContainerID), results.Failure, pod)
	time.Sleep(100 * time.Millisecond)
	e.expectNoRestart()
}

// TestW8_RestartPolicyNeverLeavesContainerTerminated: with restartPolicy
// Never a liveness kill leaves the container terminated (exit 137, same
// container ID, restart count unchanged), OnRestart is told it was not
// restarted (no ", will be restarted"), the pod phase becomes Failed and no
// further restart follows.
func TestW8_RestartPolicyNeverLeavesContainerTerminated(t *testing.T) {
	e := newEnv(t)
	tg := nettest.NewTarget(t)
	tg.Set("/live", 500)
	pod := basicPod("never", v1.Container{Name: "app", Image: "img", LivenessProbe: httpProbe(tg, "/live"), ReadinessProbe: httpProbe(tg, "/ready")})
	pod.Spec.RestartPolicy = v1.RestartPolicyNever
	e.add(pod)
	id := e.container(pod.UID, "app").ContainerID
	e.stepUntil("the kill", func() bool { return len(e.restarts) > 0 })
	r := e.expectRestart()
	if r.Restarted || r.Reason != "LivenessProbe" || r.Message != "Container app failed liveness probe" ||
		r.NewContainerID != "" || r.OldContainerID != id || r.RestartCount != 0 {
		t.Errorf("restart = %+v, want a kill without restart", r)
	}
	cs := e.container(pod.UID, "app")
	if cs.State.Running != nil || cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 137 {
		t.Errorf("state = %+v, want terminated exit 137", cs.State)
	}
	if cs.ContainerID != id || cs.RestartCount != 0 || cs.Ready {
		t.Errorf("status = %+v, want same ID, restartCount 0, not ready", cs)
	}
	st := e.status(pod.UID)
	if st.Phase != v1.PodFailed {
		t.Errorf("phase = %s, want Failed", st.Phase)
	}
	for _, ct := range []v1.PodConditionType{v1.ContainersReady, v1.PodReady} {
		if c := cond(st, ct); c == nil || c.Status != v1.ConditionFalse || c.Reason != "PodFailed" {
			t.Errorf("%s = %+v, want False with reason PodFailed (terminal phase)", ct, c)
		}
	}
	for range 3 {
		e.step(time.Second + 10*time.Millisecond)
		time.Sleep(20 * time.Millisecond)
	}
	e.expectNoRestart()
	if st := e.status(pod.UID); st.Phase != v1.PodFailed {
		t.Errorf("phase = %s later, want Failed", st.Phase)
	}
}

// TestConditions_ReadinessGates: Ready needs ContainersReady and every
// readiness gate's condition True (the kubelet's GeneratePodReadyCondition):
// a False or missing gate condition keeps Ready False with reason
// ReadinessGatesNotReady while ContainersReady is True.
func TestConditions_ReadinessGates(t *testing.T) {
	e := newEnv(t)
	const gate = v1.PodConditionType("example.com/lb")
	for _, tc := range []struct {
		name    string
		conds   []v1.PodCondition
		ready   v1.ConditionStatus
		message string
	}{
		{name: "gate-true", conds: []v1.PodCondition{{Type: gate, Status: v1.ConditionTrue}}, ready: v1.ConditionTrue},
		{name: "gate-false", conds: []v1.PodCondition{{Type: gate, Status: v1.ConditionFalse}}, ready: v1.ConditionFalse,
			message: `the status of pod readiness gate "example.com/lb" is not "True", but False`},
		{name: "gate-missing", ready: v1.ConditionFalse,
			message: `corresponding condition of pod readiness gate "example.com/lb" does not exist.`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := basicPod(types.UID(tc.name), v1.Container{Name: "app", Image: "img"})
			pod.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: gate}}
			pod.Status.Conditions = tc.conds
			pod.Status.PodIP = "127.0.0.1"
			e.st.Put(pod)
			st := e.status(pod.UID)
			if c := cond(st, v1.ContainersReady); c == nil || c.Status != v1.ConditionTrue {
				t.Errorf("ContainersReady = %+v, want True", c)
			}
			c := cond(st, v1.PodReady)
			if c == nil || c.Status != tc.ready {
				t.Fatalf("Ready = %+v, want %s", c, tc.ready)
			}
			if tc.ready == v1.ConditionFalse && (c.Reason != "ReadinessGatesNotReady" || c.Message != tc.message) {
				t.Errorf("Ready reason/message = %q/%q, want ReadinessGatesNotReady/%q", c.Reason, c.Message, tc.message)
			}
			if g := cond(st, gate); g == nil && tc.conds != nil {
				t.Errorf("gate condition dropped")
			}
		})
	}
}

// TestConditions_SidecarReadiness: a sidecar (restartable init container)
// counts for ContainersReady and Ready: while its readiness probe fails the
// pod is not ready and the message names it; the regular init container is
// completed and the pod Initialized; once the sidecar is ready so is the pod.
func TestConditions_SidecarReadiness(t *testing.T) {
	e := newEnv(t)
	tg := nettest.NewTarget(t)
	tg.Set("/side", 500)
	pod := basicPod("sidecar", v1.Container{Name: "app", Image: "img", ReadinessProbe: httpProbe(tg, "/ready")})
	pod.Spec.InitContainers = []v1.Container{
		{Name: "setup", Image: "setup"},
		{Name: "side", Image: "side", RestartPolicy: ptr(v1.ContainerRestartPolicyAlways), ReadinessProbe: httpProbe(tg, "/side")},
	}
	e.add(pod)
	e.stepUntil("app Ready", func() bool { return e.isReady(pod.UID, "app") })
	st := e.status(pod.UID)
	if e.isReady(pod.UID, "side") {
		t.Fatal("sidecar Ready while its probe fails")
	}
	if c := cond(st, v1.PodInitialized); c == nil || c.Status != v1.ConditionTrue {
		t.Errorf("Initialized = %+v, want True", c)
	}
	for _, ct := range []v1.PodConditionType{v1.ContainersReady, v1.PodReady} {
		c := cond(st, ct)
		if c == nil || c.Status != v1.ConditionFalse || c.Reason != "ContainersNotReady" || c.Message != "containers with unready status: [side]" {
			t.Errorf("%s = %+v, want False, ContainersNotReady, [side]", ct, c)
		}
	}
	tg.Set("/side", 200)
	e.stepUntil("sidecar Ready", func() bool { return e.isReady(pod.UID, "side") })
	st = e.status(pod.UID)
	for _, ct := range []v1.PodConditionType{v1.ContainersReady, v1.PodReady} {
		if c := cond(st, ct); c == nil || c.Status != v1.ConditionTrue || c.Reason != "" || c.Message != "" {
			t.Errorf("%s = %+v, want True", ct, c)
		}
	}
	// Both unready: sidecars first, as the kubelet lists them.
	tg.Set("/side", 500)
	tg.Set("/ready", 500)
	e.stepUntil("both unready", func() bool { return !e.isReady(pod.UID, "side") && !e.isReady(pod.UID, "app") })
	if c := cond(e.status(pod.UID), v1.PodReady); c == nil || c.Message != "containers with unready status: [side app]" {
		t.Errorf("Ready = %+v, want message naming [side app]", c)
	}
}

// TestLog_StartedAndReadyChangesOneLineEach: every change of a container's
// Started or Ready is logged as exactly one structured line, including the
// changes a probe-driven restart causes.
func TestLog_StartedAndReadyChangesOneLineEach(t *testing.T) {
	e := newEnv(t)
	tg := nettest.NewTarget(t)
	pod := basicPod("logs", v1.Container{Name: "app", Image: "img",
		StartupProbe: httpProbe(tg, "/start"), ReadinessProbe: httpProbe(tg, "/ready"), LivenessProbe: httpProbe(tg, "/live")})
	e.add(pod)
	e.stepUntil("Started and Ready", func() bool {
		cs := e.container(pod.UID, "app")
		return cs.Started != nil && *cs.Started && cs.Ready
	})
	values := func(msg, key string) []any {
		var out []any
		for _, rec := range e.logs.Records(msg) {
			if rec["podUID"] != string(pod.UID) || rec["container"] != "app" || rec["pod"] != "ns1/logs" {
				continue
			}
			if _, ok := rec["containerID"].(string); !ok {
				t.Errorf("%s record without containerID: %v", msg, rec)
			}
			out = append(out, rec[key])
		}
		return out
	}
	e.eventually("one ready=true line", func() bool { return len(values("container ready changed", "ready")) >= 1 })
	if got := values("container started changed", "started"); fmt.Sprint(got) != "[false true]" && fmt.Sprint(got) != "[true]" {
		t.Errorf("started lines = %v, want one line per change ending in true", got)
	}
	if got := values("container ready changed", "ready"); fmt.Sprint(got) != "[true]" {
		t.Errorf("ready lines = %v, want [true]", got)
	}
	// A restart turns both false: one line each.
	tg.Set("/live", 500)
	e.stepUntil("a restart", func() bool { return len(e.restarts) > 0 })
	e.expectRestart()
	// The new container starts and becomes ready again (its liveness target
	// healed): one line for each change, in order.
	tg.Set("/live", 200)
	e.stepUntil("the new container Started and Ready", func() bool {
		cs := e.container(pod.UID, "app")
		return cs.RestartCount == 1 && cs.Started != nil && *cs.Started && cs.Ready
	})
	startedLines := fmt.Sprint(values("container started changed", "started"))
	if startedLines != "[false true false true]" && startedLines != "[true false true]" {
		t.Errorf("started lines = %v, want one line per change: [(false) true false true]", startedLines)
	}
	if readyLines := fmt.Sprint(values("container ready changed", "ready")); readyLines != "[true false true]" {
		t.Errorf("ready lines = %v, want [true false true]", readyLines)
	}
	// Nothing changes: no new lines.
	n1, n2 := len(values("container started changed", "started")), len(values("container ready changed", "ready"))
	e.st.Resync()
	if len(values("container started changed", "started")) != n1 || len(values("container ready changed", "ready")) != n2 {
		t.Errorf("a regeneration without change logged a change")
	}
}

// TestK1_UpdatesForUnknownPodsIgnored: results for a pod the store does not
// know (removed, or never added) are ignored: no restart, no status.
func TestK1_UpdatesForUnknownPodsIgnored(t *testing.T) {
	e := newEnv(t)
	pod := basicPod("known", v1.Container{Name: "app", Image: "img"})
	e.st.Put(pod)
	id := results.ParseContainerID(e.container(pod.UID, "app").ContainerID)
	ghost := basicPod("ghost", v1.Container{Name: "app", Image: "img"})
	// Same container ID, other pod UID; and the known pod after Delete.
	e.live.Set(id, results.Failure, ghost)
	e.barrier(e.live)
	e.expectNoRestart()
	e.st.Delete(pod.UID)
	e.live.Remove(id)
	e.live.Set(id, results.Failure, pod)
	e.start.Set(id, results.Failure, pod)
	e.ready.Set(id, results.Success, pod)
	e.barrier(e.live)
	e.barrier(e.start)
	time.Sleep(50 * time.Millisecond) // readiness has no barrier
	e.expectNoRestart()
	if _, ok := e.st.GetPodStatus(pod.UID); ok {
		t.Error("an update brought a deleted pod back")
	}
	if _, ok := e.st.GetPodStatus(ghost.UID); ok {
		t.Error("an update created a pod")
	}
}

// TestBR25_SimultaneousReadinessFailuresAllApplied: four containers whose
// readiness probes cross the failure threshold in the same tick all end
// Ready=false, and the pod's Ready and ContainersReady conditions are
// False; after one success each is Ready again. Repeated.
func TestBR25_SimultaneousReadinessFailuresAllApplied(t *testing.T) {
	e := newEnv(t)
	tg := nettest.NewTarget(t)
	var cs []v1.Container
	for i := 1; i <= 4; i++ {
		p := httpProbe(tg, fmt.Sprintf("/r%d", i))
		p.FailureThreshold = 3
		cs = append(cs, v1.Container{Name: fmt.Sprintf("c%d", i), Image: "img", ReadinessProbe: p})
	}
	pod := basicPod("br25", cs...)
	e.add(pod)
	allReady := func(want bool) func() bool {
		return func() bool {
			st := e.status(pod.UID)
			for _, c := range st.ContainerStatuses {
				if c.Ready != want {
					return false
				}
			}
			c1, c2 := cond(st, v1.PodReady), cond(st, v1.ContainersReady)
			want := map[bool]v1.ConditionStatus{true: v1.ConditionTrue, false: v1.ConditionFalse}[want]
			return c1 != nil && c2 != nil && c1.Status == want && c2.Status == want
		}
	}
	for range 3 {
		e.stepUntil("all Ready", allReady(true))
		for i := 1; i <= 4; i++ {
			tg.Set(fmt.Sprintf("/r%d", i), 500)
		}
		e.stepUntil("all not Ready", allReady(false))
		for i := 1; i <= 4; i++ {
			tg.Set(fmt.Sprintf("/r%d", i), 200)
		}
	}
}

// TestK2_ManifestContainerIDWithoutRuntimeType: a manifest status whose
// containerID is not in the runtime's "type://id" form still gets probed
// and restarted: results are keyed by the parsed ID (R2), so the store
// must keep IDs that parse back to themselves.
func TestK2_ManifestContainerIDWithoutRuntimeType(t *testing.T) {
	e := newEnv(t)
	tg := nettest.NewTarget(t)
	tg.Set("/live", 500)
	pod := basicPod("untyped-id",
		v1.Container{Name: "a", Image: "img", LivenessProbe: httpProbe(tg, "/live")},
		v1.Container{Name: "b", Image: "img", ReadinessProbe: httpProbe(tg, "/ready-b")})
	pod.Status = v1.PodStatus{PodIP: "127.0.0.1", ContainerStatuses: []v1.ContainerStatus{
		{Name: "a", ContainerID: "abc123", State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(fakeNow)}}},
		{Name: "b", ContainerID: "def456", State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(fakeNow)}}},
	}}
	e.add(pod)
	for _, name := range []string{"a", "b"} {
		id := e.container(pod.UID, name).ContainerID
		if results.ParseContainerID(id).String() != id {
			t.Errorf("container %s: ID %q does not parse back to itself", name, id)
		}
	}
	e.stepUntil("the restart of a", func() bool { return len(e.restarts) > 0 })
	if r := e.expectRestart(); r.Container != "a" || !r.Restarted {
		t.Errorf("restart = %+v", r)
	}
	tg.Set("/ready-b", 500)
	for range 3 {
		e.step(time.Second + 10*time.Millisecond)
		time.Sleep(50 * time.Millisecond)
	}
	if e.isReady(pod.UID, "b") {
		t.Error("b Ready while its readiness probe fails")
	}
}

// TestK2_SidecarRestartInNeverPod: a sidecar (restartable init container,
// restartPolicy Always) killed by its startup probe is restarted even in a
// restartPolicy Never pod; the pod stays Running and Initialized (a regular
// container has already started: the kubelet's HasAnyRegularContainerStarted)
// while the sidecar is not started and the pod not ready.
func TestK2_SidecarRestartInNeverPod(t *testing.T) {
	e := newEnv(t)
	startup := &v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{}}, PeriodSeconds: 1, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 1}
	pod := basicPod("sidecar-never", v1.Container{Name: "app", Image: "img"})
	pod.Spec.RestartPolicy = v1.RestartPolicyNever
	pod.Spec.InitContainers = []v1.Container{{Name: "side", Image: "side", RestartPolicy: ptr(v1.ContainerRestartPolicyAlways), StartupProbe: startup}}
	// The clock never moves: the worker does not run, the results set here
	// are the only input.
	e.add(pod)
	old := e.container(pod.UID, "side")
	if old.Started == nil || *old.Started {
		t.Fatalf("sidecar started before its startup probe: %+v", old)
	}
	if c := cond(e.status(pod.UID), v1.PodInitialized); c == nil || c.Status != v1.ConditionTrue {
		t.Errorf("Initialized = %+v, want True (the app container runs)", c)
	}
	e.start.Set(results.ParseContainerID(old.ContainerID), results.Success, pod)
	e.eventually("sidecar started", func() bool { cs := e.container(pod.UID, "side"); return cs.Started != nil && *cs.Started && cs.Ready })
	e.start.Set(results.ParseContainerID(old.ContainerID), results.Failure, pod)
	r := e.expectRestart()
	if !r.Restarted || r.Container != "side" || r.Reason != "StartupProbe" || r.RestartCount != 1 {
		t.Fatalf("restart = %+v", r)
	}
	side := e.container(pod.UID, "side")
	if side.ContainerID != r.NewContainerID || side.RestartCount != 1 || side.State.Running == nil || side.Ready ||
		side.Started == nil || *side.Started {
		t.Errorf("sidecar after restart = %+v", side)
	}
	st := e.status(pod.UID)
	if st.Phase != v1.PodRunning {
		t.Errorf("phase = %s, want Running", st.Phase)
	}
	if c := cond(st, v1.PodInitialized); c == nil || c.Status != v1.ConditionTrue {
		t.Errorf("Initialized = %+v, want True (a regular container has started)", c)
	}
	if c := cond(st, v1.PodReady); c == nil || c.Status != v1.ConditionFalse || c.Message != "containers with unready status: [side]" {
		t.Errorf("Ready = %+v, want False naming side", c)
	}
}

// TestM7b_ManifestStatusOfStoppedContainerNotReady: a status put for a
// container that no longer runs (it crashed: terminated, or waiting) is
// not Ready even if the status it came from said so: the kubelet generates
// container statuses afresh and UpdatePodStatus leaves a not-started
// container's Ready untouched (M7b).
func TestM7b_ManifestStatusOfStoppedContainerNotReady(t *testing.T) {
	e := newEnv(t)
	pod := basicPod("crashed", v1.Container{Name: "app", Image: "img"}, v1.Container{Name: "wait", Image: "img"})
	pod.Spec.RestartPolicy = v1.RestartPolicyOnFailure
	pod.Status.ContainerStatuses = []v1.ContainerStatus{
		{Name: "app", ContainerID: "containerd://a", Ready: true, Started: ptr(true),
			State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 1, ContainerID: "containerd://a"}}},
		{Name: "wait", Ready: true, State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}},
	}
	e.st.Put(pod)
	for _, name := range []string{"app", "wait"} {
		if cs := e.container(pod.UID, name); cs.Ready || cs.Started == nil || *cs.Started {
			t.Errorf("%s: ready=%v started=%v, want false/false", name, cs.Ready, cs.Started)
		}
	}
	if c := cond(e.status(pod.UID), v1.PodReady); c == nil || c.Status != v1.ConditionFalse {
		t.Errorf("Ready = %+v, want False", c)
	}
}
