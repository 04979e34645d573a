package runtime

import (
	"context"
	"errors"
	"fmt"
	goruntime "runtime"
	"sync"
	"testing"
	"time"

	"k8s.io/utils/clock"
)

// The attempt deadline on the real clock (P3): WithTimeout's lazy
// context.WithDeadline. These tests hold its contract: a real Deadline at
// once, Err past the deadline whether or not anything waits, a timer only
// for a waiter, the parent's end and cancel seen as context.WithTimeout
// shows them, and contexts derived from it needing no goroutine.

var realClocks = map[string]clock.Clock{"nil": nil, "RealClock": clock.RealClock{}, "*RealClock": &clock.RealClock{}}

// pending reports whether ctx is a lazy deadline with no inner context
// made: no timer armed, no entry in its parent.
func pending(ctx context.Context) bool {
	d, ok := ctx.(*lazyDeadline)
	return ok && d.inner.Load() == nil
}

// waitDone waits up to 10 s of real time (a bound for a broken build
// only) for ctx to be done.
func waitDone(t *testing.T, what string, ctx context.Context) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: not done 10 s after its deadline", what)
	}
}

// isDone reports whether ctx's Done channel is closed now.
func isDone(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return true
	default:
		return false
	}
}

// P3 on the real clock: the attempt reports its real deadline (now +
// timeout) from the start, for every spelling of the real clock, so that
// net.Dialer, net/http and grpc-go bound the attempt by it; it is not
// marked as injected; and nothing is armed by asking.
func TestP3_RealClockAttemptReportsItsDeadline(t *testing.T) {
	for name, c := range realClocks {
		before := time.Now()
		ctx, cancel := WithTimeout(context.Background(), c, time.Minute)
		after := time.Now()
		dl, ok := ctx.Deadline()
		if !ok || dl.Before(before.Add(time.Minute)) || dl.After(after.Add(time.Minute)) {
			t.Errorf("clock %s: Deadline() = %v, %v; want now+1m in [%v, %v]", name, dl, ok, before.Add(time.Minute), after.Add(time.Minute))
		}
		if OnInjectedClock(ctx) {
			t.Errorf("clock %s: marked as injected", name)
		}
		if ctx.Err() != nil {
			t.Errorf("clock %s: Err = %v before the deadline", name, ctx.Err())
		}
		if s := fmt.Sprint(ctx); s != "context.Background.WithDeadline("+dl.String()+")" {
			t.Errorf("clock %s: %%v of the attempt is %q", name, s)
		}
		if !pending(ctx) {
			t.Errorf("clock %s: Deadline, Value, Err and String armed a timer", name)
		}
		cancel()
	}
}

// P3, as context.WithDeadline: a parent's earlier deadline is the
// attempt's.
func TestP3_RealClockAttemptKeepsParentsEarlierDeadline(t *testing.T) {
	parent, cancelParent := context.WithTimeout(context.Background(), time.Second)
	defer cancelParent()
	want, _ := parent.Deadline()
	ctx, cancel := WithTimeout(parent, nil, time.Hour)
	defer cancel()
	if got, ok := ctx.Deadline(); !ok || !got.Equal(want) {
		t.Fatalf("Deadline() = %v, %v; want the parent's %v", got, ok, want)
	}
}

// P3 on the real clock: a handler waiting on Done is woken at the deadline
// of real time, not before, with context.DeadlineExceeded as Err and
// Cause; a value of the parent is still there.
func TestP3_RealClockAttemptEndsOnRealTimeForAWaiter(t *testing.T) {
	type key struct{}
	parent, cancelParent := context.WithCancel(context.WithValue(context.Background(), key{}, "pod"))
	defer cancelParent()
	ctx, cancel := WithTimeout(parent, nil, 5*time.Millisecond)
	defer cancel()
	dl, _ := ctx.Deadline()
	waitDone(t, "the attempt", ctx)
	if now := time.Now(); now.Before(dl) {
		t.Fatalf("done at %v, before its deadline %v", now, dl)
	}
	if ctx.Err() != context.DeadlineExceeded || context.Cause(ctx) != context.DeadlineExceeded {
		t.Fatalf("Err = %v, Cause = %v; want context.DeadlineExceeded", ctx.Err(), context.Cause(ctx))
	}
	if ctx.Value(key{}) != "pod" {
		t.Fatalf("Value lost the parent's value: %v", ctx.Value(key{}))
	}
	if parent.Err() != nil {
		t.Fatal("the attempt's deadline ended its parent")
	}
}

// P3 on the real clock: with nothing waiting (no Done, so no timer), Err
// is context.DeadlineExceeded as soon as the deadline has passed, and Done
// is closed from then on (Err's contract).
func TestP3_RealClockAttemptErrWithoutWaiter(t *testing.T) {
	parent, cancelParent := context.WithCancel(context.Background())
	defer cancelParent()
	ctx, cancel := WithTimeout(parent, nil, time.Microsecond)
	defer cancel()
	dl, _ := ctx.Deadline()
	for time.Now().Before(dl) {
		goruntime.Gosched()
	}
	if !pending(ctx) {
		t.Fatal("armed before anything waited")
	}
	if ctx.Err() != context.DeadlineExceeded || context.Cause(ctx) != context.DeadlineExceeded {
		t.Fatalf("Err = %v, Cause = %v; want context.DeadlineExceeded", ctx.Err(), context.Cause(ctx))
	}
	if !isDone(ctx) {
		t.Fatal("Err is DeadlineExceeded but Done is not closed")
	}
	cancelParent()
	if ctx.Err() != context.DeadlineExceeded || context.Cause(ctx) != context.DeadlineExceeded {
		t.Fatalf("after the parent's cancel: Err = %v, Cause = %v; want context.DeadlineExceeded still", ctx.Err(), context.Cause(ctx))
	}
}

// P3 on the real clock: an attempt nothing waits on costs one allocation
// (the lazy context, 48 B) and arms no timer, where context.WithTimeout
// costs four (the timer context, its timer, the timer's func and the
// cancel func) and joins its parent's children.
func TestP3_RealClockAttemptArmsNoTimerWithoutWaiter(t *testing.T) {
	type key struct{}
	parent, cancelParent := context.WithCancel(context.Background())
	defer cancelParent()
	allocs := testing.AllocsPerRun(1000, func() {
		d := newAttemptDeadline(parent, nil, time.Second)
		if _, ok := d.ctx.Deadline(); !ok || d.ctx.Err() != nil || d.ctx.Value(key{}) != nil || OnInjectedClock(d.ctx) {
			t.Fatal("a pending attempt lost its deadline or ended")
		}
		d.end()
		if d.ctx.Err() != context.Canceled {
			t.Fatalf("Err = %v after end, want context.Canceled", d.ctx.Err())
		}
	})
	if allocs != 1 {
		t.Fatalf("%v allocations per attempt nobody waited on, want 1", allocs)
	}
}

// P3: the parent's end ends the attempt with the parent's Err and Cause,
// as for context.WithTimeout, whether the attempt was waited on or not.
func TestP3_RealClockAttemptEndsWithItsParent(t *testing.T) {
	stop := errors.New("manager closing")
	for _, waited := range []bool{false, true} {
		parent, cancelParent := context.WithCancelCause(context.Background())
		ctx, cancel := WithTimeout(parent, nil, time.Hour)
		if waited {
			_ = ctx.Done()
		}
		cancelParent(stop)
		if waited {
			waitDone(t, "the waited-on attempt", ctx)
		}
		if ctx.Err() != context.Canceled || context.Cause(ctx) != stop || !isDone(ctx) {
			t.Errorf("waited %v: Err = %v, Cause = %v, done %v; want context.Canceled, %v, true", waited, ctx.Err(), context.Cause(ctx), isDone(ctx), stop)
		}
		cancel()
	}
}

// P3: the attempt's cancel ends it with context.Canceled (Err and Cause),
// closes Done and stops the timer: the deadline passing later changes
// nothing.
func TestP3_RealClockAttemptCancel(t *testing.T) {
	for _, waited := range []bool{false, true} {
		ctx, cancel := WithTimeout(context.Background(), nil, 2*time.Millisecond)
		if waited {
			_ = ctx.Done()
		}
		cancel()
		if !isDone(ctx) || ctx.Err() != context.Canceled || context.Cause(ctx) != context.Canceled {
			t.Errorf("waited %v: done %v, Err = %v, Cause = %v; want true, context.Canceled", waited, isDone(ctx), ctx.Err(), context.Cause(ctx))
		}
		if !waited && ctx.(*lazyDeadline).inner.Load() != canceledAttempt {
			t.Errorf("cancel of an attempt nobody waited on armed a timer")
		}
		dl, _ := ctx.Deadline()
		for time.Now().Before(dl.Add(time.Millisecond)) {
			goruntime.Gosched()
		}
		if ctx.Err() != context.Canceled {
			t.Errorf("waited %v: Err = %v after the deadline passed, want context.Canceled still", waited, ctx.Err())
		}
		cancel() // a second cancel does nothing
	}
}

// P3 and the handlers' own contexts: contexts derived from the attempt
// (context.WithCancel, WithTimeout, AfterFunc, as net.Dialer, net/http,
// grpc-go and os/exec derive them) start no goroutine of their own, see
// context.DeadlineExceeded (Err and Cause) when the attempt's deadline
// passes, and context.Canceled when the attempt is canceled.
func TestP3_RealClockAttemptDerivedContexts(t *testing.T) {
	const n = 50
	for _, end := range []string{"deadline", "cancel"} {
		parent, cancelParent := context.WithCancel(context.Background())
		timeout := time.Hour
		if end == "deadline" {
			timeout = 20 * time.Millisecond
		}
		ctx, cancel := WithTimeout(parent, nil, timeout)
		before := goruntime.NumGoroutine()
		var derived []context.Context
		var cancels []func()
		var ran sync.WaitGroup
		for range n {
			c1, cancel1 := context.WithCancel(ctx)
			c2, cancel2 := context.WithTimeout(ctx, time.Hour)
			c3, cancel3 := context.WithCancel(c2)
			ran.Add(1)
			stop := context.AfterFunc(ctx, ran.Done)
			for _, c := range []context.Context{c1, c2, c3} {
				_ = c.Done()
			}
			derived = append(derived, c1, c2, c3)
			cancels = append(cancels, cancel1, cancel2, cancel3, func() { stop() })
		}
		if grown := goruntime.NumGoroutine() - before; grown >= n {
			t.Errorf("%s: %d goroutines started for %d derived contexts", end, grown, 3*n)
		}
		want := context.DeadlineExceeded
		if end == "cancel" {
			want = context.Canceled
			cancel()
		}
		for i, c := range derived {
			waitDone(t, "a derived context", c)
			if c.Err() != want || context.Cause(c) != want {
				t.Fatalf("%s: derived context %d: Err = %v, Cause = %v; want %v", end, i, c.Err(), context.Cause(c), want)
			}
		}
		ran.Wait() // every AfterFunc ran
		if parent.Err() != nil {
			t.Fatalf("%s: the attempt's end ended its parent", end)
		}
		for _, f := range cancels {
			f()
		}
		cancel()
		cancelParent()
	}
}

// P3 under -race: Done, Err, Value and Deadline from many goroutines
// while the attempt is canceled or its deadline passes agree: once Err is
// set it stays, and Done is closed.
func TestP3_RealClockAttemptConcurrentUse(t *testing.T) {
	type key struct{}
	parent := context.WithValue(context.Background(), key{}, 1)
	for i := range 200 {
		ctx, cancel := WithTimeout(parent, nil, time.Duration(i%4)*50*time.Microsecond)
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 20 {
					if g%2 == 0 {
						_ = ctx.Done()
					}
					err := ctx.Err()
					if err != nil {
						if !isDone(ctx) {
							t.Error("Err set while Done is open")
						}
						if again := ctx.Err(); again != err {
							t.Errorf("Err changed from %v to %v", err, again)
						}
					}
					if ctx.Value(key{}) != 1 {
						t.Error("lost the parent's value")
					}
					if _, ok := ctx.Deadline(); !ok {
						t.Error("lost the deadline")
					}
				}
			}()
		}
		if i%2 == 0 {
			cancel()
		}
		wg.Wait()
		cancel()
		if err := ctx.Err(); err != context.Canceled && err != context.DeadlineExceeded {
			t.Fatalf("Err = %v after cancel", err)
		}
	}
}
