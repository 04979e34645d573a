package scheduler

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	testingclock "k8s.io/utils/clock/testing"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const tick = 10 * time.Millisecond

// recorder is a Dispatch target that counts runs per task and, unless told
// to hold them, ends each run at once.
type recorder struct {
	mu    sync.Mutex
	runs  map[int]int
	times map[int][]time.Time
	hold  map[int]bool
	held  map[int]ID
	clk   *testingclock.FakeClock
	s     *Scheduler[int]
	total atomic.Int64
}

func newRecorder(t *testing.T, opts Options[int]) (*recorder, *testingclock.FakeClock) {
	t.Helper()
	clk := testingclock.NewFakeClock(time.Unix(1_000_000, 0))
	r := &recorder{runs: map[int]int{}, times: map[int][]time.Time{}, hold: map[int]bool{}, held: map[int]ID{}, clk: clk}
	opts.Clock = clk
	opts.Dispatch = r.dispatch
	if opts.Shards == 0 {
		opts.Shards = 2
	}
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	r.s = s
	t.Cleanup(s.Close)
	return r, clk
}

func (r *recorder) dispatch(id ID, task int) error {
	r.mu.Lock()
	r.runs[task]++
	r.times[task] = append(r.times[task], r.clk.Now())
	hold := r.hold[task]
	if hold {
		r.held[task] = id
	}
	r.mu.Unlock()
	r.total.Add(1)
	if !hold {
		r.s.Done(id)
	}
	return nil
}

func (r *recorder) count(task int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runs[task]
}

// waitTotal waits (in real time, for the feeders) until n runs happened.
func (r *recorder) waitTotal(t *testing.T, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for r.total.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("runs = %d, want %d", r.total.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// settle waits until every shard has processed the clock's current tick,
// nothing is ready and every run that is not held has ended, so that the
// next clock step and "no further run" assertions are deterministic.
func (r *recorder) settle(t *testing.T) {
	t.Helper()
	settle(t, r.s, func() int {
		r.mu.Lock()
		defer r.mu.Unlock()
		n := 0
		for task, id := range r.held {
			if r.hold[task] && id != 0 {
				n++
			}
		}
		return n
	})
}

func settle[T any](t *testing.T, s *Scheduler[T], held func() int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !quiet(s, held()) {
		if time.Now().After(deadline) {
			t.Fatalf("scheduler never settled: %+v", s.Stats())
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// caughtUp waits until every shard has processed the clock's current tick,
// whatever is still ready or running.
func caughtUp[T any](t *testing.T, s *Scheduler[T]) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		target := s.tickAt(s.clock.Now())
		ok := true
		for _, sh := range s.shards {
			sh.mu.Lock()
			ok = ok && s.caughtUp(sh, target)
			sh.mu.Unlock()
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("scheduler never caught up with the clock: %+v", s.Stats())
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func quiet[T any](s *Scheduler[T], held int) bool {
	target := s.tickAt(s.clock.Now())
	running := 0
	for _, sh := range s.shards {
		sh.mu.Lock()
		ok := s.caughtUp(sh, target)
		for _, l := range sh.ready {
			ok = ok && l.n == 0
		}
		running += sh.running
		sh.mu.Unlock()
		if !ok {
			return false
		}
	}
	return running == held
}

func (r *recorder) add(t *testing.T, key uint64, period time.Duration, task int) ID {
	t.Helper()
	id, err := r.s.Add(key, 0, period, task)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// stepTicks moves the fake clock tick by tick, as a real ticker would,
// letting the scheduler settle after each tick.
func (r *recorder) stepTicks(t *testing.T, d time.Duration) {
	t.Helper()
	for ; d > 0; d -= tick {
		r.clk.Step(tick)
		r.settle(t)
	}
}

// DESIGN: stepping the clock by one period plus one tick runs every
// registered, due probe.
func TestStepOnePeriodPlusTickRunsEveryEntry(t *testing.T) {
	r, clk := newRecorder(t, Options[int]{})
	const n = 1000
	period := 10 * time.Second
	for i := 0; i < n; i++ {
		id := r.add(t, uint64(i), period, i)
		r.s.Schedule(id, r.s.Spread(uint64(i), period))
	}
	clk.Step(period + tick)
	r.waitTotal(t, n)
	r.settle(t)
	for i := 0; i < n; i++ {
		// One step covers the first due time and, for phases within the
		// first tick, the next one: that one is a follow-up of a run still
		// queued (BR-10), never a third.
		if c := r.count(i); c < 1 || c > 2 {
			t.Fatalf("task %d ran %d times after one period plus a tick, want 1 or 2", i, c)
		}
	}
	// Stepping ten periods at once runs each entry again, at most twice
	// (at most one run in flight and one follow-up).
	before := r.total.Load()
	clk.Step(10 * period)
	r.waitTotal(t, before+n)
	r.settle(t)
	if got := r.total.Load() - before; got > 2*n {
		t.Fatalf("a 10-period jump produced %d runs for %d entries", got, n)
	}
}

// W3: an entry runs every period on a fixed-rate grid.
func TestPeriodicRunsKeepCadence(t *testing.T) {
	r, clk := newRecorder(t, Options[int]{})
	id := r.add(t, 1, time.Second, 7)
	r.s.Schedule(id, 0)
	start := clk.Now()
	for i := 0; i < 5; i++ {
		r.stepTicks(t, time.Second)
		r.waitTotal(t, int64(i+1))
	}
	r.settle(t)
	r.mu.Lock()
	times := append([]time.Time(nil), r.times[7]...)
	r.mu.Unlock()
	if len(times) != 5 {
		t.Fatalf("runs = %d, want 5", len(times))
	}
	for k := 1; k < len(times); k++ {
		if d := times[k].Sub(times[k-1]); d != time.Second {
			t.Errorf("interval %d = %v, want 1s", k, d)
		}
	}
	if first := times[0].Sub(start); first > tick {
		t.Errorf("first run %v after Schedule(0), want within one tick", first)
	}
}

// BR-10: never more than one run in flight per entry; ticks that come while
// it runs are dropped and counted, and exactly one follow-up run starts as
// soon as the long run ends.
func TestBR10_NoOverlappingRuns(t *testing.T) {
	r, clk := newRecorder(t, Options[int]{})
	r.hold[1] = true
	id := r.add(t, 1, time.Second, 1)
	r.s.Schedule(id, 0)
	clk.Step(tick)
	r.waitTotal(t, 1)
	// Five periods pass while the run is held in flight.
	for i := 0; i < 5; i++ {
		r.stepTicks(t, time.Second)
	}
	r.settle(t)
	if c := r.count(1); c != 1 {
		t.Fatalf("runs while the first was in flight = %d, want 1", c)
	}
	if sk := r.s.Stats().Skipped; sk < 5 {
		t.Fatalf("skipped = %d, want ≥ 5", sk)
	}
	// Ending the run starts the next one right away (interval = duration).
	r.mu.Lock()
	r.hold[1] = false
	held := r.held[1]
	r.mu.Unlock()
	r.s.Done(held)
	r.waitTotal(t, 2)
	r.settle(t)
	if c := r.count(1); c != 2 {
		t.Fatalf("runs after Done = %d, want exactly 2 (one follow-up)", c)
	}
}

// W3 / PR #119089: a manual trigger runs now and re-arms a full period later.
func TestTriggerRunsNowAndRearmsFullPeriod(t *testing.T) {
	r, _ := newRecorder(t, Options[int]{})
	period := 10 * time.Second
	id := r.add(t, 3, period, 3)
	r.s.Schedule(id, period) // next nominal run in 10 s
	r.stepTicks(t, 4*time.Second)
	r.s.Trigger(id)
	r.waitTotal(t, 1)
	// The old nominal time (6 s from now) must not fire.
	r.stepTicks(t, period-2*tick)
	r.settle(t)
	if c := r.count(3); c != 1 {
		t.Fatalf("runs before a full period after the trigger = %d, want 1", c)
	}
	r.stepTicks(t, 2*tick)
	r.waitTotal(t, 2)
	// Triggers coalesce while the run is in flight.
	r.hold[3] = true
	r.s.Trigger(id)
	r.waitTotal(t, 3)
	r.s.Trigger(id)
	r.s.Trigger(id)
	r.mu.Lock()
	r.hold[3] = false
	held := r.held[3]
	r.mu.Unlock()
	r.s.Done(held)
	r.waitTotal(t, 4)
	r.settle(t)
	if c := r.count(3); c != 4 {
		t.Fatalf("runs = %d, want 4 (two triggers during a run coalesce into one)", c)
	}
}

func TestRemoveStopsRunsAndRecyclesSlots(t *testing.T) {
	r, clk := newRecorder(t, Options[int]{Shards: 1})
	id := r.add(t, 1, time.Second, 1)
	r.s.Schedule(id, 0)
	clk.Step(tick)
	r.waitTotal(t, 1)
	r.s.Remove(id)
	r.s.Remove(id) // idempotent
	r.stepTicks(t, 3*time.Second)
	r.settle(t)
	if c := r.count(1); c != 1 {
		t.Fatalf("runs after Remove = %d, want 1", c)
	}
	// The slot is reused with a new generation: the stale ID does nothing.
	id2 := r.add(t, 1, time.Second, 2)
	if id2.index() != id.index() || id2 == id {
		t.Fatalf("slot not recycled with a new generation: %x vs %x", id, id2)
	}
	r.s.Trigger(id) // stale
	r.s.Schedule(id, 0)
	r.stepTicks(t, 2*time.Second)
	r.settle(t)
	if c := r.count(2); c != 0 {
		t.Fatalf("stale ID armed the new entry: %d runs", c)
	}
	if st := r.s.Stats(); st.Entries != 1 {
		t.Fatalf("entries = %d, want 1", st.Entries)
	}
}

func TestRemoveWhileRunning(t *testing.T) {
	r, clk := newRecorder(t, Options[int]{Shards: 1})
	r.hold[1] = true
	id := r.add(t, 1, time.Second, 1)
	r.s.Schedule(id, 0)
	clk.Step(tick)
	r.waitTotal(t, 1)
	r.s.Remove(id)
	// The slot is not reused while the run is in flight.
	id2 := r.add(t, 2, time.Second, 2)
	if id2.index() == id.index() {
		t.Fatal("slot of a running entry was reused")
	}
	r.s.Done(id)
	r.s.Done(id) // second Done is a no-op
	r.mu.Lock()
	r.hold[1] = false
	r.mu.Unlock()
	r.stepTicks(t, 2*time.Second)
	r.settle(t)
	if c := r.count(1); c != 1 {
		t.Fatalf("removed entry ran %d times", c)
	}
	if st := r.s.Stats(); st.Entries != 1 || st.Running != 0 {
		t.Fatalf("stats = %+v, want 1 entry, 0 running", st)
	}
}

// BR-24: entries added right after the scheduler starts spread their first
// runs over one period; no 1 s bucket holds more than twice its fair share,
// and each entry keeps its own cadence afterwards.
func TestBR24_SpreadAfterStart(t *testing.T) {
	r, clk := newRecorder(t, Options[int]{})
	const n = 500
	period := 10 * time.Second
	for i := 0; i < n; i++ {
		key := uint64(i)*0x9e3779b97f4a7c15 + 12345
		id := r.add(t, key, period, i)
		r.s.Schedule(id, r.s.Spread(key, period))
	}
	start := clk.Now()
	r.stepTicks(t, 2*period)
	r.waitTotal(t, 2*n)
	r.settle(t)
	buckets := make([]int, 10)
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := 0; i < n; i++ {
		ts := r.times[i]
		if len(ts) < 2 {
			t.Fatalf("task %d ran %d times in two periods", i, len(ts))
		}
		first := ts[0].Sub(start)
		if first < 0 || first >= period+tick {
			t.Fatalf("task %d first run at %v, want within one period", i, first)
		}
		buckets[int(first/time.Second)%10]++
		if d := ts[1].Sub(ts[0]); d != period {
			t.Fatalf("task %d second run %v after the first, want %v", i, d, period)
		}
	}
	for b, c := range buckets {
		if c > 2*n/10 {
			t.Errorf("bucket %ds holds %d of %d first runs (> 2× fair share): %v", b, c, n, buckets)
		}
	}
}

// BR-11: entries added after the scheduler has run for more than their
// period are spread over at most FirstRunSpread (1 s), not a whole period.
func TestBR11_LateAddsSpreadOverFirstRunSpread(t *testing.T) {
	r, clk := newRecorder(t, Options[int]{})
	r.stepTicks(t, time.Second)
	clk.Step(400 * time.Second)
	period := 300 * time.Second
	for i := 0; i < 200; i++ {
		phase := r.s.Spread(uint64(i), period)
		if phase < 0 || phase >= time.Second {
			t.Fatalf("late add phase %v, want in [0, 1s)", phase)
		}
	}
	// and the phase is stable per key
	if a, b := r.s.Spread(42, period), r.s.Spread(42, period); a != b {
		t.Fatalf("phase not stable: %v vs %v", a, b)
	}
}

// Lanes are independent: a lane whose runs block does not hold up another.
func TestLanesAreIndependent(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(0, 0))
	block := make(chan struct{})
	var fast atomic.Int64
	var s *Scheduler[int]
	s, err := New(Options[int]{Clock: clk, Shards: 1, Lanes: 2, Dispatch: func(id ID, lane int) error {
		if lane == 1 {
			<-block // a hung dispatch in lane 1
		} else {
			fast.Add(1)
		}
		s.Done(id)
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	defer close(block)
	slow, _ := s.Add(1, 1, time.Second, 1)
	s.Schedule(slow, 0)
	for i := 0; i < 10; i++ {
		id, _ := s.Add(uint64(100+i), 0, time.Second, 0)
		s.Schedule(id, 0)
	}
	clk.Step(tick)
	deadline := time.Now().Add(10 * time.Second)
	for fast.Load() < 10 {
		if time.Now().After(deadline) {
			t.Fatalf("lane 0 ran %d of 10 while lane 1 was blocked", fast.Load())
		}
		time.Sleep(time.Millisecond)
	}
}

// The lag between becoming due and being dispatched is measured.
func TestLagObserved(t *testing.T) {
	var mu sync.Mutex
	var lags []time.Duration
	r, clk := newRecorder(t, Options[int]{ObserveLag: func(_ int, d time.Duration) {
		mu.Lock()
		lags = append(lags, d)
		mu.Unlock()
	}})
	id := r.add(t, 1, time.Second, 1)
	r.s.Schedule(id, 0)
	clk.Step(5 * tick) // the entry was due at tick 1: 40 ms late
	r.waitTotal(t, 1)
	mu.Lock()
	defer mu.Unlock()
	if len(lags) != 1 || lags[0] != 40*time.Millisecond {
		t.Fatalf("lags = %v, want [40ms]", lags)
	}
}

func TestDispatchErrorEndsRun(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(0, 0))
	var calls atomic.Int64
	s, err := New(Options[int]{Clock: clk, Shards: 1, Dispatch: func(ID, int) error {
		calls.Add(1)
		return ErrClosed
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	id, _ := s.Add(1, 0, time.Second, 1)
	s.Schedule(id, 0)
	for i := 1; i <= 3; i++ {
		clk.Step(time.Second)
		deadline := time.Now().Add(5 * time.Second)
		for calls.Load() < int64(i) {
			if time.Now().After(deadline) {
				t.Fatalf("dispatch %d never came: a failed dispatch left the entry running", i)
			}
			time.Sleep(time.Millisecond)
		}
	}
}

func TestCloseStopsEverything(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(0, 0))
	s, err := New(Options[int]{Clock: clk, Dispatch: func(ID, int) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	s.Close()
	if _, err := s.Add(1, 0, time.Second, 1); err != ErrClosed {
		t.Fatalf("Add after Close: %v, want ErrClosed", err)
	}
	s.Done(makeID(0, 1, 0))
	s.Remove(makeID(0, 1, 0))
}

// Periods longer than the wheel (here 4 slots × 10 ms) still fire on time.
func TestPeriodLongerThanWheel(t *testing.T) {
	r, clk := newRecorder(t, Options[int]{Slots: 4, Shards: 1})
	id := r.add(t, 1, 100*time.Millisecond, 1)
	r.s.Schedule(id, 0)
	clk.Step(tick)
	r.waitTotal(t, 1)
	r.stepTicks(t, 90*time.Millisecond)
	r.settle(t)
	if c := r.count(1); c != 1 {
		t.Fatalf("ran %d times before its period", c)
	}
	clk.Step(tick)
	r.waitTotal(t, 2)
}

// A run that is still queued (the pool is full) when its next tick comes
// serves that tick too: after the pool frees up it runs once, not twice
// (an extra run would add load exactly when the node cannot keep up).
func TestQueuedRunServesMissedTicks(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(0, 0))
	release := make(chan struct{})
	var runs sync.Map // task → count
	var s *Scheduler[int]
	s, err := New(Options[int]{Clock: clk, Shards: 1, Dispatch: func(id ID, task int) error {
		if task == 0 {
			<-release // the pool is "full": the feeder is stuck here
		}
		v, _ := runs.LoadOrStore(task, new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
		s.Done(id)
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	blocker, _ := s.Add(1, 0, time.Hour, 0)
	s.Trigger(blocker)
	queued, _ := s.Add(2, 0, time.Second, 1)
	s.Schedule(queued, 0)
	for i := 0; i < 5; i++ {
		clk.Step(time.Second)
	}
	// The ticker goroutine sees the steps asynchronously (the fake ticker
	// holds one tick): wait until the wheel has processed the clock's current
	// tick, so every missed tick came due while the run was still queued, as
	// it would with a real clock, before the pool frees up. Releasing earlier
	// lets a late-processed tick find the entry idle and start a second run.
	caughtUp(t, s)
	close(release)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if v, ok := runs.Load(1); ok && v.(*atomic.Int64).Load() >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the queued entry never ran")
		}
		time.Sleep(time.Millisecond)
	}
	settle(t, s, func() int { return 0 })
	if v, _ := runs.Load(1); v.(*atomic.Int64).Load() != 1 {
		t.Fatalf("queued entry ran %d times after the pool freed up, want 1", v.(*atomic.Int64).Load())
	}
	if sk := s.Stats().Skipped; sk < 4 {
		t.Fatalf("skipped = %d, want the missed ticks counted", sk)
	}
}

// BR-11: the wake-up at the end of an initial delay is spread over at most
// FirstRunSpread even while the scheduler is younger than the period
// (when Spread covers the whole period, BR-24).
func TestBR11_PromptSpreadWhileYoung(t *testing.T) {
	r, _ := newRecorder(t, Options[int]{})
	period := 300 * time.Second
	wide := false
	for i := 0; i < 200; i++ {
		if p := r.s.PromptSpread(uint64(i), period); p < 0 || p >= time.Second {
			t.Fatalf("prompt phase %v, want in [0, 1s)", p)
		}
		if r.s.Spread(uint64(i), period) >= time.Second {
			wide = true
		}
	}
	if !wide {
		t.Fatal("Spread of a young scheduler never left the first second (BR-24 window not the period)")
	}
	if a, b := r.s.PromptSpread(42, 2*time.Second), r.s.PromptSpread(42, 2*time.Second); a != b {
		t.Fatalf("phase not stable: %v vs %v", a, b)
	}
	if p := r.s.PromptSpread(7, 100*time.Millisecond); p >= 100*time.Millisecond {
		t.Fatalf("prompt phase %v beyond a 100ms period", p)
	}
}

// The wheel wakes only for a slot that holds an entry: at rest it holds no
// timer on the clock and does not wake, however long the clock runs
// (the idle scheduler's fixed cost).
func TestIdleWheelHoldsNoTimer(t *testing.T) {
	r, clk := newRecorder(t, Options[int]{})
	r.stepTicks(t, 3*time.Second)
	if n := clk.Waiters(); n != 0 {
		t.Fatalf("%d waiters on the clock with nothing registered, want 0", n)
	}
	if w := r.s.wakeups.Load(); w > 2 {
		t.Fatalf("the wheel woke %d times in 300 ticks with nothing registered, want at most 2", w)
	}
	// Stats stay current while it sleeps: the agent's stall check
	// (agent/health) must not take a sleeping wheel for a stalled one.
	clk.Step(10 * time.Minute)
	if got, want := r.s.Stats().Advanced, r.s.timeOf(r.s.tickAt(clk.Now())); !got.Equal(want) {
		t.Fatalf("Stats.Advanced = %v asleep, want the current tick %v", got, want)
	}
}

// A sparse wheel wakes once per due slot, and each run still starts in the
// tick it is due, on the fixed-rate grid (W3), as with a wake-up per tick.
func TestSparseWheelWakesOnlyForDueSlots(t *testing.T) {
	r, clk := newRecorder(t, Options[int]{})
	t0 := clk.Now()
	id := r.add(t, 7, time.Second, 1)
	r.s.Schedule(id, 250*time.Millisecond)
	w0 := r.s.wakeups.Load()
	r.stepTicks(t, 3*time.Second)
	r.mu.Lock()
	times := append([]time.Time(nil), r.times[1]...)
	r.mu.Unlock()
	if len(times) != 3 {
		t.Fatalf("%d runs in 3 s at period 1 s, want 3: %v", len(times), times)
	}
	for i, at := range times {
		if want := t0.Add(250*time.Millisecond + time.Duration(i)*time.Second); !at.Equal(want) {
			t.Errorf("run %d at %v, want %v (its tick)", i, at.Sub(t0), want.Sub(t0))
		}
	}
	// One wake-up per run, and perhaps one for the Schedule's kick: not 300.
	if w := r.s.wakeups.Load() - w0; w > 5 {
		t.Fatalf("the wheel woke %d times for 3 runs in 300 ticks, want at most 5", w)
	}
	if n := clk.Waiters(); n != 1 {
		t.Fatalf("%d waiters on the clock, want 1 (the wheel's timer for the next run)", n)
	}
}

// An entry armed before the tick the wheel sleeps until wakes it: a
// sleeping wheel never delays an earlier entry.
func TestEarlierEntryWakesSleepingWheel(t *testing.T) {
	r, clk := newRecorder(t, Options[int]{})
	far := r.add(t, 1, 100*time.Second, 1)
	r.s.Schedule(far, 50*time.Second)
	r.stepTicks(t, 2*tick) // the wheel now sleeps until 50 s
	near := r.add(t, 2, 100*time.Second, 2)
	r.s.Schedule(near, time.Second)
	// Not caught up yet: an entry is due before the wheel's wake-up.
	clk.Step(time.Second)
	r.settle(t)
	if r.count(2) != 1 || r.count(1) != 0 {
		t.Fatalf("after 1 s: near ran %d, far ran %d; want 1 and 0", r.count(2), r.count(1))
	}
	clk.Step(49 * time.Second)
	r.settle(t)
	if r.count(1) != 1 {
		t.Fatalf("far ran %d times at 50 s, want 1", r.count(1))
	}
	// A manual trigger of a sleeping wheel's entry runs at once.
	r.s.Trigger(far)
	r.waitTotal(t, 3)
}

// armTimer drains a tick the wheel did not read (it was woken by a kick)
// before it arms the timer again: a fake clock's Step sends each tick into
// the timer's one-slot channel while holding the clock's lock, so a stale
// tick left there makes the next Step block for good, and the wheel with it
// in clock.Now (seen as a hang of TestChurn under load).
func TestArmTimerDrainsAnUnreadTick(t *testing.T) {
	fc := testingclock.NewFakeClock(time.Unix(0, 0))
	s, err := New(Options[int]{Clock: fc, Dispatch: func(ID, int) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	timer := fc.NewTimer(time.Millisecond)
	fc.Step(time.Millisecond) // fires: the tick waits in the channel, unread
	if !s.armTimer(&timer, s.tickAt(fc.Now())+5) {
		t.Fatal("armTimer: the tick is not in the future")
	}
	stepped := make(chan struct{})
	go func() {
		fc.Step(time.Second)
		close(stepped)
	}()
	select {
	case <-stepped:
	case <-time.After(10 * time.Second):
		t.Fatal("Step blocked: the stale tick was left in the timer's channel")
	}
	select {
	case <-timer.C():
	default:
		t.Fatal("the re-armed timer did not fire")
	}
}
