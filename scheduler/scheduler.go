// Package scheduler decides when each probe is due. It is a sharded,
// single-level timing wheel driven only by an injected clock.WithTicker: no
// goroutine and no timer per probe.
//
// Each registered entry carries a period. When its wheel slot comes due, the
// entry is put on a ready queue (one per lane) and re-armed one period later
// on a fixed-rate grid, like the kubelet's per-worker time.Ticker (spec W3).
// A feeder goroutine per shard and lane hands ready entries to the owner's
// Dispatch function, which may block (on a full goroutine pool); the wheel
// itself never blocks, and the time an entry waits between becoming due and
// being dispatched is measured as lag.
//
// At most one run per entry is in flight: a slot that comes due while the
// previous run is queued or running is dropped and counted as skipped, and
// one follow-up run starts as soon as the running one ends (Done), so the
// interval between runs is max(period, duration) — the buffered-one-tick
// behaviour of a time.Ticker (BR-10). A manual Trigger runs the entry now and
// re-arms it a full period later (the kubelet's manual-trigger path, W3).
// The owner may change an entry's period from one run to the next
// (SetPeriod: the grid is re-anchored at the last run, BR-10 and the spread
// kept, and never more than one new period between two runs).
//
// Memory per entry is a fixed 40-byte slab slot plus the owner's task value;
// Add, Remove, Trigger and firing are O(1).
package scheduler

import (
	"errors"
	"math"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
)

// ID names a registered entry. The zero ID is never issued.
type ID uint64

const (
	shardShift = 56
	genShift   = 32
	genMask    = 1<<24 - 1
	idxMask    = 1<<32 - 1
)

func makeID(shard int, gen uint32, idx int32) ID {
	return ID(uint64(shard)<<shardShift | uint64(gen&genMask)<<genShift | uint64(uint32(idx)))
}

func (id ID) shard() int   { return int(uint64(id) >> shardShift) }
func (id ID) gen() uint32  { return uint32(uint64(id)>>genShift) & genMask }
func (id ID) index() int32 { return int32(uint32(uint64(id) & idxMask)) }

// ErrClosed is returned by Add after Close.
var ErrClosed = errors.New("scheduler: closed")

// Options configure a Scheduler.
type Options[T any] struct {
	// Clock drives the wheel and measures lag; nil means the real clock.
	Clock clock.WithTicker
	// Tick is the wheel's resolution; default 10 ms. Entries fire within one
	// tick of their due time when the feeders keep up. The wheel wakes only
	// for ticks whose slot holds an entry, not on every tick.
	Tick time.Duration
	// Slots is the number of wheel slots per shard, rounded up to a power of
	// two; default 32768 (327.68 s at 10 ms). Periods beyond Slots×Tick work
	// but cost an extra look per revolution.
	Slots int
	// Shards splits entries (by their key) over independent wheels, each with
	// its own lock and feeders (one goroutine advances them all). Default:
	// GOMAXPROCS.
	Shards int
	// Lanes is the number of ready queues per shard (e.g. network and exec
	// probes), each with its own feeder so slow work in one lane never holds
	// up another. Default 1.
	Lanes int
	// Dispatch hands a due task to its runner. It may block. The owner must
	// call Done(id) once the run has ended. When Dispatch returns an error
	// the run is considered not started and the scheduler calls Done itself.
	Dispatch func(id ID, task T) error
	// FirstRunSpread bounds the stable per-key phase (see Spread) for
	// entries added once the scheduler has run for longer than their period;
	// default 1 s. Right after start the phase spreads over a whole period,
	// the kubelet's restart jitter (W3, BR-24). The phase is the only
	// jitter: it is a hash of the key, so it is bounded, stable across runs
	// and reproducible on a fake clock (the kubelet draws the same window at
	// random).
	FirstRunSpread time.Duration
	// ObserveLag, when set, is called from a feeder with the time each run
	// waited between becoming due and being dispatched.
	ObserveLag func(lane int, lag time.Duration)
	// Coalesce is the window within which due runs start from one wake-up
	// of the wheel (and so of the feeders and the pool): rounded down to
	// whole ticks, it cuts time into windows of that many ticks counted from
	// the scheduler's start, and an entry due in a window fires at the
	// window's last tick. A run is then at most Coalesce − Tick late, an
	// entry keeps its own grid (the next run is due one period after the
	// last one's due time, not after it fired: no drift, no missed
	// period) and its phase within the period (the spread, at the window's
	// resolution). An entry whose period is shorter than the window fires
	// at its own tick. 0, or less than two ticks: off (runs fire in their
	// own tick).
	Coalesce time.Duration
}

// Stats are cumulative counters and current gauges of a Scheduler.
type Stats struct {
	Entries    int    // registered entries
	Ready      []int  // entries waiting for dispatch, per lane
	Running    int    // entries dispatched and not yet Done
	Dispatched uint64 // runs handed to Dispatch
	Skipped    uint64 // due slots dropped because the previous run was still queued or running
	Triggered  uint64 // manual triggers accepted
	// Advanced is the start of the last tick the wheel processed, or that
	// it has nothing due in while it sleeps (the scheduler's start until
	// then): a wheel that stalls, or oversleeps a due entry, falls behind
	// the clock.
	Advanced time.Time
}

// Scheduler is a sharded timing wheel. All methods are safe for concurrent use.
type Scheduler[T any] struct {
	opts   Options[T]
	clock  clock.WithTicker
	tick   time.Duration
	window int64 // Coalesce in ticks; 1: off
	start  time.Time
	shards []*shard[T]

	advanced atomic.Int64 // last tick processed, +1 (0: none yet)
	// wakeAt is the wheel goroutine's state: awake (0) while it advances;
	// while it searches the shards for the next due slot, −m, where m is
	// the earliest tick an entry was armed for meanwhile (asleep if none);
	// then the tick it sleeps until (no slot of any shard holds an entry
	// before it; asleep when nothing is armed). An entry armed before the
	// tick it sleeps until, or during the search, lowers it and kicks.
	wakeAt  atomic.Int64
	kick    chan struct{}
	wakeups atomic.Uint64 // times the wheel goroutine woke (tests)

	stop   chan struct{}
	wg     sync.WaitGroup
	closed atomic.Bool
	once   sync.Once
}

// New starts a Scheduler: one wheel goroutine, and Lanes feeder goroutines
// per shard, all stopped by Close. The wheel goroutine reads the clock each
// time it wakes and an entry armed for an earlier tick than it sleeps until
// wakes it, so a fake clock may be stepped right away.
func New[T any](opts Options[T]) (*Scheduler[T], error) {
	if opts.Dispatch == nil {
		return nil, errors.New("scheduler: Options.Dispatch is required")
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Tick <= 0 {
		opts.Tick = 10 * time.Millisecond
	}
	if opts.Slots <= 0 {
		opts.Slots = 1 << 15
	}
	slots := 1
	for slots < opts.Slots {
		slots <<= 1
	}
	if opts.Shards <= 0 {
		opts.Shards = runtime.GOMAXPROCS(0)
	}
	if opts.Shards > 255 {
		opts.Shards = 255
	}
	if opts.Lanes <= 0 {
		opts.Lanes = 1
	}
	if opts.Lanes > 255 {
		return nil, errors.New("scheduler: at most 255 lanes")
	}
	if opts.FirstRunSpread <= 0 {
		opts.FirstRunSpread = time.Second
	}
	s := &Scheduler[T]{
		opts:   opts,
		clock:  opts.Clock,
		tick:   opts.Tick,
		window: max(1, int64(opts.Coalesce/opts.Tick)),
		start:  opts.Clock.Now(),
		stop:   make(chan struct{}),
		kick:   make(chan struct{}, 1),
	}
	// Tick 0 is processed: every shard's cursor starts there, and nothing
	// is armed yet.
	s.advanced.Store(1)
	s.wakeAt.Store(asleep)
	for i := 0; i < opts.Shards; i++ {
		s.shards = append(s.shards, newShard(s, i, slots))
	}
	// One goroutine drives every shard's wheel, and it wakes only for a
	// slot that holds an entry: the idle wheel costs nothing.
	s.wg.Add(1)
	go s.runWheel()
	for _, sh := range s.shards {
		s.wg.Add(opts.Lanes)
		for lane := 0; lane < opts.Lanes; lane++ {
			go sh.runFeeder(lane)
		}
	}
	return s, nil
}

const (
	awake  int64 = 0             // wakeAt while the wheel goroutine advances
	asleep int64 = math.MaxInt64 // wakeAt while nothing is armed
)

// runWheel advances every shard's wheel to the clock's current tick, then
// sleeps until the first later tick whose slot holds an entry (or until an
// entry is armed before it, or Close), like a ticker of period Tick that
// skips the ticks with nothing due: an entry still fires in the first
// wake-up at or after the start of its tick, so the firing times are the
// same as with a wake-up on every tick, and a wheel with nothing due in the
// next slots costs no wake-up (at rest: none at all).
func (s *Scheduler[T]) runWheel() {
	defer s.wg.Done()
	var timer clock.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		s.wakeups.Add(1)
		s.wakeAt.Store(awake)
		target := s.tickAt(s.clock.Now())
		for _, sh := range s.shards {
			sh.mu.Lock()
			sh.advance(target)
			sh.mu.Unlock()
		}
		s.advanced.Store(target + 1)

		// From here an entry armed anywhere kicks and is remembered: none
		// armed while the shards are searched is missed.
		s.wakeAt.Store(-asleep)
		next := asleep
		for _, sh := range s.shards {
			sh.mu.Lock()
			next = min(next, sh.nextDue())
			sh.mu.Unlock()
		}
		next = s.publishWake(next)
		var fired <-chan time.Time
		if next != asleep {
			if !s.armTimer(&timer, next) {
				continue // next is due already
			}
			fired = timer.C()
		} else if timer != nil {
			timer.Stop()
		}
		select {
		case <-s.stop:
			return
		case <-s.kick:
		case <-fired:
		}
	}
}

// armTimer sets *t (made on first use, then reset: no allocation per
// wake-up) to fire at the start of tick n, and reports false, with the timer
// stopped, when that time has come. The timer's duration is read from the
// clock just before it is set; if the clock moved meanwhile by more than
// Tick/64 (a fake clock stepped by another goroutine), it is set again, so
// the timer never fires later than Tick/64 after the tick starts.
func (s *Scheduler[T]) armTimer(t *clock.Timer, n int64) bool {
	at := s.timeOf(n)
	for {
		if *t != nil {
			(*t).Stop()
			// A tick that fired while the goroutine was woken by a kick
			// is still in the channel: drain it before the timer is
			// armed again. The real clock's timers do that themselves
			// (Go 1.23); a fake clock's do not, and its Step would block
			// sending the next tick into the full channel while holding
			// the clock's lock, which Now here then waits for.
			select {
			case <-(*t).C():
			default:
			}
		}
		now := s.clock.Now()
		d := at.Sub(now)
		if d <= 0 {
			return false
		}
		if *t == nil {
			*t = s.clock.NewTimer(d)
		} else {
			(*t).Reset(d)
		}
		if s.clock.Since(now) <= s.tick/64 {
			return true
		}
	}
}

// kickIfBefore wakes the wheel goroutine when tick n comes before the one
// it sleeps until, and lowers wakeAt to n at once so that Idle and Stats
// never take a due entry for a sleeping wheel. Callers have just armed an
// entry due at n.
func (s *Scheduler[T]) kickIfBefore(n int64) {
	if s.lowerWakeAt(n) {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
}

// lowerWakeAt records that an entry was armed for tick n: while the wheel
// goroutine sleeps until a later tick, or searches, it lowers wakeAt to n
// (−n while searching) and reports true (the goroutine is to be kicked).
func (s *Scheduler[T]) lowerWakeAt(n int64) bool {
	for {
		w := s.wakeAt.Load()
		lowered := n
		switch {
		case w == awake:
			return false
		case w < 0: // searching; −w is the earliest entry armed meanwhile
			if n >= -w {
				return false
			}
			lowered = -n
		case n >= w:
			return false
		}
		if s.wakeAt.CompareAndSwap(w, lowered) {
			return true
		}
	}
}

// publishWake ends the search: the wheel sleeps until the earlier of next
// (found in the shards) and any tick an entry was armed for meanwhile,
// which it returns.
func (s *Scheduler[T]) publishWake(next int64) int64 {
	for {
		w := s.wakeAt.Load() // −m
		at := min(next, -w)
		if s.wakeAt.CompareAndSwap(w, at) {
			return at
		}
	}
}

// caughtUp reports whether the wheel has nothing left to do up to tick
// target: it processed it, or it sleeps until a later tick (no entry is
// due up to target). While the goroutine advances or searches, only the
// processed tick counts. Caller holds sh.mu.
func (s *Scheduler[T]) caughtUp(sh *shard[T], target int64) bool {
	if sh.cur >= target {
		return true
	}
	w := s.wakeAt.Load()
	return w > 0 && target < w
}

// Add registers task in lane (0 ≤ lane < Lanes) with the given period
// (rounded up to whole ticks, at least one). The key picks the shard and the
// stable phase (see Spread); use a hash of the entry's identity. The entry is
// not armed until Schedule or Trigger is called, so the owner can record the
// returned ID before any run can start.
func (s *Scheduler[T]) Add(key uint64, lane int, period time.Duration, task T) (ID, error) {
	if s.closed.Load() {
		return 0, ErrClosed
	}
	if lane < 0 || lane >= s.opts.Lanes {
		lane = 0
	}
	sh := s.shards[key%uint64(len(s.shards))]
	return sh.add(lane, s.ticksCeil(period), task), nil
}

// Remove unregisters the entry. A run in flight is not interrupted; its Done
// is then a no-op. Removing an unknown or already removed ID does nothing.
func (s *Scheduler[T]) Remove(id ID) {
	if sh := s.shardOf(id); sh != nil {
		sh.remove(id)
	}
}

// Schedule arms the entry to become due after delay and every period from
// then on (re-phasing it). It does not touch a run that is queued or in
// flight. A delay ≤ 0 means the next tick.
func (s *Scheduler[T]) Schedule(id ID, delay time.Duration) {
	if sh := s.shardOf(id); sh != nil {
		sh.schedule(id, delay)
	}
}

// Trigger runs the entry now and re-arms it a full period from now (the
// kubelet's manual trigger, W3, PR #119089). Triggers coalesce: while a run
// is queued, a trigger only re-arms; while a run is in flight, one follow-up
// run starts when it ends. Trigger never blocks.
func (s *Scheduler[T]) Trigger(id ID) {
	if sh := s.shardOf(id); sh != nil {
		sh.trigger(id)
	}
}

// SetPeriod changes the entry's period (rounded up to whole ticks, at least
// one) from its current run on, for entries whose period depends on their
// owner's state (a probe that runs fast until ready). The grid is
// re-anchored at the due time of the entry's last run (before its first
// run: one old period before its first due time): when the period shrinks,
// the next run is due one new period after it, and then every new period.
// When the period grows, the first gap is the new period less the key's
// stable phase (Spread(key, period): over the whole period while the
// scheduler is young, else over min(period, FirstRunSpread)), but at least
// the old period, and then every new period: entries switching at once,
// e.g. when a dependency they share recovers, are spread as a mass Add is
// instead of keeping the narrow grid of their short period, and no gap
// between two runs is ever longer than one new period (a 250 ms probe
// that turns ready on a 10 s period runs again within 10 s, never 10 s
// plus a phase).
//
// BR-10 holds: when the new grid's next run is already due (a run that
// took longer than the new period), it counts as a slot that came due
// while the run was in flight — one follow-up run starts as soon as the
// run ends (Done) — or, for an entry not in flight, it is queued now. A
// manual Trigger re-arms a full new period later. An unchanged period, an
// unknown ID and an entry not armed yet (its first Schedule or Trigger
// then uses the new period) cost one look under the shard's lock; the owner
// calls SetPeriod only when its state changed the period.
func (s *Scheduler[T]) SetPeriod(id ID, key uint64, period time.Duration) {
	sh := s.shardOf(id)
	if sh == nil {
		return
	}
	ticks := s.ticksCeil(period)
	phase := int64(s.Spread(key, period) / s.tick)
	sh.setPeriod(id, ticks, phase)
}

// SetLane moves the entry to another lane for its next runs (0 ≤ lane <
// Lanes). A run already queued keeps its place; an unknown ID is ignored.
func (s *Scheduler[T]) SetLane(id ID, lane int) {
	if lane < 0 || lane >= s.opts.Lanes {
		return
	}
	if sh := s.shardOf(id); sh != nil {
		sh.setLane(id, uint8(lane))
	}
}

// Done reports that the run dispatched for id has ended. A tick missed while
// it ran, or a trigger received, starts the next run right away (BR-10).
func (s *Scheduler[T]) Done(id ID) {
	if sh := s.shardOf(id); sh != nil {
		sh.done(id)
	}
}

// Spread returns the stable phase of key for an entry of the given period:
// a value in [0, window) derived from the key alone, where window is the
// period while the scheduler is younger than one period (spreading every
// entry over one period after a restart, as the kubelet's start jitter
// does, W3/BR-24) and min(period, FirstRunSpread) afterwards (so a pod
// added later is probed promptly, BR-11, while a mass add is still spread).
func (s *Scheduler[T]) Spread(key uint64, period time.Duration) time.Duration {
	window := period
	if s.clock.Since(s.start) >= period && s.opts.FirstRunSpread < window {
		window = s.opts.FirstRunSpread
	}
	return phaseIn(key, window)
}

// PromptSpread returns the stable phase of key over min(period,
// FirstRunSpread) whatever the scheduler's age: for a wake-up whose time is
// already spread by something else (the end of a container's initial delay,
// BR-11), so it comes within FirstRunSpread of that time.
func (s *Scheduler[T]) PromptSpread(key uint64, period time.Duration) time.Duration {
	return phaseIn(key, min(period, s.opts.FirstRunSpread))
}

// phaseIn maps the key's hash onto [0, window): the high word of
// hash×window.
func phaseIn(key uint64, window time.Duration) time.Duration {
	if window <= 0 {
		return 0
	}
	hi, _ := bits.Mul64(mix64(key), uint64(window))
	return time.Duration(hi)
}

// Stats returns the current counters.
func (s *Scheduler[T]) Stats() Stats {
	st := Stats{Ready: make([]int, s.opts.Lanes)}
	if n := s.advanced.Load(); n > 0 {
		last := n - 1
		// Asleep with nothing due: the wheel is current up to the tick
		// before its wake-up (a wheel that overslept still falls behind).
		if w := s.wakeAt.Load(); w > 0 {
			last = max(last, min(s.tickAt(s.clock.Now()), w-1))
		}
		st.Advanced = s.timeOf(last)
	}
	for _, sh := range s.shards {
		sh.mu.Lock()
		st.Entries += sh.live
		st.Running += sh.running
		st.Dispatched += sh.dispatched
		st.Skipped += sh.skipped
		st.Triggered += sh.triggered
		for lane := range sh.ready {
			st.Ready[lane] += sh.ready[lane].n
		}
		sh.mu.Unlock()
	}
	return st
}

// Idle reports whether every shard has processed the clock's current tick
// (or the wheel sleeps until a later tick, nothing being due up to it) and
// no entry is ready or running. Tests use it to wait for the effects of a
// fake-clock step; it is also a cheap "nothing in flight" check.
func (s *Scheduler[T]) Idle() bool {
	target := s.tickAt(s.clock.Now())
	for _, sh := range s.shards {
		sh.mu.Lock()
		ok := s.caughtUp(sh, target) && sh.running == 0
		for _, l := range sh.ready {
			ok = ok && l.n == 0
		}
		sh.mu.Unlock()
		if !ok {
			return false
		}
	}
	return true
}

// Close stops the tickers and feeders and waits for them. A feeder blocked in
// Dispatch is waited for, so the owner must make Dispatch return (e.g. by
// cancelling in-flight probes) before or while Close runs. Done and Remove
// remain safe to call after Close.
func (s *Scheduler[T]) Close() {
	s.once.Do(func() {
		s.closed.Store(true)
		close(s.stop)
	})
	s.wg.Wait()
}

func (s *Scheduler[T]) shardOf(id ID) *shard[T] {
	i := id.shard()
	if id == 0 || i >= len(s.shards) {
		return nil
	}
	return s.shards[i]
}

// ticksCeil converts a duration to whole ticks, rounding up, at least 1.
func (s *Scheduler[T]) ticksCeil(d time.Duration) int64 {
	n := int64((d + s.tick - 1) / s.tick)
	if n < 1 {
		n = 1
	}
	return n
}

// wakeTick is the tick at which an entry due at tick due with the given
// period (ticks) fires: the last tick of due's coalescing window, or due
// itself when coalescing is off or the period is shorter than the window
// (two of its due ticks could share a window: a missed period).
func (s *Scheduler[T]) wakeTick(due, period int64) int64 {
	w := s.window
	if w <= 1 || period < w || due <= 0 {
		return due
	}
	return (due + w - 1) / w * w
}

// tickAt returns the wheel tick containing t.
func (s *Scheduler[T]) tickAt(t time.Time) int64 {
	d := t.Sub(s.start)
	if d < 0 {
		return 0
	}
	return int64(d / s.tick)
}

// timeOf returns the start of tick n.
func (s *Scheduler[T]) timeOf(n int64) time.Time {
	return s.start.Add(time.Duration(n) * s.tick)
}

// mix64 is the splitmix64 finaliser: it spreads similar keys over the
// whole 64-bit range.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
