package cases

import (
	"fmt"
	"net/http"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/probed/probed/manager/results"
	"github.com/probed/probed/runtime"
)

// BR-24: 500 running containers with a 10 s readiness exec probe, added
// right after the prober starts: the first attempts are spread over
// [0 s, 10 s) with no 1 s bucket above 100, each worker then keeps a 10 s
// cadence from its own first attempt, so the phases stay spread. (30 s of
// attempts rather than the case's 60 s: 1,500 exec runs already take most
// of this test's time under the race detector.)
func TestBR24_NoThunderingHerdAfterStart(t *testing.T) {
	e := newEnv(t, withExecPool(16))
	const n = 500
	for i := 0; i < n; i++ {
		p := newPod(fmt.Sprintf("br24-%03d", i), v1.Container{Name: "app",
			ReadinessProbe: timing(execProbe("true"), 0, 10, 0, 0, 0)})
		// Running since before the prober started (a prober restart).
		p.Status.ContainerStatuses = []v1.ContainerStatus{{Name: "app",
			State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(e.start.Add(-time.Hour))}}}}
		e.addNoSettle(p)
	}
	e.settle()
	const step = 100 * time.Millisecond
	e.advance(30*time.Second, step)

	perPod := map[types.UID][]time.Duration{}
	for _, r := range e.allRuns() {
		perPod[r.PodUID] = append(perPod[r.PodUID], since(r.Start, e.start))
	}
	if len(perPod) != n {
		t.Fatalf("%d of %d pods probed", len(perPod), n)
	}
	var firsts []time.Duration
	lastPeriod := map[int]int{} // 1 s bucket → attempts within [20 s, 30 s)
	for uid, at := range perPod {
		firsts = append(firsts, at[0])
		if at[0] >= 10*time.Second+step { // seen at the next step boundary
			t.Errorf("%s: first attempt at %v, want within the first period", uid, at[0])
		}
		// Cadence: every 10 s from the first attempt (the wheel's 10 ms
		// grid, seen through 100 ms steps), never more often.
		for i := 1; i < len(at); i++ {
			if d := at[i] - at[i-1]; d < 10*time.Second-100*time.Millisecond || d > 10*time.Second+100*time.Millisecond {
				t.Errorf("%s: attempts at %v: interval %v, want 10 s", uid, fmtDurs(at), d)
				break
			}
		}
		if len(at) < 3 {
			t.Errorf("%s: %d attempts in 30 s, want 3", uid, len(at))
		}
		for _, a := range at {
			if a >= 20*time.Second && a < 30*time.Second {
				lastPeriod[int(a/time.Second)]++
			}
		}
	}
	first := map[int]int{}
	for _, f := range firsts {
		first[int(f/time.Second)]++
	}
	for b, c := range first {
		if c > 100 {
			t.Errorf("%d first attempts within [%d s, %d s), want at most 100 per second", c, b, b+1)
		}
	}
	for b, c := range lastPeriod {
		if c > 100 {
			t.Errorf("%d attempts within [%d s, %d s), want the phases to stay spread", c, b, b+1)
		}
	}
	sort.Slice(firsts, func(i, j int) bool { return firsts[i] < firsts[j] })
	if spread := firsts[len(firsts)-1] - firsts[0]; spread < 9*time.Second {
		t.Errorf("first attempts within %v, want them spread over the 10 s period", spread)
	}
}

// BR-25: four containers whose readiness servers all switch from 200 to
// 500 at the same instant T; repeated 200 times with T shifted by a few
// milliseconds against the probe ticks. Every time all four become
// Ready=false, and the pod's Ready and ContainersReady conditions False,
// by T+3 s+S+1 s; no container is ever Ready while its committed readiness
// result is Failure; and after the servers return to 200 each container is
// Ready again after one success.
func TestBR25_NoLostReadinessUpdate(t *testing.T) {
	e := newEnv(t)
	const containers = 4
	var failing atomic.Bool
	var srvs [containers]*server
	var cs []v1.Container
	for i := range srvs {
		srvs[i] = startServer(t, e.clk, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
			if failing.Load() {
				w.WriteHeader(http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusOK)
		})
		cs = append(cs, v1.Container{Name: fmt.Sprintf("c%d", i+1),
			ReadinessProbe: timing(httpProbe("/r", srvs[i].Port), 0, 1, 0, 0, 3)})
	}
	pod := e.add(newPod("br25", cs...))

	// invariant: no container shows Ready=true while its committed
	// readiness result is Failure.
	invariant := func() {
		t.Helper()
		p := e.pod(pod.UID)
		for _, c := range p.Status.ContainerStatuses {
			if r, found := e.res[runtime.Readiness].Get(results.ParseContainerID(c.ContainerID)); c.Ready && found && r == results.Failure {
				t.Fatalf("t=%v: %s Ready=true while its readiness result is Failure", e.now(), c.Name)
			}
		}
	}
	allReady := func(want bool) bool {
		p := e.pod(pod.UID)
		for _, c := range p.Status.ContainerStatuses {
			if c.Ready != want {
				return false
			}
		}
		cond := v1.ConditionFalse
		if want {
			cond = v1.ConditionTrue
		}
		return condition(p, v1.PodReady) == cond && condition(p, v1.ContainersReady) == cond
	}
	e.advanceTo(e.clk.Now().Add(3*time.Second), 100*time.Millisecond, func() bool { invariant(); return true })
	if !allReady(true) {
		t.Fatalf("not all Ready at the start: %+v", e.pod(pod.UID).Status)
	}

	const reps = 200
	// Runs are observed at step boundaries: 250 ms keeps every bound of the
	// case with room to spare. T itself is stepped to exactly.
	const step = 250 * time.Millisecond
	for rep := 0; rep < reps; rep++ {
		// T moves by 7 ms per repetition against the probes' 1 s grid.
		shift := time.Duration(rep*7%1000) * time.Millisecond
		T := e.clk.Now().Add(shift)
		e.advanceTo(T, step, func() bool { invariant(); return true })
		failing.Store(true)
		deadline := T.Add(3*time.Second + S + time.Second)
		var notReadyAt time.Time
		e.advanceTo(deadline, step, func() bool {
			invariant()
			if allReady(false) {
				notReadyAt = e.clk.Now()
				return false
			}
			return true
		})
		if notReadyAt.IsZero() {
			p := e.pod(pod.UID)
			t.Fatalf("repetition %d (T shifted %v): not all Ready=false by T+4.5 s: %+v", rep, shift, p.Status)
		}

		// Back to 200: each container is Ready after one success. (Other
		// containers' updates regenerate the status and trigger the
		// not-ready ones, M7c, so several runs may land at one instant;
		// the first success must make the container Ready at once.)
		failing.Store(false)
		runsBefore := len(e.allRuns())
		var readyAt [containers]time.Time
		back := e.clk.Now()
		e.advanceTo(back.Add(time.Second+S+time.Second), step, func() bool {
			invariant()
			p := e.pod(pod.UID)
			done := true
			for i, c := range p.Status.ContainerStatuses {
				if c.Ready && readyAt[i].IsZero() {
					readyAt[i] = e.clk.Now()
				}
				done = done && c.Ready
			}
			return !done
		})
		firstSuccess := map[string]runRec{}
		for _, r := range e.allRuns()[runsBefore:] {
			if _, seen := firstSuccess[r.ContainerName]; !seen && r.Result == runtime.Success {
				firstSuccess[r.ContainerName] = r
			}
		}
		for i, at := range readyAt {
			name := fmt.Sprintf("c%d", i+1)
			first, found := firstSuccess[name]
			if at.IsZero() || at.Sub(back) > time.Second+S {
				t.Fatalf("repetition %d: %s Ready again at +%v, want within 1.5 s of the servers' recovery", rep, name, at.Sub(back))
			}
			if !found || first.Cached != results.Success || !first.Start.Equal(at) {
				t.Fatalf("repetition %d: %s Ready at +%v; first success at +%v left the result %v, want Ready after one success",
					rep, name, at.Sub(back), first.Start.Sub(back), first.Cached)
			}
		}
		if !allReady(true) {
			t.Fatalf("repetition %d: pod not Ready again: %+v", rep, e.pod(pod.UID).Status.Conditions)
		}
	}
}
