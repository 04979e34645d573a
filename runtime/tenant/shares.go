package tenant

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
)

// MaxMin divides total units among demands by max-min fairness (water
// filling): each demand gets what it asks up to a common level, and the
// level is the highest the total allows, so that what the modest demands
// leave goes to the others in equal parts. out[i] is demands[i]'s share;
// out[i] <= demands[i] (a negative demand counts as 0), and the shares add
// up to min(total, the sum of the demands). The units a level cannot split
// evenly go one each to the largest demands, the first of them in demands'
// order. O(n log n).
//
// Example: 1000 runs a second among demands of 900, 300 and 50: 50 for the
// third, then 475 each for the others (a level of 475), but the second asks
// only 300, so the first gets 650: [650 300 50].
func MaxMin(total int64, demands []int64) []int64 {
	out := make([]int64, len(demands))
	if total <= 0 || len(demands) == 0 {
		return out
	}
	order := make([]int, len(demands))
	for i := range order {
		order[i] = i
	}
	// Ascending demand; among equal demands the later index first, so that
	// the remainder (handed out from the end of order) goes to the first.
	slices.SortStableFunc(order, func(a, b int) int {
		da, db := max(demands[a], 0), max(demands[b], 0)
		switch {
		case da < db:
			return -1
		case da > db:
			return 1
		}
		return b - a
	})
	left := total
	for k, i := range order {
		d := max(demands[i], 0)
		n := int64(len(order) - k)
		if level := left / n; d > level {
			// Every demand from here on is over the level: each gets it,
			// and the remainder goes one each to the largest.
			extra := left % n
			for j, r := range order[k:] {
				out[r] = level
				if int64(len(order)-k-j) <= extra {
					out[r]++
				}
			}
			return out
		}
		out[i] = d
		left -= d
	}
	return out
}

// ErrTooLarge: a Take or TryTake asks for more units than one key may ever
// hold (the cap, or the whole budget).
var ErrTooLarge = errors.New("tenant: more units than one namespace may hold")

// Shares divides a node-wide budget of units (restart workers, bytes,
// thousandths of a run a second: any whole quantity) among keys
// (namespaces) by max-min fairness: a key may
// take units while what it holds stays within its fair share of the budget
// among the keys that ask — those that hold units or wait for them — and
// units are free. Its methods are safe for concurrent use.
//
// A key's demand is what it holds plus what it waits for (plus, for the
// call deciding, what it asks), capped at Cap; its fair share is its part
// of MaxMin(units, demands), rounded up (so the shares may add up to a few
// units more than the budget: a take needs free units too). A key that
// holds nothing may always take one unit that is free, so no key starves
// when more keys ask than there are units. Shares never takes units back:
// a key that took units while others did not ask holds them until it puts
// them back; it gets no more until it is under its share again, and
// waiters are served first come, first served among those whose share
// allows them (a large ask may wait while smaller ones after it fit;
// Over says how far a key is over, for an owner that can reclaim). A
// waiter is a Take (which blocks) or a Ticket of Queue (which does not:
// for an owner that asks again later, such as an admission).
type Shares[K comparable] struct {
	mu      sync.Mutex
	units   int64
	cap     int64
	held    int64 // by every key
	keys    map[K]*account
	waiters []*waiter[K] // in arrival order
}

// account is one key's part: present while it holds or waits.
type account struct {
	held, waiting int64
}

type waiter[K comparable] struct {
	key   K
	n     int64
	ready chan struct{} // closed when granted
}

// NewShares returns a budget of units. capPerKey bounds what one key may
// hold whatever the others ask (an operator's "namespace share" flag ×
// units, see Slots); 0 or more than units: no bound beyond the fair share.
func NewShares[K comparable](units, capPerKey int64) *Shares[K] {
	if capPerKey <= 0 || capPerKey > units {
		capPerKey = units
	}
	return &Shares[K]{units: units, cap: capPerKey, keys: map[K]*account{}}
}

// Units is the budget; Cap what one key may hold at most.
func (s *Shares[K]) Units() int64 { return s.units }
func (s *Shares[K]) Cap() int64   { return s.cap }

// Free is the units no key holds now.
func (s *Shares[K]) Free() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.units - s.held
}

// TryTake takes n units for k and reports true when k's share allows it
// and the units are free; otherwise it takes nothing and reports false.
// Errors: ErrTooLarge when n can never fit (more than Cap), a non-positive
// n.
func (s *Shares[K]) TryTake(k K, n int64) (bool, error) {
	if err := s.check(n); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.fits(k, n) {
		return false, nil
	}
	s.take(k, n)
	return true, nil
}

// Take takes n units for k, waiting for them while k's share or the free
// units do not allow it; it returns ctx's error if ctx ends first (nothing
// taken). Errors as TryTake's.
func (s *Shares[K]) Take(ctx context.Context, k K, n int64) error {
	t, err := s.Queue(k, n)
	if err != nil {
		return err
	}
	select {
	case <-t.Ready():
		return nil
	case <-ctx.Done():
	}
	// Granted meanwhile or not, the units are given back.
	t.Cancel()
	return ctx.Err()
}

// Ticket is an ask for units that Queue could not grant at once: it waits
// among the waiters (its units count in its key's demand, so the keys that
// hold more than their share get no more meanwhile) and is granted when
// its key's share and the free units allow, in order with the others,
// without a goroutine of its own. For an owner that cannot block (an
// admission asked again later) where Take would.
type Ticket[K comparable] struct {
	s        *Shares[K]
	w        *waiter[K]
	canceled bool // s.mu
}

// Queue asks n units for k: granted at once when TryTake would take them
// (the ticket is Granted), else queued as a waiter. The caller ends the
// ticket with Cancel when it no longer wants the units (those granted are
// then given back), or keeps them, putting them back with Put like
// TryTake's. Errors as TryTake's.
func (s *Shares[K]) Queue(k K, n int64) (*Ticket[K], error) {
	if err := s.check(n); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	w := &waiter[K]{key: k, n: n, ready: make(chan struct{})}
	t := &Ticket[K]{s: s, w: w}
	if s.fits(k, n) {
		// No waiter fits (they are granted as soon as they do), so this
		// takes nothing a waiter could have.
		s.take(k, n)
		close(w.ready)
		return t, nil
	}
	s.waiters = append(s.waiters, w)
	s.account(k).waiting += n
	return t, nil
}

// Ready is closed when the ticket's units are granted.
func (t *Ticket[K]) Ready() <-chan struct{} { return t.w.ready }

// Granted reports whether the ticket's units were granted (and not
// canceled since).
func (t *Ticket[K]) Granted() bool {
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	return !t.canceled && t.granted()
}

func (t *Ticket[K]) granted() bool {
	select {
	case <-t.w.ready:
		return true
	default:
		return false
	}
}

// Cancel ends the ticket: a waiting ask is withdrawn (the others' shares
// may grow: waiters that fit now are granted), granted units are given
// back. Once is enough; more calls do nothing.
func (t *Ticket[K]) Cancel() {
	s, w := t.s, t.w
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.canceled {
		return
	}
	t.canceled = true
	if t.granted() {
		s.putLocked(w.key, w.n)
		return
	}
	s.waiters = slices.DeleteFunc(s.waiters, func(x *waiter[K]) bool { return x == w })
	a := s.keys[w.key]
	a.waiting -= w.n
	s.forget(w.key, a)
	// Its demand is gone: others' shares may have grown.
	s.grantLocked()
}

// Put gives back n units k took, and hands free units to the waiters whose
// share allows them, in their order.
func (s *Shares[K]) Put(k K, n int64) {
	if n <= 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.putLocked(k, n)
}

// Share is k's fair share now among the keys that ask (k counted as one of
// them, with what it holds and waits for, at least one unit).
func (s *Shares[K]) Share(k K) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	extra := int64(1)
	if a := s.keys[k]; a != nil && a.held+a.waiting > 0 {
		extra = 0
	}
	return s.share(k, extra)
}

// Held is what k holds now; Waiting what it waits for.
func (s *Shares[K]) Held(k K) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a := s.keys[k]; a != nil {
		return a.held
	}
	return 0
}

// Waiting is what k waits for now (its Takes under way).
func (s *Shares[K]) Waiting(k K) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a := s.keys[k]; a != nil {
		return a.waiting
	}
	return 0
}

// Over is how many units k holds beyond its fair share now (0 when it is
// within it): what an owner that can take units back (refuse a pod it
// admitted, say) would reclaim from k.
func (s *Shares[K]) Over(k K) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.keys[k]
	if a == nil {
		return 0
	}
	return max(0, a.held-s.share(k, 0))
}

func (s *Shares[K]) check(n int64) error {
	switch {
	case n <= 0:
		return fmt.Errorf("tenant: %d units asked, want 1 or more", n)
	case n > s.cap:
		return fmt.Errorf("%w: %d units asked, at most %d", ErrTooLarge, n, s.cap)
	}
	return nil
}

// fits reports whether k may take n units now (s.mu held).
func (s *Shares[K]) fits(k K, n int64) bool {
	if n > s.units-s.held {
		return false
	}
	var held int64
	if a := s.keys[k]; a != nil {
		held = a.held
	}
	limit := s.share(k, n)
	if held == 0 {
		// A key holding nothing never starves while units are free, even
		// when more keys ask than there are units.
		limit = max(limit, 1)
	}
	return held+n <= limit
}

// share is k's fair share with its demand raised by extra (s.mu held).
func (s *Shares[K]) share(k K, extra int64) int64 {
	keys := make([]K, 0, len(s.keys)+1)
	demands := make([]int64, 0, len(s.keys)+1)
	at := -1
	for key, a := range s.keys {
		d := a.held + a.waiting
		if key == k {
			at = len(keys)
			d += extra
		}
		keys = append(keys, key)
		demands = append(demands, min(d, s.cap))
	}
	if at < 0 {
		at = len(keys)
		keys = append(keys, k)
		demands = append(demands, min(extra, s.cap))
	}
	// Rounded up: the level, not the part of the remainder k happens to
	// get in the map's order.
	return min(demands[at], level(s.units, demands))
}

// level is the water level of MaxMin(units, demands), rounded up.
func level(units int64, demands []int64) int64 {
	shares := MaxMin(units, demands)
	var top int64
	for i, sh := range shares {
		if sh < demands[i] {
			top = max(top, sh) // held back: at the level (or one under it)
		}
	}
	if top == 0 {
		// Nobody held back: every demand is met.
		return units
	}
	return top
}

func (s *Shares[K]) account(k K) *account {
	a := s.keys[k]
	if a == nil {
		a = &account{}
		s.keys[k] = a
	}
	return a
}

func (s *Shares[K]) take(k K, n int64) {
	s.account(k).held += n
	s.held += n
}

func (s *Shares[K]) putLocked(k K, n int64) {
	a := s.keys[k]
	if a == nil {
		return
	}
	n = min(n, a.held)
	a.held -= n
	s.held -= n
	s.forget(k, a)
	s.grantLocked()
}

// forget drops an account that holds and waits for nothing.
func (s *Shares[K]) forget(k K, a *account) {
	if a.held == 0 && a.waiting == 0 {
		delete(s.keys, k)
	}
}

// grantLocked hands free units to the waiters that fit, in their order
// (s.mu held).
func (s *Shares[K]) grantLocked() {
	for i := 0; i < len(s.waiters) && s.held < s.units; {
		w := s.waiters[i]
		a := s.keys[w.key]
		// w's own units are part of its key's demand already.
		a.waiting -= w.n
		ok := s.fits(w.key, w.n)
		a.waiting += w.n
		if !ok {
			i++
			continue
		}
		a.waiting -= w.n
		s.take(w.key, w.n)
		close(w.ready)
		s.waiters = slices.Delete(s.waiters, i, i+1)
	}
	if len(s.waiters) == 0 {
		s.waiters = nil
	}
}
