package cases

import (
	"net/http"
	"sort"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/probed/probed/runtime"
)

// firstRun returns the start of the first executed run of a pod's
// container probe type, and whether there was one.
func (e *env) firstRun(pod *v1.Pod, container string, pt runtime.ProbeType) (time.Time, bool) {
	for _, r := range e.allRuns() {
		if r.PodUID == pod.UID && r.ContainerName == container && r.ProbeType == pt {
			return r.Start, true
		}
	}
	return time.Time{}, false
}

// BR-11 run A: the prober has run for more than a period when the pod is
// added: no attempt before initialDelaySeconds (10 s), the first attempt of
// each probe in [10 s, 11 s], Ready within 1 s of the first readiness
// attempt.
func TestBR11_RunA_FirstProbeRightAfterInitialDelay(t *testing.T) {
	e := newEnv(t, withAge(301*time.Second))
	pod := e.add(newPod("br11a", v1.Container{Name: "app",
		ReadinessProbe: timing(execProbe("true"), 10, 300, 0, 0, 0),
		LivenessProbe:  timing(execProbe("true"), 10, 300, 0, 0, 0),
	}))
	t0 := e.clk.Now() // container start
	var readyAt time.Time
	e.advanceTo(t0.Add(15*time.Second), 50*time.Millisecond, func() bool {
		if readyAt.IsZero() && e.container(pod.UID, "app").Ready {
			readyAt = e.clk.Now()
		}
		return true
	})
	for _, r := range e.allRuns() {
		if d := since(r.Start, t0); d < 10*time.Second {
			t.Errorf("%v attempt at t=%v, before the initial delay", r.ProbeType, d)
		}
	}
	for _, pt := range []runtime.ProbeType{runtime.Readiness, runtime.Liveness} {
		first, ok := e.firstRun(pod, "app", pt)
		if !ok {
			t.Fatalf("no %v attempt within 15 s", pt)
		}
		if d := since(first, t0); d < 10*time.Second || d > 11*time.Second {
			t.Errorf("first %v attempt at t=%v, want within [10 s, 11 s]", pt, d)
		}
	}
	first, _ := e.firstRun(pod, "app", runtime.Readiness)
	if readyAt.IsZero() || readyAt.Sub(first) > time.Second {
		t.Errorf("Ready at t=%v, want within 1 s of the first readiness attempt (t=%v)", since(readyAt, t0), since(first, t0))
	}
}

// BR-11 run B: the pods run before the prober starts. The first attempts
// are spread over one period after the prober's start (restart jitter),
// none is before initialDelaySeconds, and each is at most initialDelay +
// period after its container's start (upstream's guarantee).
func TestBR11_RunB_FirstProbesSpreadAfterProberStart(t *testing.T) {
	e := newEnv(t)
	const n = 20
	var pods []*v1.Pod
	starts := map[string]time.Time{}
	for i := 0; i < n; i++ {
		// Half started 5 s before the prober (their initial delay ends 5 s
		// after it), half an hour before.
		startedAt := e.start.Add(-5 * time.Second)
		if i%2 == 1 {
			startedAt = e.start.Add(-time.Hour)
		}
		p := newPod("br11b-"+itoa(i), v1.Container{Name: "app",
			ReadinessProbe: timing(execProbe("true"), 10, 300, 0, 0, 0),
			LivenessProbe:  timing(execProbe("true"), 10, 300, 0, 0, 0),
		})
		p.Status.ContainerStatuses = []v1.ContainerStatus{{Name: "app",
			State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(startedAt)}}}}
		pods = append(pods, e.addNoSettle(p))
		starts[string(p.UID)] = startedAt
	}
	e.settle()
	e.advance(320*time.Second, 500*time.Millisecond)

	var firsts []time.Duration // since the prober's start
	for _, p := range pods {
		for _, pt := range []runtime.ProbeType{runtime.Readiness, runtime.Liveness} {
			first, ok := e.firstRun(p, "app", pt)
			if !ok {
				t.Fatalf("%s: no %v attempt within 320 s", p.Name, pt)
			}
			started := starts[string(p.UID)]
			if d := first.Sub(started); d < 10*time.Second {
				t.Errorf("%s %v: first attempt %v after the container started, before the initial delay", p.Name, pt, d)
			}
			// Upstream's bound is initialDelay + period after the
			// container's start; for a container that started long
			// before the prober, one period after the prober's start.
			if first.Sub(started) > 310*time.Second+500*time.Millisecond && since(first, e.start) > 300*time.Second+500*time.Millisecond {
				t.Errorf("%s %v: first attempt at %v after the prober's start, later than one period (and than initialDelay + period)", p.Name, pt, since(first, e.start))
			}
			firsts = append(firsts, since(first, e.start))
		}
	}
	sort.Slice(firsts, func(i, j int) bool { return firsts[i] < firsts[j] })
	if span := firsts[len(firsts)-1] - firsts[0]; span < 150*time.Second {
		t.Errorf("first attempts span %v, want them spread over the 300 s period: %v", span, fmtDurs(firsts))
	}
	buckets := map[int]int{}
	for _, d := range firsts {
		buckets[int(d/(30*time.Second))]++
	}
	for b, c := range buckets {
		if c > 4*len(firsts)/10 {
			t.Errorf("%d of %d first attempts within [%d s, %d s): not spread: %v", c, len(firsts), b*30, b*30+30, fmtDurs(firsts))
		}
	}
}

// BR-12 (A): a startup probe only: Started and Ready no later than 1 s
// after the first successful startup attempt.
func TestBR12_A_ReadyRightAfterStartup(t *testing.T) {
	e := newEnv(t)
	pod := e.add(newPod("br12a", v1.Container{Name: "app",
		StartupProbe: timing(execProbe("true"), 0, 10, 0, 0, 3)}))
	var seen time.Time
	e.advance(0, time.Second)
	e.advanceTo(e.clk.Now().Add(12*time.Second), 100*time.Millisecond, func() bool {
		cs := e.container(pod.UID, "app")
		if started(cs) && cs.Ready && seen.IsZero() {
			seen = e.clk.Now()
		}
		if len(e.runsOf("app", runtime.Startup)) == 0 && (started(cs) || cs.Ready) {
			t.Fatalf("Started=%v Ready=%v before any startup attempt", started(cs), cs.Ready)
		}
		return true
	})
	runs := e.runsOf("app", runtime.Startup)
	if len(runs) == 0 || runs[0].Result != runtime.Success {
		t.Fatalf("startup runs %+v, want a first Success", runs)
	}
	if seen.IsZero() || seen.Sub(runs[0].Start) > time.Second {
		t.Fatalf("Started and Ready at t=%v, want within 1 s of the successful startup attempt at t=%v",
			since(seen, e.start), since(runs[0].Start, e.start))
	}
	if p := e.pod(pod.UID); condition(p, v1.PodReady) != v1.ConditionTrue || condition(p, v1.ContainersReady) != v1.ConditionTrue {
		t.Errorf("pod conditions %+v, want Ready and ContainersReady True", p.Status.Conditions)
	}
}

// BR-12 (B): startup plus a slow readiness probe: no /ready request while
// Started=false; /ready within 1 s after Started turns true (not up to 60 s
// later); Ready within 1 s of that success; then /ready every 60 s.
func TestBR12_B_ReadinessTriggeredByStartup(t *testing.T) {
	// The pod starts on a node whose prober runs for longer than the
	// readiness period. (Within one period of the prober's start, a
	// readiness worker's first run waits for its spread phase, as the
	// kubelet's start jitter does; BR-11, BR-24.)
	e := newEnv(t, withAge(61*time.Second))
	var t0 time.Time
	srv := startServer(t, e.clk, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/started" && e.clk.Since(t0) < 6*time.Second {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	t0 = e.clk.Now()
	pod := e.add(newPod("br12b", v1.Container{Name: "app",
		StartupProbe:   timing(httpProbe("/started", srv.Port), 0, 2, 0, 0, 30),
		ReadinessProbe: timing(httpProbe("/ready", srv.Port), 0, 60, 0, 0, 0),
	}))
	var startedAt, readyAt time.Time
	e.advanceTo(t0.Add(200*time.Second), 100*time.Millisecond, func() bool {
		cs := e.container(pod.UID, "app")
		if started(cs) && startedAt.IsZero() {
			startedAt = e.clk.Now()
		}
		if cs.Ready && readyAt.IsZero() {
			readyAt = e.clk.Now()
		}
		return true
	})
	if startedAt.IsZero() {
		t.Fatalf("never started")
	}
	if d := since(startedAt, t0); d < 6*time.Second || d > 8*time.Second+S {
		t.Errorf("Started at t=%v, want at the first /started success after 6 s", d)
	}
	ready := srv.requests("/ready")
	if len(ready) == 0 {
		t.Fatalf("no /ready request")
	}
	for _, r := range ready {
		if r.At.Before(startedAt) {
			t.Errorf("/ready requested at t=%v while Started=false (started at t=%v)", since(r.At, t0), since(startedAt, t0))
		}
	}
	if d := ready[0].At.Sub(startedAt); d > time.Second {
		t.Errorf("first /ready %v after Started turned true, want within 1 s", d)
	}
	if readyAt.IsZero() || readyAt.Sub(ready[0].At) > time.Second {
		t.Errorf("Ready at t=%v, want within 1 s of the first /ready (t=%v)", since(readyAt, t0), since(ready[0].At, t0))
	}
	// The readiness worker writes its initial Failure on its first run,
	// which is the triggered one here; that update's status generation
	// triggers once more (M7c, as upstream when a run is in flight): one or
	// two requests at the instant Started turns true, then one every 60 s.
	var instants []time.Time
	for _, r := range ready {
		if len(instants) == 0 || !r.At.Equal(instants[len(instants)-1]) {
			instants = append(instants, r.At)
		}
	}
	if n := len(ready) - len(instants); n > 1 || n == 1 && !ready[1].At.Equal(ready[0].At) {
		t.Errorf("/ready requested %d times at %d instants, want one per instant but the first", len(ready), len(instants))
	}
	if len(instants) != 4 {
		t.Errorf("/ready requested at %d instants in 200 s, want 4 (once Started, then every 60 s)", len(instants))
	}
	for i := 1; i < len(instants); i++ {
		if d := instants[i].Sub(instants[i-1]); d < 60*time.Second-100*time.Millisecond || d > 60*time.Second+100*time.Millisecond {
			t.Errorf("/ready interval %v, want 60 s", d)
		}
	}
	// The startup probe is done after its success (held, W13).
	started := srv.requests("/started")
	if last := started[len(started)-1]; last.At.After(startedAt) {
		t.Errorf("/started requested at t=%v after Started", since(last.At, t0))
	}
}

// BR-13: after a liveness restart the new container gets the full
// initialDelay and failureThreshold again.
func TestBR13_FailureCountPerInstance(t *testing.T) {
	e := newEnv(t)
	srv := startServer(t, e.clk, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
	})
	pod := e.add(newPod("br13", v1.Container{Name: "app",
		LivenessProbe: timing(httpProbe("/healthz", srv.Port), 3, 3, 1, 0, 5)}))
	t0 := e.clk.Now()
	id1 := e.container(pod.UID, "app").ContainerID
	e.advance(45*time.Second, 100*time.Millisecond)

	rs := e.restartList()
	if len(rs) < 2 {
		t.Fatalf("%d restarts in 45 s, want 2", len(rs))
	}
	r1, r2 := rs[0], rs[1]
	if r1.OldContainerID != id1 || r2.OldContainerID != r1.NewContainerID {
		t.Fatalf("restarts %+v / %+v do not follow the container IDs", r1.Restart, r2.Restart)
	}
	// Instance 1: the restart at the 5th consecutive failure, t ∈ [15, 18+S].
	if d := since(r1.At, t0); d < 15*time.Second || d > 18*time.Second+S {
		t.Errorf("instance 1 restarted at t=%v, want within [15 s, 18.5 s]", d)
	}
	perID := map[string][]runRec{}
	for _, r := range e.runsOf("app", runtime.Liveness) {
		perID[r.ContainerID] = append(perID[r.ContainerID], r)
		if r.Result != runtime.Failure || r.Err != nil {
			t.Fatalf("attempt at t=%v: %v %v, want Failure", since(r.Start, t0), r.Result, r.Err)
		}
	}
	for i, inst := range []struct {
		id       string
		start    time.Time
		restart  time.Time
		nextFrom time.Time
	}{
		{id1, t0, r1.At, r1.At},
		{r1.NewContainerID, r1.At, r2.At, r2.At},
	} {
		runs := perID[inst.id]
		if len(runs) != 5 {
			t.Errorf("instance %d: %d attempts, want exactly 5 before its restart", i+1, len(runs))
			continue
		}
		if d := runs[0].Start.Sub(inst.start); d < 3*time.Second {
			t.Errorf("instance %d: first attempt %v after its start, before the 3 s initial delay", i+1, d)
		}
		if !runs[4].Start.Equal(inst.restart) {
			t.Errorf("instance %d: restart at %v, want at the 5th failure (%v)", i+1, inst.restart, runs[4].Start)
		}
	}
	if d := r2.At.Sub(r1.At); d < 15*time.Second {
		t.Errorf("instance 2 restarted %v after it started, want at least 15 s", d)
	}
	// No attempt between a restart decision and the new container ID: every
	// attempt after a restart is on a newer instance.
	for _, r := range e.runsOf("app", runtime.Liveness) {
		if r.Start.After(r1.At) && r.ContainerID == id1 || r.Start.After(r2.At) && r.ContainerID == r1.NewContainerID {
			t.Errorf("attempt at t=%v on the restarted container %s", since(r.Start, t0), r.ContainerID)
		}
	}
	if n := len(srv.requests("/healthz")); n != len(e.runsOf("app", runtime.Liveness)) {
		t.Errorf("%d requests for %d attempts", n, len(e.runsOf("app", runtime.Liveness)))
	}
}

// BR-13 sub-variant: readiness successThreshold 3. The container crashes
// by itself after becoming Ready and is restarted: the new instance starts
// NotReady and needs 3 consecutive successes of its own.
func TestBR13_ReadinessSuccessThresholdPerInstance(t *testing.T) {
	e := newEnv(t, withAge(10*time.Second))
	srv := startServer(t, e.clk, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	pod := e.add(newPod("br13s", v1.Container{Name: "app",
		ReadinessProbe: timing(httpProbe("/ready", srv.Port), 0, 1, 0, 3, 0)}))
	e.advanceTo(e.clk.Now().Add(10*time.Second), 100*time.Millisecond, func() bool {
		return !e.container(pod.UID, "app").Ready
	})
	cs := e.container(pod.UID, "app")
	if !cs.Ready {
		t.Fatalf("never Ready")
	}
	e.advance(5*time.Second, 100*time.Millisecond) // a long success run

	// The container exits 1 ... (reported as a runtime reports it: state,
	// IDs and counts, no Started/Ready, which the prober computes).
	crashed := e.pod(pod.UID)
	now := metav1.NewTime(e.clk.Now())
	st := &crashed.Status.ContainerStatuses[0]
	st.Started, st.Ready = nil, false
	st.State = v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 1, Reason: "Error",
		StartedAt: st.State.Running.StartedAt, FinishedAt: now, ContainerID: st.ContainerID}}
	e.store.Put(crashed)
	e.settle()
	if cs := e.container(pod.UID, "app"); cs.Ready {
		t.Fatalf("Ready = true for the terminated container")
	}
	e.advance(time.Second, 100*time.Millisecond)

	// ... and is restarted with a new ID.
	restarted := e.pod(pod.UID)
	st = &restarted.Status.ContainerStatuses[0]
	st.LastTerminationState = st.State
	st.State = v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(e.clk.Now())}}
	st.ContainerID = "probed://br13s-second-instance"
	st.Started, st.Ready = nil, false
	st.RestartCount = 1
	e.store.Put(restarted)
	e.settle()
	check := func() bool {
		runs := 0
		for _, r := range e.runsOf("app", runtime.Readiness) {
			if r.ContainerID == st.ContainerID {
				if r.Result != runtime.Success {
					t.Fatalf("readiness attempt of the new instance: %v", r.Result)
				}
				runs++
			}
		}
		cs := e.container(pod.UID, "app")
		if cs.ContainerID != st.ContainerID {
			t.Fatalf("container ID %s, want %s", cs.ContainerID, st.ContainerID)
		}
		if runs < 3 && cs.Ready {
			t.Fatalf("Ready after %d success(es) of the new instance, want 3", runs)
		}
		if runs >= 3 && !cs.Ready {
			t.Fatalf("not Ready after %d successes of the new instance", runs)
		}
		return runs < 3
	}
	check()
	e.advanceTo(e.clk.Now().Add(10*time.Second), 100*time.Millisecond, check)
	if !e.container(pod.UID, "app").Ready {
		t.Fatalf("the new instance never became Ready")
	}
}
