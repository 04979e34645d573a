package scheduler

import (
	"slices"
	"testing"
	"time"
)

// runTimes returns the times task ran, relative to t0.
func (r *recorder) runTimes(task int, t0 time.Time) []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []time.Duration
	for _, at := range r.times[task] {
		out = append(out, at.Sub(t0))
	}
	return out
}

// holdNext makes the next run of task stay in flight until release.
func (r *recorder) holdNext(task int) {
	r.mu.Lock()
	r.hold[task] = true
	r.mu.Unlock()
}

// release ends the held run of task and lets its later runs end at once.
func (r *recorder) release(task int) ID {
	r.mu.Lock()
	r.hold[task] = false
	id := r.held[task]
	r.held[task] = 0
	r.mu.Unlock()
	r.s.Done(id)
	return id
}

// A period changed during a run re-anchors the grid at that run's
// due time: a shorter period's runs follow one short period after it, and
// every short period from then on.
func TestSetPeriodShorterReanchorsAtTheRun(t *testing.T) {
	r, clk := newRecorder(t, Options[int]{})
	t0 := clk.Now()
	id := r.add(t, 5, 10*time.Second, 1)
	r.s.Schedule(id, time.Second) // due at 1 s
	r.holdNext(1)
	r.stepTicks(t, time.Second)
	r.waitTotal(t, 1)
	r.s.SetPeriod(id, 5, 250*time.Millisecond) // in flight, as a worker does
	r.release(1)
	r.stepTicks(t, time.Second)
	want := []time.Duration{time.Second, 1250 * time.Millisecond, 1500 * time.Millisecond, 1750 * time.Millisecond, 2 * time.Second}
	if got := r.runTimes(1, t0); !slices.Equal(got, want) {
		t.Fatalf("runs at %v, want %v", got, want)
	}
}

// A longer period's first run comes the new period less the
// key's stable phase (Spread) after the last run, so that entries switching
// together do not stay bunched, then every new period; an unchanged period
// changes nothing.
func TestSetPeriodLongerTakesTheStablePhaseOff(t *testing.T) {
	r, clk := newRecorder(t, Options[int]{})
	r.stepTicks(t, 20*time.Second) // older than the period: Spread is the FirstRunSpread window
	t0 := clk.Now()
	const key = 0x5eed
	id := r.add(t, key, 250*time.Millisecond, 1)
	r.s.Schedule(id, tick)
	r.holdNext(1)
	r.stepTicks(t, tick)
	r.waitTotal(t, 1)
	phase := r.s.Spread(key, 10*time.Second)
	if phase <= 0 || phase >= time.Second {
		t.Fatalf("phase %v, want in (0, 1s) for this key", phase)
	}
	r.s.SetPeriod(id, key, 10*time.Second)
	r.s.SetPeriod(id, key, 10*time.Second) // unchanged: no second phase
	r.release(1)
	r.stepTicks(t, 21*time.Second)
	gap := 10*time.Second - phase/tick*tick
	want := []time.Duration{tick, tick + gap, tick + gap + 10*time.Second}
	if got := r.runTimes(1, t0); !slices.Equal(got, want) {
		t.Fatalf("runs at %v, want %v (phase %v)", got, want, phase)
	}
}

// A period never stretches: a probe at 250 ms that turns ready on a 10 s period while
// the scheduler is young (its phase then spreads over the whole period)
// runs again within one new period, never 10 s plus the phase (it came
// 14 s later); and the gap is never shorter than the old period. Every key
// of a mass switch keeps to both bounds, and the first runs are still
// spread over the period.
func TestSetPeriodNeverMoreThanOneNewPeriod(t *testing.T) {
	r, clk := newRecorder(t, Options[int]{})
	const n = 300
	old, long := 250*time.Millisecond, 10*time.Second
	ids := make([]ID, n)
	keyOf := func(i int) uint64 { return uint64(i)*0x9e3779b97f4a7c15 + 3 }
	for i := range ids {
		ids[i] = r.add(t, keyOf(i), old, i)
		r.s.Schedule(ids[i], r.s.Spread(keyOf(i), old))
	}
	r.stepTicks(t, old)
	r.waitTotal(t, n)
	if age := clk.Since(r.s.start); age >= long {
		t.Fatalf("scheduler %v old, want younger than the new period (its phase over the whole period)", age)
	}
	t0 := clk.Now()
	lastBefore := make([]time.Duration, n)
	for i, id := range ids {
		ts := r.runTimes(i, t0)
		lastBefore[i] = ts[len(ts)-1]
		r.s.SetPeriod(id, keyOf(i), long)
	}
	r.stepTicks(t, 2*long+time.Second)
	first, last := time.Duration(1<<62), time.Duration(-1<<62)
	for i := range ids {
		ts := r.runTimes(i, t0)
		var after []time.Duration
		for _, at := range ts {
			if at > lastBefore[i] {
				after = append(after, at)
			}
		}
		if len(after) < 2 {
			t.Fatalf("task %d: runs %v, want at least two after the switch", i, ts)
		}
		prev := lastBefore[i]
		for _, at := range after {
			if gap := at - prev; gap > long || gap < old {
				t.Fatalf("task %d: runs %v: a gap of %v after the switch to %v from %v (want within [%v, %v])", i, ts, gap, long, old, old, long)
			}
			prev = at
		}
		if d := after[1] - after[0]; d != long {
			t.Fatalf("task %d: runs %v: %v between the first two runs on the new period, want %v", i, ts, d, long)
		}
		first, last = min(first, after[0]), max(last, after[0])
	}
	if spread := last - first; spread < long/2 {
		t.Fatalf("the first runs after the switch span %v, want spread over most of the %v period", spread, long)
	}
}

// Entries on a short period that all switch to a long one at
// once (a dependency they share recovered) are spread over the phase
// window, not left within the short period of each other.
func TestSetPeriodSpreadsAMassSwitch(t *testing.T) {
	r, clk := newRecorder(t, Options[int]{})
	r.stepTicks(t, 20*time.Second)
	const n = 200
	ids := make([]ID, n)
	for i := range ids {
		key := uint64(i)*0x9e3779b97f4a7c15 + 7
		ids[i] = r.add(t, key, 250*time.Millisecond, i)
		r.s.Schedule(ids[i], r.s.Spread(key, 250*time.Millisecond))
	}
	r.stepTicks(t, 250*time.Millisecond)
	r.waitTotal(t, n)
	t0 := clk.Now()
	for i, id := range ids {
		r.s.SetPeriod(id, uint64(i)*0x9e3779b97f4a7c15+7, 10*time.Second)
	}
	r.stepTicks(t, 12*time.Second)
	first, last := time.Duration(1<<62), time.Duration(0)
	for i := range ids {
		var ts []time.Duration
		for _, at := range r.runTimes(i, t0) {
			if at > 0 {
				ts = append(ts, at)
			}
		}
		if len(ts) != 1 {
			t.Fatalf("task %d ran %d times in 12 s after switching to 10 s: %v", i, len(ts), ts)
		}
		first, last = min(first, ts[0]), max(last, ts[0])
	}
	if spread := last - first; spread < 750*time.Millisecond {
		t.Fatalf("the first runs after the switch span %v, want close to the 1s phase window (not the 250ms grid)", spread)
	}
}

// BR-10 at a changed period: a run that outlasts the new, shorter period
// is never overlapped; one follow-up starts when it ends, then the grid.
func TestSetPeriodBR10(t *testing.T) {
	r, clk := newRecorder(t, Options[int]{})
	t0 := clk.Now()
	id := r.add(t, 9, 10*time.Second, 1)
	r.s.Schedule(id, 0)
	r.holdNext(1)
	r.stepTicks(t, tick)
	r.waitTotal(t, 1)
	r.stepTicks(t, 400*time.Millisecond) // the run takes 400 ms
	r.s.SetPeriod(id, 9, 100*time.Millisecond)
	r.stepTicks(t, 300*time.Millisecond) // still in flight: new-grid slots are skipped
	if c := r.count(1); c != 1 {
		t.Fatalf("runs while the first is in flight = %d, want 1", c)
	}
	r.release(1)
	r.waitTotal(t, 2)
	r.settle(t)
	r.stepTicks(t, 200*time.Millisecond)
	got := r.runTimes(1, t0)
	// Released at 710 ms: the follow-up at once, then the 100 ms grid
	// anchored at the first run (10 ms): 810 ms, 910 ms.
	want := []time.Duration{tick, 710 * time.Millisecond, 810 * time.Millisecond, 910 * time.Millisecond}
	if !slices.Equal(got, want) {
		t.Fatalf("runs at %v, want %v", got, want)
	}
	if sk := r.s.Stats().Skipped; sk == 0 {
		t.Fatal("no skipped slot counted while the run outlasted the new period")
	}
}

// A manual trigger after a period change re-arms a full new period later
// (W3, PR #119089), and an entry not armed yet takes the new period at its
// first Schedule.
func TestSetPeriodThenTrigger(t *testing.T) {
	r, clk := newRecorder(t, Options[int]{})
	t0 := clk.Now()
	id := r.add(t, 11, 10*time.Second, 1)
	r.s.SetPeriod(id, 11, time.Second) // not armed yet
	r.s.Schedule(id, 0)
	r.stepTicks(t, 2*time.Second+tick)
	r.s.Trigger(id)
	r.waitTotal(t, 4)
	r.stepTicks(t, time.Second)
	want := []time.Duration{tick, time.Second + tick, 2*time.Second + tick, 2*time.Second + tick, 3*time.Second + tick}
	if got := r.runTimes(1, t0); !slices.Equal(got, want) {
		t.Fatalf("runs at %v, want %v", got, want)
	}
}
