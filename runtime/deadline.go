package runtime

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
)

// This file is the one place a probe attempt's deadline (spec P3) is made:
// DESIGN.md has all timing go through the injected clock (manager
// Options.Clock), and the attempt deadline is no exception.
//
// On the real clock WithTimeout returns a lazy context.WithDeadline
// (lazyDeadline): it reports the real deadline at once (handlers'
// net.Dialer, http.Client and command runner bound the attempt by it, as
// they would context.WithTimeout's), but it arms no timer and joins no
// parent until something needs one. Most attempts of an instant handler
// (exec in a runtime that answers at once, a plugin's cached verdict) never
// wait on their context: for them the deadline is one allocation of 48 B,
// with no timer and no entry in the parent's children
// (BenchmarkRunAttemptDeadline, docs/benchmarks.md "The lazy attempt
// deadline"). The first Done, or an Err past the deadline or after the
// parent ended, makes the real context.WithDeadline(parent, deadline) and
// hands everything over to it, so a handler that waits sees exactly what
// context.WithTimeout gives (Err, Cause, derived contexts, and the
// context package's own no-goroutine path for contexts derived from it),
// for two allocations (80 B) more than context.WithTimeout alone.
//
// On any other clock (a k8s.io/utils/clock/testing FakeClock) the context
// is cut when that clock passes the deadline, with
// context.DeadlineExceeded as its Err, as a real deadline would be,
// however little real time has passed; and it never ends on real time.
// Such a context reports no Deadline (its deadline is not an instant of
// real time), so handlers that bound an attempt by a real-time timer of
// their own (net.Dialer.Timeout, http.Client.Timeout, a command runner's
// timeout) must leave it to the context when OnInjectedClock says so.

// IsRealClock reports whether c is the real clock (k8s.io/utils/clock
// RealClock) or nil, which means the real clock throughout probed.
func IsRealClock(c clock.PassiveClock) bool {
	switch c.(type) {
	case nil, clock.RealClock, *clock.RealClock:
		return true
	}
	return false
}

// WithTimeout returns ctx bounded by timeout on clk: the context of one
// probe attempt (P3).
//
// With the real clock (IsRealClock) it behaves as context.WithTimeout(ctx,
// timeout) to whoever uses it: Deadline is now+timeout (or ctx's deadline
// when that is earlier), Err is context.DeadlineExceeded once the deadline
// has passed, ctx's Err once ctx is done, context.Canceled after cancel,
// and Cause, Value and derived contexts are context.WithDeadline's. Its
// timer is armed only when Done is first called (lazyDeadline): an attempt
// whose handler never waits costs one small allocation and no timer.
// Otherwise the returned context is done when clk passes now+timeout (Err
// context.DeadlineExceeded, Cause the same) or when ctx is done (ctx's
// Err), whichever comes first; its Deadline is ctx's, and OnInjectedClock
// reports true for it and every context derived from it. A clock with
// AfterFunc (clock.WithDelayedExecution, as FakeClock) runs the expiry
// synchronously from the call that moves it past the deadline
// (FakeClock.Step), so the attempt is cut when Step returns, and needs no
// goroutine; another clock's timer is waited for by a goroutine that ends
// with the attempt. Always call the cancel function: it stops the clock's
// timer.
func WithTimeout(ctx context.Context, clk clock.Clock, timeout time.Duration) (context.Context, context.CancelFunc) {
	a := newAttemptDeadline(ctx, clk, timeout)
	if a.lazy != nil {
		return a.lazy, a.lazy.cancel
	}
	return a.ctx, a.cancel
}

// attemptDeadline is what WithTimeout makes, before it is a (context,
// CancelFunc) pair. Run holds it as it is: on the real clock end is a
// direct call, where WithTimeout's CancelFunc is a func value of its own
// (one more allocation per attempt).
type attemptDeadline struct {
	ctx    context.Context
	lazy   *lazyDeadline      // the real clock's (ctx is lazy), or nil
	cancel context.CancelFunc // an injected clock's
}

// newAttemptDeadline is WithTimeout(ctx, clk, timeout) as an attemptDeadline.
func newAttemptDeadline(ctx context.Context, clk clock.Clock, timeout time.Duration) attemptDeadline {
	if IsRealClock(clk) {
		d := newLazyDeadline(ctx, timeout)
		return attemptDeadline{ctx: d, lazy: d}
	}
	c, cancel := withClockTimeout(ctx, clk, timeout)
	return attemptDeadline{ctx: c, cancel: cancel}
}

// end is the attempt's cancel: call it once the attempt has returned.
func (a attemptDeadline) end() {
	if a.lazy != nil {
		a.lazy.cancel()
		return
	}
	a.cancel()
}

// withClockTimeout is WithTimeout on an injected clock: a clockDeadline.
func withClockTimeout(ctx context.Context, clk clock.Clock, timeout time.Duration) (context.Context, context.CancelFunc) {
	d := &clockDeadline{parent: ctx, done: make(chan struct{})}
	// Whatever derives from d (the handler's own contexts, net/http's,
	// grpc-go's) derives from a real cancelCtx, which takes d's Err when d
	// ends: DeadlineExceeded after the clock passed the deadline.
	attempt, cancelAttempt := context.WithCancel(d)
	d.stopParent = context.AfterFunc(ctx, func() { d.end(ctx.Err()) })
	if af, ok := clk.(clock.WithDelayedExecution); ok {
		d.timer = af.AfterFunc(timeout, func() { d.end(context.DeadlineExceeded) })
	} else {
		// A clock without AfterFunc: one goroutine per attempt waits
		// for its timer; it ends with the attempt.
		d.timer = clk.NewTimer(timeout)
		go func() {
			select {
			case <-d.timer.C():
				d.end(context.DeadlineExceeded)
			case <-d.done:
			}
		}()
	}
	return attempt, func() {
		cancelAttempt()
		d.timer.Stop()
		d.stopParent()
		d.end(context.Canceled)
	}
}

// OnInjectedClock reports whether ctx's attempt deadline was set by
// WithTimeout on a clock other than the real one (or marked so by
// WithInjectedDeadline). Then ctx reports no Deadline, is cut when that
// clock passes the deadline, and no real-time timer may bound the attempt
// besides it.
func OnInjectedClock(ctx context.Context) bool {
	return ctx.Value(clockDeadlineKey{}) != nil
}

// WithInjectedDeadline returns ctx marked as bounded by an attempt
// deadline on an injected clock that ctx's own cancellation enforces
// (OnInjectedClock reports true). The plugin SDK marks so the context of a
// request whose host runs its deadline on an injected clock: the plugin
// cannot see that clock, and the host cancels the call when it passes the
// deadline.
func WithInjectedDeadline(ctx context.Context) context.Context {
	return context.WithValue(ctx, clockDeadlineKey{}, injectedMark{})
}

type (
	clockDeadlineKey struct{}
	injectedMark     struct{}
)

// clockDeadline is the context behind WithTimeout on an injected clock. It
// is done by end: the clock's timer, its parent's end, or the attempt's
// cancel. It implements the AfterFunc method the context package looks for
// (afterFuncer), so a context derived from it needs no goroutine to learn
// that it ended.
type clockDeadline struct {
	parent     context.Context
	done       chan struct{}
	timer      clock.Timer
	stopParent func() bool

	mu     sync.Mutex
	err    error
	notify []*afterEnd
}

type afterEnd struct{ f func() }

func (d *clockDeadline) Deadline() (time.Time, bool) { return d.parent.Deadline() }
func (d *clockDeadline) Done() <-chan struct{}       { return d.done }

func (d *clockDeadline) Err() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err
}

func (d *clockDeadline) Value(key any) any {
	if key == (clockDeadlineKey{}) {
		return d
	}
	return d.parent.Value(key)
}

// AfterFunc arranges for f to run once d has ended; stop unregisters it,
// reporting whether it did so before f ran. f runs synchronously in end
// (the context package registers its children's cancel here, which only
// takes their own locks), or in a goroutine of its own when d had already
// ended (the caller may hold a lock f takes).
func (d *clockDeadline) AfterFunc(f func()) (stop func() bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.err != nil {
		go f()
		return func() bool { return false }
	}
	e := &afterEnd{f: f}
	d.notify = append(d.notify, e)
	return func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		for i, x := range d.notify {
			if x == e {
				d.notify = append(d.notify[:i], d.notify[i+1:]...)
				return true
			}
		}
		return false
	}
}

// end makes d done with err, once; later calls do nothing.
func (d *clockDeadline) end(err error) {
	d.mu.Lock()
	if d.err != nil {
		d.mu.Unlock()
		return
	}
	d.err = err
	close(d.done)
	notify := d.notify
	d.notify = nil
	d.mu.Unlock()
	for _, e := range notify {
		e.f()
	}
}

// lazyDeadline is WithTimeout's context on the real clock: the context
// context.WithDeadline(parent, deadline) would be, made only when it is
// needed. While it is pending (inner nil) it answers from parent and the
// clock reading alone: Deadline at once, Err by comparing time.Now with
// the deadline and asking parent, Value from parent. The first Done, or
// an Err that finds the deadline passed or parent ended, makes inner, the
// real context.WithDeadline(parent, deadline), and from then on every
// method answers from it (Value from it first: it names itself as the
// enclosing cancel context, which is what lets the context package attach
// contexts derived from this one to it directly, with no goroutine, and
// gives Cause the deadline's or parent's cause). cancel while pending sets
// inner to canceledAttempt, an already canceled context that costs
// nothing.
//
// It has no AfterFunc method (the context package's "afterFuncer"): the
// context package reaches for one only when a context is neither done nor
// backed by a cancel context whose Done it shares, and once Done has been
// called this one is always one of the two.
//
// It is not pooled: a handler may keep its context after the attempt
// (net/http's and grpc-go's goroutines do), so a reused one could end an
// attempt it does not belong to. Pending, it is 48 bytes; inner, when
// made, is set once (compare-and-swap, no lock).
type lazyDeadline struct {
	parent   context.Context
	deadline time.Time
	inner    atomic.Pointer[deadlineContext]
}

// deadlineContext is a lazyDeadline's inner context and its cancel (nil
// for canceledAttempt).
type deadlineContext struct {
	ctx    context.Context
	cancel context.CancelFunc
}

// canceledAttempt is the inner context of a lazyDeadline canceled before
// anything waited on it: done, Err and Cause context.Canceled, and no
// values but the context package's own key for its enclosing cancel
// context (so Cause(attempt) is Canceled, as after context.WithTimeout's
// cancel); the parent's values are asked for after it.
var canceledAttempt = func() *deadlineContext {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return &deadlineContext{ctx: ctx}
}()

// newLazyDeadline returns parent bounded by timeout on the real clock; its
// deadline is parent's when that is earlier, as for context.WithDeadline.
func newLazyDeadline(parent context.Context, timeout time.Duration) *lazyDeadline {
	deadline := time.Now().Add(timeout)
	if cur, ok := parent.Deadline(); ok && cur.Before(deadline) {
		deadline = cur
	}
	return &lazyDeadline{parent: parent, deadline: deadline}
}

// real returns the inner context, making it (context.WithDeadline, whose
// timer is armed then) if it is not made yet.
func (d *lazyDeadline) real() context.Context {
	if in := d.inner.Load(); in != nil {
		return in.ctx
	}
	ctx, cancel := context.WithDeadline(d.parent, d.deadline)
	if d.inner.CompareAndSwap(nil, &deadlineContext{ctx: ctx, cancel: cancel}) {
		return ctx
	}
	// Another goroutine made it, or cancel ran, first.
	cancel()
	return d.inner.Load().ctx
}

// Deadline is the attempt's deadline on the real clock, always set.
func (d *lazyDeadline) Deadline() (time.Time, bool) { return d.deadline, true }

// Done makes the real deadline context (arming its timer and joining
// parent) and returns its channel.
func (d *lazyDeadline) Done() <-chan struct{} { return d.real().Done() }

// Err is nil until the deadline passes, parent ends or cancel is called;
// then context.DeadlineExceeded, parent's Err or context.Canceled, as
// context.WithDeadline's, whether or not anything waited on Done.
func (d *lazyDeadline) Err() error {
	if in := d.inner.Load(); in != nil {
		return in.ctx.Err()
	}
	if d.parent.Err() == nil && time.Now().Before(d.deadline) {
		return nil
	}
	// Ended while nobody waited: the real context, made now, ends at
	// once with the same error (its timer is never armed), so that Done
	// is closed from now on, as Err's contract has it.
	return d.real().Err()
}

// Value answers from the inner context once it is made (the context
// package's key for the enclosing cancel context finds it), then from
// parent.
func (d *lazyDeadline) Value(key any) any {
	if in := d.inner.Load(); in != nil {
		if v := in.ctx.Value(key); v != nil {
			return v
		}
	}
	return d.parent.Value(key)
}

// String names the context as context.WithDeadline's does (for logs and
// %v), without its internals.
func (d *lazyDeadline) String() string {
	return fmt.Sprint(d.parent) + ".WithDeadline(" + d.deadline.String() + ")"
}

// cancel ends the attempt with context.Canceled (if it has not ended) and
// releases the timer and the parent's entry if they were armed.
func (d *lazyDeadline) cancel() {
	if d.inner.CompareAndSwap(nil, canceledAttempt) {
		return
	}
	if in := d.inner.Load(); in.cancel != nil {
		in.cancel()
	}
}
