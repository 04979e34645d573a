package scheduler

import (
	"slices"
	"testing"
	"time"
)

// Coalesced wake-ups (Options.Coalesce): runs due within one window start
// from one wake-up of the wheel, never later than due + window − tick,
// never missing a period, and the entries keep their phases over the
// period.

// coalesceKey is the key of entry i: spread over the whole 64-bit range.
func coalesceKey(i int) uint64 { return uint64(i)*0x9e3779b97f4a7c15 + 11 }

func TestCoalesceRunsWithinTheWindowAndNeverMissAPeriod(t *testing.T) {
	const window = 50 * time.Millisecond
	r, clk := newRecorder(t, Options[int]{Coalesce: window})
	t0 := clk.Now()
	periods := []time.Duration{time.Second, 730 * time.Millisecond, 100 * time.Millisecond, 60 * time.Millisecond, 2 * time.Second}
	const n = 250
	phase := make([]time.Duration, n)
	for i := range n {
		p := periods[i%len(periods)]
		id := r.add(t, coalesceKey(i), p, i)
		phase[i] = r.s.Spread(coalesceKey(i), p) / tick * tick
		if phase[i] == 0 {
			phase[i] = tick // Schedule rounds a delay ≤ 0 to the next tick
		}
		r.s.Schedule(id, phase[i])
	}
	w0 := r.s.wakeups.Load()
	const span = 4 * time.Second
	r.stepTicks(t, span)
	wakes := r.s.wakeups.Load() - w0
	for i := range n {
		p := periods[i%len(periods)]
		got := r.runTimes(i, t0)
		var due []time.Duration
		for d := phase[i]; d <= span-window; d += p {
			due = append(due, d)
		}
		if len(got) < len(due) {
			t.Fatalf("entry %d (period %v, phase %v): %d runs %v for %d due times %v: a missed period", i, p, phase[i], len(got), got, len(due), due)
		}
		for k, d := range due {
			late := got[k] - d
			if late < 0 || late > window-tick {
				t.Fatalf("entry %d (period %v): run %d at %v for due %v: %v late, want within [0, %v]", i, p, k, got[k], d, late, window-tick)
			}
			if p >= window && got[k]%window != 0 {
				t.Fatalf("entry %d (period %v): run %d at %v, not at the end of a %v window", i, p, k, got[k], window)
			}
			if p < window && late != 0 {
				t.Fatalf("entry %d: period %v shorter than the window, run %d %v late, want at its own tick", i, p, k, late)
			}
		}
	}
	// One wake-up per window (plus the ticks of the 60 ms entries, which
	// fire at their own tick): far fewer than a wake-up per tick that
	// holds an entry.
	maxWakes := uint64(span/window) + uint64(span/tick)/6*2 + 4
	if wakes > maxWakes || wakes > uint64(span/tick)*3/4 {
		t.Fatalf("the wheel woke %d times in %v, want at most %d", wakes, span, maxWakes)
	}
}

// With a window, entries of one period keep their phases: each window of
// the period holds its share of the entries (the spread at the window's
// resolution), and each entry's runs are exactly one period apart when the
// period is a multiple of the window.
func TestCoalesceKeepsTheSpread(t *testing.T) {
	const window = 20 * time.Millisecond
	r, clk := newRecorder(t, Options[int]{Coalesce: window})
	r.stepTicks(t, 2*time.Second) // older than the period: phases over FirstRunSpread (1 s)
	t0 := clk.Now()
	const n, period = 2000, time.Second
	for i := range n {
		id := r.add(t, coalesceKey(i), period, i)
		r.s.Schedule(id, r.s.Spread(coalesceKey(i), period))
	}
	r.stepTicks(t, 3*period)
	perWindow := map[time.Duration]int{}
	for i := range n {
		got := r.runTimes(i, t0)
		if len(got) != 3 {
			t.Fatalf("entry %d: %d runs in 3 periods: %v", i, len(got), got)
		}
		for k := 1; k < len(got); k++ {
			if d := got[k] - got[k-1]; d != period {
				t.Fatalf("entry %d: runs %v: %v apart, want exactly one period", i, got, d)
			}
		}
		perWindow[got[0]%period]++
	}
	windows := int(period / window)
	if len(perWindow) < windows*9/10 {
		t.Fatalf("the first runs fell into %d of the period's %d windows, want nearly all (spread kept)", len(perWindow), windows)
	}
	mean := float64(n) / float64(windows)
	for at, c := range perWindow {
		if float64(c) > 2.5*mean {
			t.Fatalf("%d runs at %v into the period, %.1f× the mean of %.0f per window: a burst", c, at, float64(c)/mean, mean)
		}
	}
}

// A window changes neither the manual trigger (now, then a full period
// later) nor BR-10 (a tick that finds the run in flight is skipped and one
// follow-up starts when it ends, at once), nor a period change
// (SetPeriod: the new grid's run within one new period).
func TestCoalesceKeepsTriggerBR10AndSetPeriod(t *testing.T) {
	const window = 50 * time.Millisecond
	r, clk := newRecorder(t, Options[int]{Coalesce: window})
	t0 := clk.Now()
	id := r.add(t, 3, time.Second, 1)
	r.s.Schedule(id, 120*time.Millisecond) // due at 120 ms: fires at 150 ms
	r.stepTicks(t, 200*time.Millisecond)
	r.s.Trigger(id) // now (200 ms), re-armed for 1.2 s: fires at 1.2 s (a window's end)
	r.waitTotal(t, 2)
	r.holdNext(1)
	r.stepTicks(t, 1100*time.Millisecond) // to 1.3 s: the 1.2 s run is held
	r.stepTicks(t, time.Second)           // 2.2 s comes due while it runs: skipped, pending
	if c := r.count(1); c != 3 {
		t.Fatalf("runs = %d, want 3 (the third held)", c)
	}
	clk.Step(5 * time.Millisecond) // a release off the tick grid
	r.release(1)                   // the follow-up at once
	r.waitTotal(t, 4)
	r.settle(t)
	r.s.SetPeriod(id, 3, 2*time.Second)
	r.stepTicks(t, 3*time.Second)
	got := r.runTimes(1, t0)
	want := []time.Duration{150 * time.Millisecond, 200 * time.Millisecond, 1200 * time.Millisecond, 2305 * time.Millisecond}
	if len(got) < 5 || !slices.Equal(got[:4], want) {
		t.Fatalf("runs at %v, want %v and then the new period", got, want)
	}
	// The last due time was 2.2 s: the new grid's first run is due at most
	// 2 s after it and fires within the window.
	if gap := got[4] - 2200*time.Millisecond; gap > 2*time.Second+window-tick || gap < time.Second {
		t.Fatalf("runs at %v: the first run on the 2 s period came %v after the last due time (2.2 s), want within [1s, 2s + %v]", got, gap, window-tick)
	}
	if r.s.Stats().Skipped == 0 {
		t.Fatal("no skipped slot counted while the run was held past its next due time")
	}
}

// Less than two ticks: off, every entry fires at its own tick.
func TestCoalesceBelowTwoTicksIsOff(t *testing.T) {
	r, clk := newRecorder(t, Options[int]{Coalesce: 15 * time.Millisecond})
	t0 := clk.Now()
	id := r.add(t, 5, time.Second, 1)
	r.s.Schedule(id, 130*time.Millisecond)
	r.stepTicks(t, 1200*time.Millisecond)
	if got, want := r.runTimes(1, t0), []time.Duration{130 * time.Millisecond, 1130 * time.Millisecond}; !slices.Equal(got, want) {
		t.Fatalf("runs at %v, want %v", got, want)
	}
}
