package manager

import (
	"context"
	"fmt"
	"math/rand/v2"
	goruntime "runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/probed/probed/manager/results"
)

// churnOps is the number of AddPod/RemovePod/CleanupPods operations of
// TestChurn: 1,000,000 normally, fewer under the race detector (CI runs
// both: `make test` with -race, and the plain run in .ci/run).
func churnOps() int {
	if raceEnabled || testing.Short() {
		return 20_000
	}
	return 1_000_000
}

// Churn (issue #5): a million AddPod / RemovePod / CleanupPods operations in
// random order, with probes in flight, leave goroutines, heap, workers,
// metric series and results caches at their baseline; no panic, no deadlock.
func TestChurn(t *testing.T) {
	e := newTestEnv(t)
	const nPods = 500
	pods := make([]*v1.Pod, nPods)
	for i := range pods {
		uid := types.UID(fmt.Sprintf("churn-%d", i))
		c := v1.Container{Name: "c", ReadinessProbe: execProbe(), LivenessProbe: execProbe(), StartupProbe: execProbe()}
		pods[i] = podWith(uid, c)
		st := v1.PodStatus{Phase: v1.PodRunning, PodIP: "127.0.0.1", ContainerStatuses: []v1.ContainerStatus{{
			Name: "c", ContainerID: "test://" + string(uid),
			State:   v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(fakeNow)}},
			Started: ptr(true),
		}}}
		e.status.set(uid, st)
	}

	goruntime.GC()
	var before goruntime.MemStats
	goruntime.ReadMemStats(&before)
	baseGoroutines := goruntime.NumGoroutine()

	rng := rand.New(rand.NewPCG(1, 2))
	ctx := context.Background()
	ops := churnOps()
	for i := 0; i < ops; i++ {
		pod := pods[rng.IntN(nPods)]
		switch r := rng.IntN(100); {
		case r < 55:
			e.m.AddPod(ctx, pod)
		case r < 95:
			e.m.RemovePod(pod)
		case r < 98:
			e.m.StopLivenessAndStartup(pod)
		default:
			keep := map[types.UID]sets.Empty{}
			for j := 0; j < nPods/2; j++ {
				keep[pods[rng.IntN(nPods)].UID] = sets.Empty{}
			}
			e.m.CleanupPods(keep)
		}
		if i%1000 == 0 {
			// Let the wheel fire: probes run (and stops are processed)
			// while the churn goes on.
			e.clk.Step(time.Second)
		}
	}
	e.m.CleanupPods(nil)
	deadline := time.Now().Add(30 * time.Second)
	for e.m.workerCount() != 0 || !e.m.sched.Idle() {
		if time.Now().After(deadline) {
			t.Fatalf("after CleanupPods(nil): %d workers, scheduler %+v", e.m.workerCount(), e.m.sched.Stats())
		}
		e.clk.Step(10 * time.Millisecond)
		time.Sleep(time.Millisecond)
	}
	if st := e.m.sched.Stats(); st.Entries != 0 || st.Running != 0 {
		t.Fatalf("scheduler entries=%d running=%d after churn, want 0", st.Entries, st.Running)
	}
	for _, rm := range []results.Manager{e.live, e.ready, e.start} {
		for _, p := range pods {
			if r, ok := rm.Get(results.ParseContainerID("test://" + string(p.UID))); ok {
				t.Fatalf("results cache still holds %v for %s (W4: removed on exit)", r, p.UID)
			}
		}
	}
	if n := testutilCount(e.m.metrics); n != 0 {
		t.Fatalf("%d prober metric series left after every worker exited (X4)", n)
	}
	// The pools keep idle workers for a while; every other goroutine must
	// be gone.
	idle := 0
	for _, ps := range e.m.rt.Stats() {
		idle += ps.Workers
	}
	if g := goruntime.NumGoroutine(); g > baseGoroutines+idle+2 {
		t.Fatalf("goroutines %d after churn, baseline %d + %d idle pool workers", g, baseGoroutines, idle)
	}
	goruntime.GC()
	var after goruntime.MemStats
	goruntime.ReadMemStats(&after)
	// The map of workers and the scheduler's slab keep their grown capacity;
	// everything else must be gone. 16 MiB bounds the slab and map buckets
	// for 1,500 workers many times over, and is far below what a leak of a
	// million operations would hold.
	if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > 16<<20 {
		t.Fatalf("heap grew by %d bytes over %d operations", grown, ops)
	}
}

// testutilCount counts the series of the prober metrics.
func testutilCount(pm *proberMetrics) int {
	return testutil.CollectAndCount(pm)
}
