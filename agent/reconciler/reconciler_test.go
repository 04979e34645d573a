package reconciler_test

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/probed/probed/agent/pods"
	"github.com/probed/probed/agent/reconciler"
	"github.com/probed/probed/manager"
)

// IgnoreCurrent: ants starts its package-level default pool at init.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreCurrent()) }

// recorder is a manager.Manager and pods.Listener that records the calls
// it gets, in order.
type recorder struct {
	manager.Manager // nil: only the methods below are called
	mu              sync.Mutex
	calls           []string
}

func (r *recorder) add(s string) {
	r.mu.Lock()
	r.calls = append(r.calls, s)
	r.mu.Unlock()
}

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.calls
	r.calls = nil
	return out
}

func (r *recorder) AddPod(_ context.Context, p *v1.Pod) { r.add("AddPod " + p.Name) }
func (r *recorder) RemovePod(p *v1.Pod)                 { r.add("RemovePod " + p.Name) }
func (r *recorder) StopLivenessAndStartup(p *v1.Pod)    { r.add("StopLivenessAndStartup " + p.Name) }
func (r *recorder) CleanupPods(d map[types.UID]sets.Empty) {
	r.add("CleanupPods " + strconv.Itoa(len(d)))
}
func (r *recorder) PodAdded(p *pods.Pod)         { r.add("PodAdded " + p.Pod.Name) }
func (r *recorder) PodStatusChanged(p *pods.Pod) { r.add("PodStatusChanged " + p.Pod.Name) }
func (r *recorder) PodRemoved(p *pods.Pod)       { r.add("PodRemoved " + p.Pod.Name) }
func pod(name, spec, status string) *pods.Pod {
	return &pods.Pod{Pod: &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID(name)}},
		Origin: "test", SpecHash: spec, StatusHash: status}
}

func equal(t *testing.T, got []string, want ...string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("calls\n  %q\nwant\n  %q", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("calls\n  %q\nwant\n  %q", got, want)
		}
	}
}

// The reconciler's sequences (M2, K5, M5): a new pod gets AddPod before the
// listener hears of it; a changed spec under the same UID stops the old
// workers and adds the pod again; a changed status goes to the listener and
// AddPod (recreating ended workers, W5.2/W8); a pod missing from a Set is
// stopped (StopLivenessAndStartup, RemovePod) and CleanupPods gets the
// remaining set.
func TestReconcilerSequences(t *testing.T) {
	rec := &recorder{}
	r := reconciler.New(reconciler.Options{Manager: rec, Listener: rec, Clock: testingclock.NewFakeClock(time.Unix(0, 0)),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	r.Apply(pods.Update{Op: pods.Set, Pods: []*pods.Pod{pod("a", "s1", "t1"), pod("b", "s1", "t1")}})
	equal(t, rec.take(), "AddPod a", "PodAdded a", "AddPod b", "PodAdded b", "CleanupPods 2")

	r.Apply(pods.Update{Op: pods.Upsert, Pods: []*pods.Pod{pod("a", "s2", "t1")}})
	equal(t, rec.take(), "StopLivenessAndStartup a", "RemovePod a", "PodAdded a", "AddPod a")

	r.Apply(pods.Update{Op: pods.Upsert, Pods: []*pods.Pod{pod("a", "s2", "t2")}})
	equal(t, rec.take(), "PodStatusChanged a", "AddPod a")

	r.Apply(pods.Update{Op: pods.Upsert, Pods: []*pods.Pod{pod("a", "s2", "t2")}})
	equal(t, rec.take())

	r.Apply(pods.Update{Op: pods.Set, Pods: []*pods.Pod{pod("a", "s2", "t2")}})
	equal(t, rec.take(), "StopLivenessAndStartup b", "RemovePod b", "PodRemoved b", "CleanupPods 1")

	r.Apply(pods.Update{Op: pods.Remove, Pods: []*pods.Pod{pod("a", "", "")}})
	equal(t, rec.take(), "StopLivenessAndStartup a", "RemovePod a", "PodRemoved a", "CleanupPods 0")
}

// On the fake clock: every SyncFrequency every pod gets AddPod again (the
// kubelet's periodic pod sync, M2) and OnSync runs; while a replaced pod's
// old workers may still exist, AddPod is repeated every ReaddInterval
// (M6: workers exit asynchronously; M2: AddPod skips a live key), and
// OnWorkersGone is told once a removed pod's workers have surely exited.
func TestReconcilerTicksOnTheFakeClock(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(0, 0))
	rec := &recorder{}
	synced := make(chan struct{}, 10)
	gone := make(chan types.UID, 10)
	r := reconciler.New(reconciler.Options{Manager: rec, Listener: rec, Clock: clk, SyncFrequency: time.Minute,
		OnSync: func() { synced <- struct{}{} }, OnWorkersGone: func(uid types.UID) { gone <- uid },
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	defer func() { cancel(); <-done }()
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}

	r.Apply(pods.Update{Op: pods.Set, Pods: []*pods.Pod{pod("a", "s1", "t1"), pod("b", "s1", "t1")}})
	r.Apply(pods.Update{Op: pods.Remove, Pods: []*pods.Pod{pod("b", "", "")}})
	rec.take()

	clk.Step(time.Minute)
	<-synced
	got := rec.take()
	n := 0
	for _, c := range got {
		if c == "AddPod a" {
			n++
		}
		if c == "AddPod b" {
			t.Fatalf("a removed pod was added again: %q", got)
		}
	}
	if n < 1 {
		t.Fatalf("no periodic AddPod of pod a: %q", got)
	}
	// b's workers are gone after 2 s + 3 × its longest timeout (1 s).
	select {
	case uid := <-gone:
		if uid != "b" {
			t.Fatalf("OnWorkersGone(%s), want b", uid)
		}
	default:
		clk.Step(reconciler.ReaddInterval)
		waitGone(t, gone, "b")
	}

	// Replacing a's spec: AddPod again on each ReaddInterval tick.
	r.Apply(pods.Update{Op: pods.Upsert, Pods: []*pods.Pod{pod("a", "s2", "t1")}})
	rec.take()
	clk.Step(reconciler.ReaddInterval)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if calls := rec.take(); len(calls) > 0 {
			// One AddPod per ReaddInterval tick delivered (a tick of an
			// earlier step may still be pending): only AddPod of a.
			for _, c := range calls {
				if c != "AddPod a" {
					t.Fatalf("calls %q, want only AddPod a", calls)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no AddPod while the replaced pod's workers were stopping")
		}
		time.Sleep(time.Millisecond)
	}
}

// The ReaddInterval ticker exists only while some pod's workers are
// stopping: an agent whose pods do not change holds one timer on its clock
// (the periodic sync), not a ticker that wakes it ten times a second
// (the agent's fixed cost at rest).
func TestReaddTickerOnlyWhileWorkersStop(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(0, 0))
	rec := &recorder{}
	gone := make(chan types.UID, 10)
	r := reconciler.New(reconciler.Options{Manager: rec, Listener: rec, Clock: clk, SyncFrequency: time.Hour,
		OnWorkersGone: func(uid types.UID) { gone <- uid },
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitWaiters := func(want int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for clk.Waiters() != want {
			if time.Now().After(deadline) {
				t.Fatalf("%d waiters on the clock, want %d", clk.Waiters(), want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitWaiters(1) // the sync ticker
	r.Apply(pods.Update{Op: pods.Set, Pods: []*pods.Pod{pod("a", "s1", "t1"), pod("b", "s1", "t1")}})
	if n := clk.Waiters(); n != 1 {
		t.Fatalf("%d waiters with pods that do not change, want 1 (no re-add ticker)", n)
	}
	// Removing b: its workers may still exist, so the re-add ticker runs
	// until its stop window (2 s + 3 × 1 s) has passed, then stops.
	r.Apply(pods.Update{Op: pods.Remove, Pods: []*pods.Pod{pod("b", "", "")}})
	if n := clk.Waiters(); n != 2 {
		t.Fatalf("%d waiters while b's workers stop, want 2 (sync and re-add)", n)
	}
	clk.Step(6 * time.Second)
	waitGone(t, gone, "b")
	waitWaiters(1)
}

// waitGone waits (up to 5 s of real time, for the reconciler's goroutine)
// for the OnWorkersGone call of pod uid once its stop window has passed.
func waitGone(t *testing.T, gone <-chan types.UID, uid types.UID) {
	t.Helper()
	select {
	case got := <-gone:
		if got != uid {
			t.Fatalf("OnWorkersGone(%s), want %s", got, uid)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("OnWorkersGone was not called once the stop window had passed")
	}
}
