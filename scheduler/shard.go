package scheduler

import (
	"math"
	"sync"
	"time"
)

// Entry flags.
const (
	fUsed    uint8 = 1 << iota // slot holds a registered entry
	fArmed                     // linked into a wheel slot
	fQueued                    // linked into a ready list
	fRunning                   // dispatched, Done not yet called
	fPending                   // a slot came due while queued or running
	fTrigger                   // a manual trigger came while running
	fRemoved                   // removed while running; freed by Done
)

const nilIdx int32 = -1

// entry is one slab slot. It holds no pointers, so the GC never scans the
// slab; the owner's task lives in the parallel tasks slice.
type entry struct {
	wprev, wnext int32  // wheel slot list (or the free list, via wnext)
	rprev, rnext int32  // ready list
	deadline     int64  // tick at which the entry is next due
	due          uint32 // µs since start (mod 2^32) at which the queued run became due
	period       uint32 // ticks (at most 2^32 ticks: 497 days at 10 ms)
	gen          uint32
	flags        uint8
	lane         uint8
}

type list struct {
	head, tail int32
	n          int
}

type shard[T any] struct {
	s   *Scheduler[T]
	idx int

	mu       sync.Mutex
	entries  []entry
	tasks    []T
	freeHead int32
	slots    []int32
	mask     int64
	cur      int64 // last processed tick
	ready    []list
	signal   []chan struct{}
	live     int
	armed    int // entries linked into the wheel
	running  int
	// Counters of Stats, per shard under mu (the lock every run takes
	// anyway) instead of atomics every shard's runs would share.
	dispatched, skipped, triggered uint64
}

func newShard[T any](s *Scheduler[T], idx, nslots int) *shard[T] {
	sh := &shard[T]{
		s:        s,
		idx:      idx,
		freeHead: nilIdx,
		slots:    make([]int32, nslots),
		mask:     int64(nslots - 1),
		ready:    make([]list, s.opts.Lanes),
		signal:   make([]chan struct{}, s.opts.Lanes),
	}
	for i := range sh.slots {
		sh.slots[i] = nilIdx
	}
	for i := range sh.ready {
		sh.ready[i] = list{head: nilIdx, tail: nilIdx}
		sh.signal[i] = make(chan struct{}, 1)
	}
	return sh
}

// runFeeder hands ready entries of one lane to Dispatch until Close.
func (sh *shard[T]) runFeeder(lane int) {
	s := sh.s
	defer s.wg.Done()
	for {
		select {
		case <-s.stop:
			return
		default:
		}
		sh.mu.Lock()
		i := sh.popReady(lane)
		if i == nilIdx {
			sh.mu.Unlock()
			select {
			case <-s.stop:
				return
			case <-sh.signal[lane]:
			}
			continue
		}
		e := &sh.entries[i]
		e.flags = e.flags&^fQueued | fRunning
		sh.running++
		sh.dispatched++
		id := makeID(sh.idx, e.gen, i)
		task := sh.tasks[i]
		due := e.due
		sh.mu.Unlock()

		err := s.opts.Dispatch(id, task)
		if s.opts.ObserveLag != nil {
			// After Dispatch: the wait for a free pool slot is lag too.
			// Modular µs arithmetic: right for any lag under 71 minutes.
			lag := time.Duration(int32(microsSince(s.clock.Since(s.start))-due)) * time.Microsecond
			if lag < 0 {
				lag = 0
			}
			s.opts.ObserveLag(lane, lag)
		}
		if err != nil {
			sh.done(id)
		}
	}
}

// advance processes every tick up to and including target (catching up
// after a stall or a big step of a fake clock). Caller holds mu.
func (sh *shard[T]) advance(target int64) {
	if target-sh.cur > int64(len(sh.slots)) {
		sh.sweep(target)
		return
	}
	for sh.cur < target {
		sh.cur++
		i := sh.slots[sh.cur&sh.mask]
		for i != nilIdx {
			e := &sh.entries[i]
			next := e.wnext
			if e.deadline <= sh.cur {
				sh.unlinkWheel(i)
				sh.fire(i)
			}
			i = next
		}
	}
}

// sweep handles a jump longer than one wheel revolution by visiting every
// armed entry once. Caller holds mu.
func (sh *shard[T]) sweep(target int64) {
	sh.cur = target
	for i := range sh.entries {
		e := &sh.entries[i]
		if e.flags&fArmed == 0 {
			continue
		}
		if sh.wakeOf(int32(i)) <= target {
			sh.unlinkWheel(int32(i))
			sh.fire(int32(i))
		}
	}
}

// fire makes entry i due at its deadline and re-arms it one period later on
// the fixed-rate grid. Caller holds mu; i is unlinked from the wheel.
func (sh *shard[T]) fire(i int32) {
	e := &sh.entries[i]
	nominal := e.deadline
	switch {
	case e.flags&fRunning != 0:
		// A tick while the run is in flight: dropped, and one follow-up
		// runs as soon as the run ends (BR-10).
		e.flags |= fPending
		sh.skipped++
	case e.flags&fQueued != 0:
		// Still waiting for the pool: that queued run serves this tick too.
		sh.skipped++
	default:
		e.due = microsSince(time.Duration(nominal) * sh.s.tick)
		sh.pushReady(i)
	}
	period := int64(e.period)
	next := nominal + period
	if next <= sh.cur {
		missed := (sh.cur-next)/period + 1
		sh.skipped += uint64(missed)
		next += missed * period
	}
	e.deadline = next
	sh.linkWheel(i)
}

// microsSince is d in microseconds, modulo 2^32 (the entry's due field).
func microsSince(d time.Duration) uint32 { return uint32(d / time.Microsecond) }

func (sh *shard[T]) add(lane int, period int64, task T) ID {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	var i int32
	if sh.freeHead != nilIdx {
		i = sh.freeHead
		sh.freeHead = sh.entries[i].wnext
	} else {
		i = int32(len(sh.entries))
		sh.entries = append(sh.entries, entry{gen: 1})
		var zero T
		sh.tasks = append(sh.tasks, zero)
	}
	e := &sh.entries[i]
	e.wprev, e.wnext, e.rprev, e.rnext = nilIdx, nilIdx, nilIdx, nilIdx
	e.flags = fUsed
	e.lane = uint8(lane)
	e.period = uint32(min(period, math.MaxUint32))
	sh.tasks[i] = task
	sh.live++
	return makeID(sh.idx, e.gen, i)
}

// lookup returns the index of id's entry, or nilIdx when id is stale.
// Caller holds mu.
func (sh *shard[T]) lookup(id ID) int32 {
	i := id.index()
	if i < 0 || int(i) >= len(sh.entries) {
		return nilIdx
	}
	e := &sh.entries[i]
	if e.flags&fUsed == 0 || e.gen != id.gen() {
		return nilIdx
	}
	return i
}

// lookupLive is lookup, except that an entry removed while its run is in
// flight is stale too: nothing may arm it again. Caller holds mu.
func (sh *shard[T]) lookupLive(id ID) int32 {
	i := sh.lookup(id)
	if i == nilIdx || sh.entries[i].flags&fRemoved != 0 {
		return nilIdx
	}
	return i
}

func (sh *shard[T]) remove(id ID) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i := sh.lookupLive(id)
	if i == nilIdx {
		return
	}
	e := &sh.entries[i]
	if e.flags&fArmed != 0 {
		sh.unlinkWheel(i)
	}
	if e.flags&fQueued != 0 {
		sh.unlinkReady(i)
	}
	sh.live--
	if e.flags&fRunning != 0 {
		e.flags = fUsed | fRunning | fRemoved
		return
	}
	sh.free(i)
}

func (sh *shard[T]) free(i int32) {
	e := &sh.entries[i]
	gen := (e.gen + 1) & genMask
	if gen == 0 {
		gen = 1
	}
	*e = entry{gen: gen, wprev: nilIdx, wnext: sh.freeHead, rprev: nilIdx, rnext: nilIdx}
	var zero T
	sh.tasks[i] = zero
	sh.freeHead = i
}

func (sh *shard[T]) schedule(id ID, delay time.Duration) {
	now := sh.s.clock.Now()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i := sh.lookupLive(id)
	if i == nilIdx {
		return
	}
	sh.rearm(i, now, delay)
}

// rearm (re)links entry i into the wheel, due delay after now. Caller holds mu.
func (sh *shard[T]) rearm(i int32, now time.Time, delay time.Duration) {
	e := &sh.entries[i]
	if e.flags&fArmed != 0 {
		sh.unlinkWheel(i)
	}
	d := now.Add(delay).Sub(sh.s.start)
	n := int64((d + sh.s.tick - 1) / sh.s.tick)
	if n <= sh.cur {
		n = sh.cur + 1
	}
	e.deadline = n
	sh.linkWheel(i)
	sh.s.kickIfBefore(sh.wakeOf(i))
}

func (sh *shard[T]) trigger(id ID) {
	now := sh.s.clock.Now()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i := sh.lookupLive(id)
	if i == nilIdx {
		return
	}
	e := &sh.entries[i]
	sh.triggered++
	if e.flags&fRunning != 0 {
		e.flags |= fTrigger
		return
	}
	sh.rearm(i, now, time.Duration(e.period)*sh.s.tick)
	if e.flags&fQueued != 0 {
		return
	}
	e.due = microsSince(now.Sub(sh.s.start))
	sh.pushReady(i)
}

// setPeriod is SetPeriod: ticks is the new period and phase the key's
// stable phase in ticks (less than ticks), taken off the first gap when
// the period grows.
func (sh *shard[T]) setPeriod(id ID, ticks, phase int64) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i := sh.lookupLive(id)
	if i == nilIdx {
		return
	}
	e := &sh.entries[i]
	old := int64(e.period)
	ticks = min(ticks, math.MaxUint32)
	if ticks == old {
		return
	}
	armed := e.flags&fArmed != 0
	if armed {
		sh.unlinkWheel(i) // its slot depends on the period (wakeOf)
	}
	e.period = uint32(ticks)
	if !armed {
		return
	}
	// The entry is armed one old period after the due tick of its last
	// run (fire, trigger and Done all arm it so): that tick anchors the
	// new grid.
	last := e.deadline - old
	next := last + ticks
	if ticks > old {
		// The stable phase spreads the first gap over the window below
		// the new period, never past it, nor below the old one.
		next = last + max(old, ticks-phase)
	}
	e.deadline = next
	if next <= sh.cur {
		// Due already: a slot of the new grid passed while the run was in
		// flight (BR-10: a follow-up when it ends), or a run is queued now;
		// fire re-arms the entry on the grid after the current tick.
		sh.fire(i)
	} else {
		sh.linkWheel(i)
	}
	sh.s.kickIfBefore(sh.wakeOf(i))
}

func (sh *shard[T]) setLane(id ID, lane uint8) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i := sh.lookup(id)
	if i == nilIdx {
		return
	}
	e := &sh.entries[i]
	if e.flags&fQueued != 0 {
		return // its ready list is e.lane's: move it on a later run
	}
	e.lane = lane
}

func (sh *shard[T]) done(id ID) {
	now := sh.s.clock.Now()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i := sh.lookup(id)
	if i == nilIdx {
		return
	}
	e := &sh.entries[i]
	if e.flags&fRunning == 0 {
		return
	}
	e.flags &^= fRunning
	sh.running--
	if e.flags&fRemoved != 0 {
		sh.free(i)
		return
	}
	switch {
	case e.flags&fTrigger != 0:
		e.flags &^= fTrigger | fPending
		sh.rearm(i, now, time.Duration(e.period)*sh.s.tick)
	case e.flags&fPending != 0:
		e.flags &^= fPending
	default:
		return
	}
	e.due = microsSince(now.Sub(sh.s.start))
	sh.pushReady(i)
}

// wakeOf is the tick at which entry i fires: its deadline, or the end of
// the deadline's coalescing window (Scheduler.wakeTick). Its wheel slot is
// this tick's. Caller holds mu.
func (sh *shard[T]) wakeOf(i int32) int64 {
	e := &sh.entries[i]
	return sh.s.wakeTick(e.deadline, int64(e.period))
}

func (sh *shard[T]) linkWheel(i int32) {
	e := &sh.entries[i]
	slot := sh.wakeOf(i) & sh.mask
	head := sh.slots[slot]
	e.wprev = nilIdx
	e.wnext = head
	if head != nilIdx {
		sh.entries[head].wprev = i
	}
	sh.slots[slot] = i
	e.flags |= fArmed
	sh.armed++
}

func (sh *shard[T]) unlinkWheel(i int32) {
	e := &sh.entries[i]
	if e.wprev != nilIdx {
		sh.entries[e.wprev].wnext = e.wnext
	} else {
		sh.slots[sh.wakeOf(i)&sh.mask] = e.wnext
	}
	if e.wnext != nilIdx {
		sh.entries[e.wnext].wprev = e.wprev
	}
	e.wprev, e.wnext = nilIdx, nilIdx
	e.flags &^= fArmed
	sh.armed--
}

// nextDue returns the first tick after cur whose slot holds an entry, or
// asleep when none is armed. The slot may hold only entries of a later
// revolution: then the wheel wakes early, finds nothing due and looks
// again. Caller holds mu.
func (sh *shard[T]) nextDue() int64 {
	if sh.armed == 0 {
		return asleep
	}
	for n := sh.cur + 1; n <= sh.cur+int64(len(sh.slots)); n++ {
		if sh.slots[n&sh.mask] != nilIdx {
			return n
		}
	}
	return sh.cur + int64(len(sh.slots)) // not reached: armed > 0
}

func (sh *shard[T]) pushReady(i int32) {
	e := &sh.entries[i]
	l := &sh.ready[e.lane]
	e.rnext = nilIdx
	e.rprev = l.tail
	if l.tail != nilIdx {
		sh.entries[l.tail].rnext = i
	} else {
		l.head = i
	}
	l.tail = i
	l.n++
	e.flags |= fQueued
	select {
	case sh.signal[e.lane] <- struct{}{}:
	default:
	}
}

func (sh *shard[T]) popReady(lane int) int32 {
	l := &sh.ready[lane]
	i := l.head
	if i != nilIdx {
		sh.unlinkReady(i)
	}
	return i
}

func (sh *shard[T]) unlinkReady(i int32) {
	e := &sh.entries[i]
	l := &sh.ready[e.lane]
	if e.rprev != nilIdx {
		sh.entries[e.rprev].rnext = e.rnext
	} else {
		l.head = e.rnext
	}
	if e.rnext != nilIdx {
		sh.entries[e.rnext].rprev = e.rprev
	} else {
		l.tail = e.rprev
	}
	e.rprev, e.rnext = nilIdx, nilIdx
	e.flags &^= fQueued
	l.n--
}
