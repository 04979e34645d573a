package manager

import (
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/probed/probed/internal/testlog"
	"github.com/probed/probed/runtime"
)

// linesWith are the lines of logs that hold substr.
func linesWith(logs *testlog.Buffer, substr string) []string {
	var out []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return out
}

// TestStatusLackingLoggedOncePerPod (W5.1, W5.3, W5.6): a
// probe the manager cannot run because the status lacks what it needs (W5.9
// too) — no status at all, the container missing from a running pod's status, a
// container without a container ID, a container with no state — is logged
// once per pod at WARN from a probe's second such run (the first may be the
// moment between AddPod and the status's arrival), naming what is missing (and Started, which
// UpdatePodStatus fills, for liveness and readiness), however many runs and
// probes find it so; statuses that say why a container does not run (a
// pending pod not reported yet, a waiting or terminated container) and
// healthy ones log nothing. The memory of a pod goes with its workers: the
// same UID added again is logged again.
func TestStatusLackingLoggedOncePerPod(t *testing.T) {
	var logs testlog.Buffer
	env := newTestEnv(t, func(o *Options) { o.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	started := metav1.NewTime(fakeNow.Add(-time.Minute))
	running := v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: started}}
	yes := true
	two := func(uid string) *v1.Pod {
		p := testPod(v1.Container{Name: "a", LivenessProbe: execProbe(), ReadinessProbe: execProbe()}, v1.Container{Name: "b", LivenessProbe: execProbe()})
		p.UID, p.Name = types.UID(uid), uid
		return p
	}
	pods := map[string]*v1.PodStatus{
		"no-status": nil,
		"missing":   {Phase: v1.PodRunning, ContainerStatuses: []v1.ContainerStatus{{Name: "a", ContainerID: "test://a", State: running, Started: &yes}}},
		"no-id":     {Phase: v1.PodRunning, ContainerStatuses: []v1.ContainerStatus{{Name: "a", State: running}, {Name: "b", State: running}}},
		"no-state":  {Phase: v1.PodRunning, ContainerStatuses: []v1.ContainerStatus{{Name: "a", ContainerID: "test://a"}, {Name: "b", ContainerID: "test://b"}}},
		// Statuses that say why: nothing to log.
		"pending": {Phase: v1.PodPending},
		"waiting": {Phase: v1.PodRunning, ContainerStatuses: []v1.ContainerStatus{
			{Name: "a", State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "ContainerCreating"}}},
			{Name: "b", ContainerID: "test://b", State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}}}},
		"no-started": {Phase: v1.PodRunning, ContainerStatuses: []v1.ContainerStatus{
			{Name: "a", ContainerID: "test://a", State: running}, {Name: "b", ContainerID: "test://b", State: running}}},
		"terminated": {Phase: v1.PodRunning, ContainerStatuses: []v1.ContainerStatus{
			{Name: "a", ContainerID: "test://a", State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 1}}},
			{Name: "b", ContainerID: "test://b", State: running, Started: &yes}}},
		"healthy": {Phase: v1.PodRunning, ContainerStatuses: []v1.ContainerStatus{
			{Name: "a", ContainerID: "test://a", State: running, Started: &yes}, {Name: "b", ContainerID: "test://b", State: running, Started: &yes}}},
	}
	for uid, st := range pods {
		if st != nil {
			env.status.set(types.UID(uid), *st)
		}
		env.m.AddPod(t.Context(), two(uid))
	}
	// "late": its status arrives after its probes' first runs (as the
	// agent tells its status owner after AddPod): not lacking for long.
	env.m.AddPod(t.Context(), two("late"))
	env.step(time.Second)
	env.status.set("late", *pods["healthy"])
	for range 5 {
		env.step(time.Second)
	}
	if got := linesWith(&logs, "pod=test/late "); len(got) != 0 {
		t.Errorf("late: lines %q, want none", got)
	}
	want := map[string]string{
		"no-status":  "probe not run: the status provider has no status for the pod",
		"missing":    "probe not run: the pod's status lists no such container",
		"no-id":      "probe not run: the container's status has no ContainerID",
		"no-state":   "probe not run: the container's status has no State",
		"no-started": "probe not run: the container's status has no Started, which UpdatePodStatus fills",
	}
	for uid := range pods {
		got := linesWith(&logs, "pod=test/"+uid+" ")
		if w, ok := want[uid]; ok {
			if len(got) != 1 || !strings.Contains(got[0], "level=WARN") || !strings.Contains(got[0], w) || !strings.Contains(got[0], "logged once per pod") {
				t.Errorf("%s: lines %q, want one WARN %q", uid, got, w)
			}
			continue
		}
		if len(got) != 0 {
			t.Errorf("%s: lines %q, want none", uid, got)
		}
	}
	if env.exec.calls.Load() == 0 {
		t.Fatal("the healthy pod was not probed: the test proves nothing")
	}

	// Removed and added again: its memory went with its workers.
	env.m.RemovePod(two("no-id"))
	env.idle()
	env.waitGone("no-id", "a", runtime.Liveness)
	env.waitGone("no-id", "a", runtime.Readiness)
	env.waitGone("no-id", "b", runtime.Liveness)
	env.m.AddPod(t.Context(), two("no-id"))
	env.step(time.Second)
	env.step(time.Second)
	if got := linesWith(&logs, "pod=test/no-id "); len(got) != 2 {
		t.Errorf("added again: %d lines, want 2:\n%s", len(got), strings.Join(got, "\n"))
	}
}

// TestDefaultResultsManagersAreDrained: a results manager the
// manager made itself (a nil Options.Liveness) is one nobody can read; its
// updates are discarded, so a liveness result that changes more often than
// the channel holds (R4: 20) never blocks the worker, and Close ends the
// drain (goleak).
func TestDefaultResultsManagersAreDrained(t *testing.T) {
	env := newTestEnv(t, func(o *Options) { o.Liveness = nil })
	env.status.set(testPodUID, runningStatus(fakeNow, true))
	p := probeOf(runtime.Liveness, execProbe())
	env.m.AddPod(t.Context(), testPod(p))
	w := env.worker(testPodUID, testContainerName, runtime.Liveness)
	// Alternate success and failure: each run changes the result (W11:
	// threshold 1), an Update each, though W13 holds a failed liveness
	// until a new container; a new container ID each time restarts it.
	for i := range 3 * 20 {
		st := runningStatus(fakeNow, true)
		st.ContainerStatuses[0].ContainerID = "test://c" + strconv.Itoa(i)
		env.status.set(testPodUID, st)
		if i%2 == 0 {
			env.exec.set(runtime.Failure)
		} else {
			env.exec.set(runtime.Success)
		}
		env.runOnce(w)
	}
	if n := env.exec.calls.Load(); n != 3*20 {
		t.Errorf("%d runs, want %d: a worker blocked on the undrained channel", n, 3*20)
	}
}
