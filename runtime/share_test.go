package runtime

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// heldTask is an Owned task that runs until its gate is closed, recording
// the order of starts and how many of its owner's tasks run at once.
type heldTask struct {
	name  string
	owner Owner
	gate  chan struct{}
	rec   *shareRecorder
}

func (t *heldTask) Owner() Owner { return t.owner }

func (t *heldTask) Run() {
	t.rec.start(t)
	<-t.gate
	t.rec.end(t)
}

type shareRecorder struct {
	mu      sync.Mutex
	started []string
	byPod   map[uint64]int
	byNS    map[uint64]int
	maxPod  map[uint64]int
	maxNS   map[uint64]int
	running atomic.Int64
}

func newShareRecorder() *shareRecorder {
	return &shareRecorder{byPod: map[uint64]int{}, byNS: map[uint64]int{}, maxPod: map[uint64]int{}, maxNS: map[uint64]int{}}
}

func (r *shareRecorder) start(t *heldTask) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.started = append(r.started, t.name)
	r.byPod[t.owner.Pod]++
	r.byNS[t.owner.Namespace]++
	r.maxPod[t.owner.Pod] = max(r.maxPod[t.owner.Pod], r.byPod[t.owner.Pod])
	r.maxNS[t.owner.Namespace] = max(r.maxNS[t.owner.Namespace], r.byNS[t.owner.Namespace])
	r.running.Add(1)
}

func (r *shareRecorder) end(t *heldTask) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.byPod[t.owner.Pod]--
	r.byNS[t.owner.Namespace]--
	r.running.Add(-1)
}

func (r *shareRecorder) startedNames() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.started...)
}

func newSharedRuntime(t *testing.T, size int, pod, ns float64) *Runtime {
	t.Helper()
	rt, err := New(Options{PoolSize: size, SlowPoolSize: size, ExecPoolSize: size, PodShare: pod, NamespaceShare: ns})
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

// TestSharesBoundOnePodAndLetOthersRun: one pod's hung runs
// hold at most its share of the lane's slots; the rest of its runs are
// parked without blocking Submit, so another pod's run starts at once; the
// parked runs start, in order, as the pod's own runs end.
func TestSharesBoundOnePodAndLetOthersRun(t *testing.T) {
	rt := newSharedRuntime(t, 8, 0.25, 0.5) // 2 slots a pod, 4 a namespace
	defer rt.Close(context.Background())
	rec := newShareRecorder()
	hostile := Owner{Pod: 1, Namespace: 10}
	var hung []*heldTask
	for i := 0; i < 10; i++ {
		task := &heldTask{name: fmt.Sprintf("hostile-%d", i), owner: hostile, gate: make(chan struct{}), rec: rec}
		hung = append(hung, task)
		submitted := make(chan error, 1)
		go func() { submitted <- rt.Submit(LaneNetwork, task) }()
		select {
		case err := <-submitted:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("Submit of hostile run %d blocked: a run over its share must be parked", i)
		}
	}
	waitFor(t, "the hostile pod's share running", func() bool { return rec.running.Load() == 2 })
	st := rt.Stats()[LaneNetwork]
	if st.PodSlots != 2 || st.NamespaceSlots != 4 || st.Parked != 8 || st.ParkedTotal != 8 {
		t.Fatalf("stats %+v, want podSlots 2, namespaceSlots 4, parked 8, parkedTotal 8", st)
	}

	victim := &heldTask{name: "victim", owner: Owner{Pod: 2, Namespace: 20}, gate: make(chan struct{}), rec: rec}
	if err := rt.Submit(LaneNetwork, victim); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the victim's run starting beside the hostile pod's", func() bool { return rec.running.Load() == 3 })
	close(victim.gate)

	// One run ends at a time: each frees one slot, which the next parked
	// run takes, in submission order.
	for i, task := range hung {
		close(task.gate)
		if want := 3 + i + 1; i+2 < len(hung) {
			waitFor(t, fmt.Sprintf("start %d", want), func() bool { return len(rec.startedNames()) == want })
		}
	}
	waitFor(t, "the lane idle", func() bool { return rec.running.Load() == 0 })
	var order []string
	for _, n := range rec.startedNames() {
		if n != "victim" {
			order = append(order, n)
		}
	}
	for i, n := range order[2:] {
		if n != fmt.Sprintf("hostile-%d", i+2) {
			t.Fatalf("hostile runs started in order %v, want the parked ones in submission order", order)
		}
	}
	if got := rec.maxPod[hostile.Pod]; got != 2 {
		t.Errorf("the hostile pod held %d slots at once, want its share of 2", got)
	}
	if st := rt.Stats()[LaneNetwork]; st.Parked != 0 {
		t.Errorf("parked after the runs ended: %d", st.Parked)
	}
}

// TestSharesBoundANamespaceAndPodsTakeTurns: the pods of one namespace hold
// at most the namespace's share together, and the slots it frees go to its
// pods in turn, not to the first pod's whole backlog.
func TestSharesBoundANamespaceAndPodsTakeTurns(t *testing.T) {
	rt := newSharedRuntime(t, 8, 0.25, 0.5) // 2 a pod, 4 a namespace
	defer rt.Close(context.Background())
	rec := newShareRecorder()
	var tasks []*heldTask
	for pod := 1; pod <= 3; pod++ {
		for i := 0; i < 3; i++ {
			task := &heldTask{name: fmt.Sprintf("p%d-%d", pod, i), owner: Owner{Pod: uint64(pod), Namespace: 7}, gate: make(chan struct{}), rec: rec}
			tasks = append(tasks, task)
			if err := rt.Submit(LaneNetwork, task); err != nil {
				t.Fatal(err)
			}
		}
	}
	// p1 takes 2 slots, p2 2: the namespace's 4. p1-2, p2-2 and p3's three
	// are parked.
	waitFor(t, "the namespace's share running", func() bool { return rec.running.Load() == 4 })
	if got := rt.Stats()[LaneNetwork].Parked; got != 5 {
		t.Fatalf("parked %d, want 5", got)
	}
	// p1-0 ends: p1 may run again, but p3 (parked behind the namespace's
	// share) came first.
	close(tasks[0].gate)
	waitFor(t, "a fifth start", func() bool { return len(rec.startedNames()) == 5 })
	if got := rec.startedNames()[4]; got != "p3-0" {
		t.Fatalf("the freed slot went to %s, want p3-0 (pods take turns)", got)
	}
	for _, task := range tasks[1:] {
		close(task.gate)
	}
	waitFor(t, "every run", func() bool { return len(rec.startedNames()) == 9 })
	if rec.maxNS[7] != 4 {
		t.Errorf("the namespace held %d slots at once, want 4", rec.maxNS[7])
	}
	for pod := uint64(1); pod <= 3; pod++ {
		if rec.maxPod[pod] > 2 {
			t.Errorf("pod %d held %d slots at once, want at most 2", pod, rec.maxPod[pod])
		}
	}
}

// plainTask is a Task that is not Owned.
type plainTask struct{ gate chan struct{} }

func (t plainTask) Run() { <-t.gate }

// TestSharesLeaveTasksWithoutOwnerAlone: a task that names no owner (e.g.
// probed check's jobs) is bounded only by the pool.
func TestSharesLeaveTasksWithoutOwnerAlone(t *testing.T) {
	rt := newSharedRuntime(t, 4, 0.25, 0.25)
	defer rt.Close(context.Background())
	gate := make(chan struct{})
	for i := 0; i < 4; i++ {
		if err := rt.Submit(LaneNetwork, plainTask{gate}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "four plain tasks running", func() bool { return rt.Stats()[LaneNetwork].Busy == 4 })
	close(gate)
}

// panicTask panics in Run.
type panicTask struct{ owner Owner }

func (t panicTask) Owner() Owner { return t.owner }
func (panicTask) Run()           { panic("boom") }

// TestSharesSurviveAPanickingRun: a run that panics gives its slot back, so
// its pod's parked run still starts.
func TestSharesSurviveAPanickingRun(t *testing.T) {
	rt := newSharedRuntime(t, 4, 0.25, 0) // one slot a pod
	defer rt.Close(context.Background())
	rec := newShareRecorder()
	o := Owner{Pod: 3, Namespace: 3}
	if err := rt.Submit(LaneNetwork, panicTask{o}); err != nil {
		t.Fatal(err)
	}
	next := &heldTask{name: "after", owner: o, gate: make(chan struct{}), rec: rec}
	close(next.gate)
	if err := rt.Submit(LaneNetwork, next); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the run after the panic", func() bool { return len(rec.startedNames()) == 1 })
}

// TestCloseRunsParkedTasks: Close waits for parked runs too (they start as
// the runs before them end), and leaves nothing behind (goleak in TestMain).
func TestCloseRunsParkedTasks(t *testing.T) {
	rt := newSharedRuntime(t, 2, 0.5, 0) // one slot a pod
	rec := newShareRecorder()
	o := Owner{Pod: 5, Namespace: 5}
	first := &heldTask{name: "first", owner: o, gate: make(chan struct{}), rec: rec}
	parked := &heldTask{name: "parked", owner: o, gate: make(chan struct{}), rec: rec}
	close(parked.gate)
	for _, task := range []*heldTask{first, parked} {
		if err := rt.Submit(LaneNetwork, task); err != nil {
			t.Fatal(err)
		}
	}
	closed := make(chan error, 1)
	go func() { closed <- rt.Close(context.Background()) }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a run was in flight", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(first.gate)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if got := rec.startedNames(); len(got) != 2 || got[1] != "parked" {
		t.Fatalf("runs %v, want first then parked", got)
	}
}
