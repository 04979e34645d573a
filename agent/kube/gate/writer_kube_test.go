package gate

// Tests of the writer against the real API server (the owned condition's
// patches, no False at SIGTERM, an API server that goes away); they skip
// without PROBED_TEST_KUBECONFIG.

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/probed/probed/agent/pods"
	"github.com/probed/probed/internal/kubetest"
	"github.com/probed/probed/manager/results"
	"github.com/probed/probed/runtime"
)

const otherGate v1.PodConditionType = "lb.example.com/registered"

// theirConditions are the conditions others own on the test pods: the
// kubelet's and another controller's gate. probed must leave them exactly
// as they are.
func theirConditions(at time.Time) []v1.PodCondition {
	ltt := metav1.NewTime(at.Add(-time.Hour).Truncate(time.Second))
	return []v1.PodCondition{
		{Type: v1.PodScheduled, Status: v1.ConditionTrue, LastTransitionTime: ltt},
		{Type: v1.PodInitialized, Status: v1.ConditionTrue, LastTransitionTime: ltt},
		{Type: v1.ContainersReady, Status: v1.ConditionTrue, LastTransitionTime: ltt},
		{Type: v1.PodReady, Status: v1.ConditionFalse, Reason: "ReadinessGatesNotReady", Message: "corresponding condition of pod readiness gate \"probed.io/ready\" does not exist.", LastTransitionTime: ltt},
		{Type: otherGate, Status: v1.ConditionTrue, Reason: "Registered", Message: "target registered", LastTransitionTime: ltt},
	}
}

// checkTheirs fails unless every condition but probed's is exactly one of want.
func checkTheirs(t *testing.T, conds []v1.PodCondition, want []v1.PodCondition) {
	t.Helper()
	var others []v1.PodCondition
	for _, c := range conds {
		if c.Type != DefaultConditionType {
			others = append(others, c)
		}
	}
	if len(others) != len(want) {
		t.Fatalf("conditions besides probed's: %+v, want %+v", others, want)
	}
	for i := range want {
		g, w := others[i], want[i]
		if g.Type != w.Type || g.Status != w.Status || g.Reason != w.Reason || g.Message != w.Message ||
			!g.LastTransitionTime.Equal(&w.LastTransitionTime) || !g.LastProbeTime.Equal(&w.LastProbeTime) {
			t.Errorf("condition %s changed:\n got %+v\nwant %+v", w.Type, g, w)
		}
	}
}

// The gate follows the probes: False, True, False, True; a message change
// without a flip is written and keeps lastTransitionTime; each change is one
// patch (the first step changes two results, and the gate may see each
// alone: one or two patches); the kubelet's conditions and another
// controller's gate condition stay exactly as they were.
func TestGateFollowsReadinessAndOwnsOnlyItsCondition(t *testing.T) {
	kube := kubetest.Client(t)
	ns := kubetest.Namespace(t)
	t0 := time.Now().Truncate(time.Second)
	clk := testingclock.NewFakeClock(t0)
	pod := createPod(t, kube, ns, podSpec{name: "web", gates: []v1.PodConditionType{DefaultConditionType, otherGate},
		probes: []string{probeJSON("app", "readiness"), probeJSON("side", "readiness")}})
	theirs := theirConditions(t0)
	pod = writeStatus(t, kube, pod, kubeletStatus(pod, t0, theirs...))
	e := startGate(t, kube, ns, Options{Clock: clk})
	e.waitTold(pod)
	if n := len(e.log.all()); n != 0 {
		t.Fatalf("%d patches before any result: the verdict is not known yet", n)
	}

	type step struct {
		app, side results.Result
		status    v1.ConditionStatus
		reason    string
		message   string
		flipped   bool
	}
	steps := []step{
		{results.Failure, results.Failure, v1.ConditionFalse, ReasonProbeFailed,
			"readiness probe of container app failed; readiness probe of container side failed", true},
		{results.Failure, results.Success, v1.ConditionFalse, ReasonProbeFailed, "readiness probe of container app failed", false},
		{results.Success, results.Success, v1.ConditionTrue, ReasonProbeSucceeded, MessageProbesSucceeded, true},
		{results.Failure, results.Success, v1.ConditionFalse, ReasonProbeFailed, "readiness probe of container app failed", true},
		{results.Success, results.Success, v1.ConditionTrue, ReasonProbeSucceeded, MessageProbesSucceeded, true},
	}
	lastFlip := metav1.NewTime(t0)
	patches := 0
	for i, s := range steps {
		if i > 0 {
			clk.Step(time.Minute) // lastTransitionTime has whole seconds
		}
		e.setReadiness(pod, "app", s.app)
		e.setReadiness(pod, "side", s.side)
		c := e.waitConditionMessage("web", s.status, s.reason, s.message)
		if s.flipped {
			lastFlip = metav1.NewTime(clk.Now())
		}
		if !c.LastTransitionTime.Equal(&lastFlip) {
			t.Errorf("step %d: lastTransitionTime %v, want %v (moves only when the status flips)", i, c.LastTransitionTime, lastFlip)
		}
		if !c.LastProbeTime.IsZero() {
			t.Errorf("step %d: lastProbeTime %v, want none", i, c.LastProbeTime)
		}
		_, conds := e.conditions("web")
		checkTheirs(t, conds, theirs)
		cur, _ := e.kube.CoreV1().Pods(ns).Get(context.Background(), "web", metav1.GetOptions{})
		e.waitTold(cur)
		n := len(e.log.accepted())
		most := 1
		if i == 0 {
			most = 2 // app's and side's first results, each a change of the verdict's message
		}
		if d := n - patches; d < 1 || d > most {
			t.Fatalf("step %d: %d patches accepted, want 1 to %d (one per change)", i, d, most)
		}
		patches = n
	}
}

// Nothing is written when nothing changes: the same result again, result
// changes that do not change the verdict (liveness, another pod), and the
// kubelet's own status writes.
func TestNoWriteWhenNothingChanges(t *testing.T) {
	kube := kubetest.Client(t)
	ns := kubetest.Namespace(t)
	now := time.Now()
	pod := createPod(t, kube, ns, podSpec{name: "web", gates: []v1.PodConditionType{DefaultConditionType},
		probes: []string{probeJSON("app", "readiness"), probeJSON("app", "liveness")}})
	theirs := theirConditions(now)
	pod = writeStatus(t, kube, pod, kubeletStatus(pod, now, theirs...))
	e := startGate(t, kube, ns, Options{})
	e.setReadiness(pod, "app", results.Success)
	e.waitCondition("web", v1.ConditionTrue, ReasonProbeSucceeded)
	cur, _ := kube.CoreV1().Pods(ns).Get(context.Background(), "web", metav1.GetOptions{})
	e.waitTold(cur)
	before := len(e.log.all())
	if before != 1 {
		t.Fatalf("%d patches to reach True, want 1", before)
	}

	e.setReadiness(pod, "app", results.Success) // no change: no update
	e.writer.ProbeResult(runtime.Readiness, results.Update{ContainerID: testContainerID(pod, "app"), Result: results.Success, PodUID: pod.UID})
	e.writer.ProbeResult(runtime.Liveness, results.Update{ContainerID: testContainerID(pod, "app"), Result: results.Failure, PodUID: pod.UID})
	e.writer.PodStatusChanged(&pods.Pod{Pod: cur})
	// The kubelet writes its status again: a restart count, Ready now True.
	st := kubeletStatus(pod, now, theirs...)
	st.ContainerStatuses[1].RestartCount = 1
	for i := range st.Conditions {
		if st.Conditions[i].Type == v1.PodReady {
			st.Conditions[i].Status, st.Conditions[i].Reason, st.Conditions[i].Message = v1.ConditionTrue, "", ""
		}
	}
	ours := e.waitCondition("web", v1.ConditionTrue, ReasonProbeSucceeded)
	st.Conditions = append(st.Conditions, ours) // the kubelet keeps conditions it does not own
	for range 3 {
		cur = writeStatus(t, kube, pod, st)
		e.waitTold(cur)
	}
	if n := len(e.log.all()); n != before {
		t.Errorf("%d patches after the verdict stayed the same, want %d", n, before)
	}
}

// A pod without the gate is probed but never patched.
func TestPodWithoutGateIsNeverPatched(t *testing.T) {
	kube := kubetest.Client(t)
	ns := kubetest.Namespace(t)
	now := time.Now()
	plain := createPod(t, kube, ns, podSpec{name: "plain", probes: []string{probeJSON("app", "readiness")}})
	plain = writeStatus(t, kube, plain, kubeletStatus(plain, now))
	gated := createPod(t, kube, ns, podSpec{name: "gated", gates: []v1.PodConditionType{DefaultConditionType},
		probes: []string{probeJSON("app", "readiness")}})
	gated = writeStatus(t, kube, gated, kubeletStatus(gated, now))
	e := startGate(t, kube, ns, Options{})
	for _, r := range []results.Result{results.Failure, results.Success, results.Failure} {
		e.setReadiness(plain, "app", r)
		e.setReadiness(gated, "app", r)
		want, reason := v1.ConditionTrue, ReasonProbeSucceeded
		if r == results.Failure {
			want, reason = v1.ConditionFalse, ReasonProbeFailed
		}
		e.waitCondition("gated", want, reason)
	}
	e.waitTold(plain)
	if n := e.log.count("plain"); n != 0 {
		t.Errorf("%d patches to the pod without the gate, want 0", n)
	}
	if _, conds := e.conditions("plain"); len(conds) != 0 {
		t.Errorf("the pod without the gate has conditions %+v", conds)
	}
}

// The UID is a precondition: a write meant for a pod that was deleted and
// recreated under its name fails and is not retried; the new pod is left
// alone.
func TestWriteForARecreatedPodFailsAndIsNotRetried(t *testing.T) {
	kube := kubetest.Client(t)
	ns := kubetest.Namespace(t)
	now := time.Now()
	spec := podSpec{name: "web", gates: []v1.PodConditionType{DefaultConditionType}, probes: []string{probeJSON("app", "readiness")}}
	old := createPod(t, kube, ns, spec)
	old = writeStatus(t, kube, old, kubeletStatus(old, now))
	// The informer lags: the writer still holds the old pod.
	var mu sync.Mutex
	held := map[types.UID]*v1.Pod{old.UID: old}
	lookup := PodLookupFunc(func(uid types.UID) (*v1.Pod, bool) {
		mu.Lock()
		defer mu.Unlock()
		p, ok := held[uid]
		return p, ok
	})
	reg := prometheus.NewRegistry()
	e := startGate(t, kube, ns, Options{Pods: lookup, Registerer: reg, RetryBaseDelay: 10 * time.Millisecond})

	zero := int64(0)
	if err := kube.CoreV1().Pods(ns).Delete(context.Background(), "web", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	recreated := createPod(t, kube, ns, spec)
	if recreated.UID == old.UID {
		t.Fatal("the recreated pod has the old UID")
	}
	recreated = writeStatus(t, kube, recreated, kubeletStatus(recreated, now))

	e.setReadiness(old, "app", results.Failure) // the old pod's verdict: False
	eventually(t, 30*time.Second, func() error {
		if len(e.log.all()) == 0 || e.writer.WritesPending() > 0 {
			return fmt.Errorf("%d patches, %d writes pending", len(e.log.all()), e.writer.WritesPending())
		}
		return nil
	})
	// Long enough for several retries of the 10 ms backoff, were there any.
	time.Sleep(500 * time.Millisecond)
	all := e.log.all()
	if len(all) != 1 {
		t.Fatalf("%d patches, want exactly 1 (refused, not retried): %+v", len(all), all)
	}
	if c := all[0].Code; c != 409 && c != 422 {
		t.Errorf("the stale write got HTTP %d, want 409 Conflict or 422 Invalid", c)
	} else {
		t.Logf("the stale write got HTTP %d", c)
	}
	uid, conds := e.conditions("web")
	if uid != recreated.UID {
		t.Fatalf("pod web has UID %s, want the recreated %s", uid, recreated.UID)
	}
	for _, c := range conds {
		if c.Type == DefaultConditionType {
			t.Errorf("the recreated pod got the old pod's condition %+v", c)
		}
	}
	reason := "Conflict"
	if all[0].Code == 422 {
		reason = "Invalid"
	}
	if got := testutil.ToFloat64(e.writer.metrics.failures.WithLabelValues(reason)); got != 1 {
		t.Errorf("probed_readiness_gate_patch_failures_total{reason=%q} = %v, want 1", reason, got)
	}
}

// 500 gated pods flipping at once are written within the bucket — in no
// window of the run more patches than burst + qps × its length — each once,
// and all converge; then all flip back.
func TestMassFlipIsWrittenWithinTheRate(t *testing.T) {
	if testing.Short() {
		t.Skip("500 pods: not with -short")
	}
	const n, qps, burst = 500, 100, 20
	kube := kubetest.Client(t)
	ns := kubetest.Namespace(t)
	now := time.Now()
	created := make([]*v1.Pod, n)
	parallel(t, n, func(i int) {
		p := createPod(t, kube, ns, podSpec{name: fmt.Sprintf("web-%03d", i), gates: []v1.PodConditionType{DefaultConditionType},
			probes: []string{probeJSON("app", "readiness")}})
		created[i] = writeStatus(t, kube, p, kubeletStatus(p, now))
	})
	e := startGate(t, kube, ns, Options{QPS: qps, Burst: burst})
	e.waitTold(created...)

	for round, r := range []results.Result{results.Failure, results.Success} {
		start := time.Now()
		before := len(e.log.all())
		for _, p := range created {
			e.setReadiness(p, "app", r)
		}
		want := v1.ConditionFalse
		if r == results.Success {
			want = v1.ConditionTrue
		}
		eventuallyEvery(t, 60*time.Second, 250*time.Millisecond, func() error {
			list, err := kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
			if err != nil {
				return err
			}
			done := 0
			for i := range list.Items {
				if c, ok := findCondition(&list.Items[i], DefaultConditionType); ok && c.Status == want {
					done++
				}
			}
			if done != n {
				return fmt.Errorf("round %d: %d of %d pods converged", round, done, n)
			}
			return nil
		})
		elapsed := time.Since(start)
		patches := e.log.all()[before:]
		if len(patches) != n {
			t.Errorf("round %d: %d patches, want %d (one per pod)", round, len(patches), n)
		}
		checkRate(t, patches, qps, burst, DefaultWorkers)
		if min := time.Duration(float64(n-burst) / qps * float64(time.Second)); elapsed < min*9/10 {
			t.Errorf("round %d: %d pods written in %v, faster than the bucket allows (%v)", round, n, elapsed, min)
		}
		t.Logf("round %d: %d patches in %v (bucket %d/s, burst %d)", round, len(patches), elapsed, qps, burst)
		var cur []*v1.Pod
		for _, p := range created {
			if got, ok := e.writer.opts.Pods.Pod(p.UID); ok {
				cur = append(cur, got)
			}
		}
		e.waitTold(cur...)
	}
}

// checkRate fails when some window of the patches' start times holds more
// than burst + qps × its length (+ the workers' jitter: a token is taken
// before the request starts).
func checkRate(t *testing.T, patches []kubetest.Request, qps float64, burst, workers int) {
	t.Helper()
	times := make([]time.Time, len(patches))
	for i, p := range patches {
		times[i] = p.At
	}
	sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
	for i := range times {
		for j := i; j < len(times); j++ {
			window := times[j].Sub(times[i]).Seconds()
			if count := j - i + 1; float64(count) > float64(burst+workers)+qps*window {
				t.Errorf("%d patches in %.3fs: more than burst %d + %v/s", count, window, burst, qps)
				return
			}
		}
	}
}

// parallel runs f(0..n-1) on 8 goroutines.
func parallel(t *testing.T, n int, f func(i int)) {
	t.Helper()
	var wg sync.WaitGroup
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				f(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

// A new writer (probed restarted, a DaemonSet rollout) over pods whose
// containers run since before it started and that already carry probed's
// condition writes nothing until its first verdicts (W6c, M8, M9): True
// stays True, False stays False. Then the first verdicts are written; a new
// gated pod without a condition gets False from its readiness probe's
// initial Failure (W1).
func TestRestartKeepsConditionsUntilTheFirstVerdict(t *testing.T) {
	kube := kubetest.Client(t)
	ns := kubetest.Namespace(t)
	now := time.Now()
	longAgo := now.Add(-time.Hour)
	previous := func(status v1.ConditionStatus, reason, message string) v1.PodCondition {
		return v1.PodCondition{Type: DefaultConditionType, Status: status, Reason: reason, Message: message,
			LastTransitionTime: metav1.NewTime(longAgo.Truncate(time.Second))}
	}
	spec := func(name string) podSpec {
		return podSpec{name: name, gates: []v1.PodConditionType{DefaultConditionType},
			probes: []string{probeJSON("app", "startup"), probeJSON("app", "readiness")}}
	}
	var ready, notReady []*v1.Pod
	for i := range 10 {
		p := createPod(t, kube, ns, spec(fmt.Sprintf("ready-%d", i)))
		ready = append(ready, writeStatus(t, kube, p, kubeletStatus(p, longAgo,
			previous(v1.ConditionTrue, ReasonProbeSucceeded, MessageProbesSucceeded))))
	}
	for i := range 3 {
		p := createPod(t, kube, ns, spec(fmt.Sprintf("not-ready-%d", i)))
		notReady = append(notReady, writeStatus(t, kube, p, kubeletStatus(p, longAgo,
			previous(v1.ConditionFalse, ReasonProbeFailed, "readiness probe of container app failed"))))
	}
	e := startGate(t, kube, ns, Options{ProberStart: now})
	e.waitTold(append(append([]*v1.Pod(nil), ready...), notReady...)...)
	if n := len(e.log.all()); n != 0 {
		t.Fatalf("a restarted writer sent %d patches before any verdict, want 0", n)
	}
	for _, p := range append(append([]*v1.Pod(nil), ready...), notReady...) {
		_, conds := e.conditions(p.Name)
		c, _ := findCondition(&v1.Pod{Status: v1.PodStatus{Conditions: conds}}, DefaultConditionType)
		if !c.LastTransitionTime.Equal(&metav1.Time{Time: longAgo.Truncate(time.Second)}) {
			t.Errorf("pod %s: condition %+v changed across the restart", p.Name, c)
		}
	}

	// First verdicts: a ready pod stays ready (no write; the startup probe
	// has no result, the container survived the restart and is started,
	// M8), one turns not ready, a not-ready pod turns ready.
	e.setReadiness(ready[0], "app", results.Success)
	e.setReadiness(ready[1], "app", results.Failure)
	e.setReadiness(notReady[0], "app", results.Success)
	e.waitCondition(ready[1].Name, v1.ConditionFalse, ReasonProbeFailed)
	e.waitCondition(notReady[0].Name, v1.ConditionTrue, ReasonProbeSucceeded)
	// A new pod: its container starts now; the workers' initial values
	// (startup Unknown, readiness Failure, W1) make it False.
	fresh := createPod(t, kube, ns, spec("fresh"))
	fresh = writeStatus(t, kube, fresh, kubeletStatus(fresh, time.Now()))
	e.startup.Set(testContainerID(fresh, "app"), results.Unknown, fresh)
	e.setReadiness(fresh, "app", results.Failure)
	// The gate may see the pod before its status is written and write
	// "container app is not running" first (same status and reason): wait
	// for the startup probe's message.
	e.waitConditionMessage("fresh", v1.ConditionFalse, ReasonContainerNotStarted, "startup probe of container app has not succeeded")
	var cur []*v1.Pod
	for _, p := range []*v1.Pod{ready[0], ready[1], notReady[0], fresh} {
		got, _ := e.writer.opts.Pods.Pod(p.UID)
		cur = append(cur, got)
	}
	e.waitTold(cur...)
	if got := e.log.count(ready[0].Name); got != 0 {
		t.Errorf("%d patches to a ready pod whose first verdict is True, want 0", got)
	}
	if n := e.log.count(ready[1].Name) + e.log.count(notReady[0].Name); n != 2 {
		t.Errorf("%d patches for the two flipped pods, want 2", n)
	}
	// The fresh pod is written while it has no container status yet
	// (container not running) and again with its startup probe's message.
	if n := len(e.log.all()) - 2 - e.log.count("fresh"); n != 0 {
		t.Errorf("%d patches to pods without a first verdict, want 0", n)
	}
}

// The API server goes away (every request of the writer's client fails):
// verdicts flip several times meanwhile; retries back off and coalesce per
// pod; when it is back, every pod's condition equals its latest verdict,
// with one write per pod whose condition differs.
func TestOutageLosesNothing(t *testing.T) {
	const n = 40
	kube := kubetest.Client(t)
	ns := kubetest.Namespace(t)
	now := time.Now()
	created := make([]*v1.Pod, n)
	parallel(t, n, func(i int) {
		p := createPod(t, kube, ns, podSpec{name: fmt.Sprintf("web-%02d", i), gates: []v1.PodConditionType{DefaultConditionType},
			probes: []string{probeJSON("app", "readiness")}})
		created[i] = writeStatus(t, kube, p, kubeletStatus(p, now))
	})
	reg := prometheus.NewRegistry()
	e := startGate(t, kube, ns, Options{QPS: 200, Burst: 50, RetryBaseDelay: 20 * time.Millisecond, RetryMaxDelay: time.Second, Registerer: reg})
	for _, p := range created {
		e.setReadiness(p, "app", results.Success)
	}
	for _, p := range created {
		e.waitCondition(p.Name, v1.ConditionTrue, ReasonProbeSucceeded)
	}
	accepted := len(e.log.accepted())

	e.log.SetDown(true)
	final := map[string]results.Result{}
	for round, r := range []results.Result{results.Failure, results.Success, results.Failure} {
		for i, p := range created {
			// Round 0: all fail; round 1: all succeed again; round 2: every third fails.
			if round == 2 && i%3 != 0 {
				continue
			}
			e.setReadiness(p, "app", r)
			final[p.Name] = r
		}
		time.Sleep(300 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // backoff reaches its cap
	if got := len(e.log.accepted()); got != accepted {
		t.Fatalf("%d patches accepted during the outage", got-accepted)
	}
	if p := e.writer.WritesPending(); p == 0 {
		t.Error("no writes pending during the outage")
	}
	refused := len(e.log.all()) - accepted
	if testutil.ToFloat64(e.writer.metrics.failures.WithLabelValues("Transport")) == 0 {
		t.Error("no failures counted with reason Transport")
	}

	e.log.SetDown(false)
	wantFalse := 0
	for _, p := range created {
		if final[p.Name] == results.Failure {
			wantFalse++
			e.waitCondition(p.Name, v1.ConditionFalse, ReasonProbeFailed)
		} else {
			e.waitCondition(p.Name, v1.ConditionTrue, ReasonProbeSucceeded)
		}
	}
	var cur []*v1.Pod
	for _, p := range created {
		got, _ := e.writer.opts.Pods.Pod(p.UID)
		cur = append(cur, got)
	}
	e.waitTold(cur...)
	if got := len(e.log.accepted()) - accepted; got != wantFalse {
		t.Errorf("%d patches after the outage, want %d: one per pod whose condition differs", got, wantFalse)
	}
	if got := testutil.ToFloat64(e.writer.metrics.patches); int(got) != len(e.log.accepted()) {
		t.Errorf("probed_readiness_gate_patches_total = %v, want %d", got, len(e.log.accepted()))
	}
	t.Logf("outage: %d attempts refused for %d pods, %d flips each; %d patches after", refused, n, 3, wantFalse)
}

// On SIGTERM (Run's context ends) the writer sends nothing new: writes
// waiting for a token are dropped, and a change after the end is ignored.
func TestStopWritesNothing(t *testing.T) {
	const n = 20
	kube := kubetest.Client(t)
	ns := kubetest.Namespace(t)
	now := time.Now()
	created := make([]*v1.Pod, n)
	parallel(t, n, func(i int) {
		p := createPod(t, kube, ns, podSpec{name: fmt.Sprintf("web-%02d", i), gates: []v1.PodConditionType{DefaultConditionType},
			probes: []string{probeJSON("app", "readiness")}})
		created[i] = writeStatus(t, kube, p, kubeletStatus(p, now,
			v1.PodCondition{Type: DefaultConditionType, Status: v1.ConditionTrue, Reason: ReasonProbeSucceeded,
				Message: MessageProbesSucceeded, LastTransitionTime: metav1.NewTime(now.Truncate(time.Second))}))
	})
	e := startGate(t, kube, ns, Options{QPS: 1, Burst: 1, Workers: 1})
	e.waitTold(created...)
	for _, p := range created {
		e.setReadiness(p, "app", results.Failure)
	}
	eventually(t, 30*time.Second, func() error {
		if len(e.log.all()) == 0 {
			return fmt.Errorf("no patch yet")
		}
		return nil
	})
	stopped := time.Now()
	e.stop()
	if d := time.Since(stopped); d > 5*time.Second {
		t.Errorf("Run took %v to return: it waited for tokens", d)
	}
	sent := len(e.log.all())
	if sent > 2 {
		t.Errorf("%d patches at the 1/s bucket before the stop, want 1 or 2", sent)
	}
	e.writer.ProbeResult(runtime.Readiness, results.Update{ContainerID: testContainerID(created[n-1], "app"), Result: results.Failure, PodUID: created[n-1].UID})
	e.writer.PodStatusChanged(&pods.Pod{Pod: created[n-1]})
	time.Sleep(300 * time.Millisecond)
	if got := len(e.log.all()); got != sent {
		t.Errorf("%d patches after the stop", got-sent)
	}
	falseCount := 0
	for _, p := range created {
		_, conds := e.conditions(p.Name)
		if c, _ := findCondition(&v1.Pod{Status: v1.PodStatus{Conditions: conds}}, DefaultConditionType); c.Status == v1.ConditionFalse {
			falseCount++
		}
	}
	// A write in flight at the stop may have been cancelled.
	if accepted := len(e.log.accepted()); falseCount < accepted || falseCount > sent {
		t.Errorf("%d pods False, want %d to %d (only the writes sent before the stop)", falseCount, accepted, sent)
	}
}
