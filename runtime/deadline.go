package runtime

import (
	"context"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// This file is the one place a probe attempt's deadline (spec P3) is made:
// DESIGN.md has all timing go through the injected clock (manager
// Options.Clock), and the attempt deadline is no exception.
//
// On the real clock WithTimeout is context.WithTimeout, nothing more: no
// goroutine, no timer and no allocation beyond it (BenchmarkRunAttemptDeadline,
// docs/benchmarks.md). On any other clock (a k8s.io/utils/clock/testing
// FakeClock) the context is cut when that clock passes the deadline, with
// context.DeadlineExceeded as its Err, as a real deadline would be, however
// little real time has passed; and it never ends on real time. Such a
// context reports no Deadline (its deadline is not an instant of real time),
// so handlers that bound an attempt by a real-time timer of their own
// (net.Dialer.Timeout, http.Client.Timeout, a command runner's timeout)
// must leave it to the context when OnInjectedClock says so.

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
// With the real clock (IsRealClock) it is context.WithTimeout(ctx, timeout).
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
	if IsRealClock(clk) {
		return context.WithTimeout(ctx, timeout)
	}
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
