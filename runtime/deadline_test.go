package runtime

import (
	"context"
	"errors"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	testingclock "k8s.io/utils/clock/testing"
)

// waitFor polls cond every millisecond for up to 10 s of real time; the
// bound only keeps a broken build from hanging.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// P3 on an injected clock: the attempt's context ends when the fake clock
// passes the timeout, with context.DeadlineExceeded, in itself and in every
// context derived from it, and reports no real-time deadline.
func TestP3_AttemptDeadlineOnFakeClock(t *testing.T) {
	fc := testingclock.NewFakeClock(time.Now())
	ctx, cancel := WithTimeout(context.Background(), fc, 30*time.Second)
	defer cancel()
	child, cancelChild := context.WithCancel(ctx)
	defer cancelChild()
	grandchild, cancelGrandchild := context.WithTimeout(child, time.Hour)
	defer cancelGrandchild()
	if _, ok := ctx.Deadline(); ok {
		t.Fatal("the attempt reports a real-time deadline")
	}
	if !OnInjectedClock(ctx) || !OnInjectedClock(grandchild) {
		t.Fatal("OnInjectedClock is false for the attempt or a context derived from it")
	}
	fc.Step(30*time.Second - time.Nanosecond)
	if err := grandchild.Err(); err != nil {
		t.Fatalf("before the deadline: Err = %v", err)
	}
	fc.Step(time.Nanosecond)
	for name, c := range map[string]context.Context{"attempt": ctx, "child": child, "grandchild": grandchild} {
		select {
		case <-c.Done():
		default:
			t.Fatalf("%s: not done when Step returned", name)
		}
		if c.Err() != context.DeadlineExceeded || !errors.Is(context.Cause(c), context.DeadlineExceeded) {
			t.Fatalf("%s: Err = %v, Cause = %v, want context.DeadlineExceeded", name, c.Err(), context.Cause(c))
		}
	}
	cancel()
	if fc.HasWaiters() {
		t.Fatal("the fake clock still has the attempt's timer")
	}
}

// P3: the attempt ends with its parent, keeps the parent's error, and its
// cancel releases the injected clock's timer.
func TestP3_AttemptDeadlineOnFakeClockFollowsParent(t *testing.T) {
	fc := testingclock.NewFakeClock(time.Now())
	parent, cancelParent := context.WithCancel(context.Background())
	ctx, cancel := WithTimeout(parent, fc, time.Second)
	defer cancel()
	child, cancelChild := context.WithCancel(ctx)
	defer cancelChild()
	cancelParent()
	waitFor(t, "the attempt to end with its parent", func() bool { return child.Err() != nil })
	if ctx.Err() != context.Canceled || child.Err() != context.Canceled {
		t.Fatalf("Err = %v / %v, want context.Canceled", ctx.Err(), child.Err())
	}
	cancel()
	if fc.HasWaiters() {
		t.Fatal("the fake clock still has the attempt's timer")
	}
}

// P3 through Run: with a fake clock, an attempt that has not answered ends
// when the clock passes timeoutSeconds (30 s here, so a deadline on real
// time would not end it within the wait), and nothing is cut before.
func TestP3_RunTimeoutOnFakeClock(t *testing.T) {
	fc := testingclock.NewFakeClock(time.Now())
	rt, err := New(Options{Clock: fc})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	if err := rt.Register("hang", HandlerFunc(func(*Spec) (Prober, error) {
		return ProberFunc(func(ctx context.Context, _ Target) (Outcome, error) {
			<-ctx.Done()
			if ctx.Err() == context.DeadlineExceeded {
				return Outcome{Result: Failure, Output: "timed out"}, nil
			}
			return Outcome{Result: Unknown}, ctx.Err()
		}), nil
	})); err != nil {
		t.Fatal(err)
	}
	p := rt.Prepare(&Spec{Kind: "hang", Probe: &v1.Probe{TimeoutSeconds: 30}})
	done := make(chan Report, 1)
	go func() { done <- rt.Run(context.Background(), p, Target{}) }()
	waitFor(t, "the attempt's timer on the fake clock", fc.HasWaiters)
	fc.Step(29 * time.Second)
	select {
	case rep := <-done:
		t.Fatalf("the attempt ended before the fake clock reached its deadline: %+v", rep)
	default:
	}
	fc.Step(time.Second)
	select {
	case rep := <-done:
		if rep.Err != nil || rep.Outcome.Result != Failure || rep.Attempts != 1 {
			t.Fatalf("report %+v, want one attempt ending in the handler's timeout Failure", rep)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the attempt did not end when the fake clock passed its deadline")
	}
}
