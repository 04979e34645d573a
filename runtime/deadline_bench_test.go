package runtime

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// BenchmarkRunAttemptDeadline measures one Run of a prober that answers at
// once, on the real clock, under a cancelable parent (as the manager's):
// the cost the attempt's deadline (P3) adds to every probe whose handler
// does not wait on its context. docs/benchmarks.md records it in "Attempt
// deadlines on the injected clock" (before and after the deadline moved
// onto Options.Clock) and "The lazy attempt deadline" (context.WithTimeout
// against the lazy context: 4 allocations against 1).
func BenchmarkRunAttemptDeadline(b *testing.B) {
	rt, err := New(Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close(context.Background())
	if err := rt.Register("bench", HandlerFunc(func(*Spec) (Prober, error) {
		return ProberFunc(func(ctx context.Context, _ Target) (Outcome, error) {
			if _, ok := ctx.Deadline(); !ok {
				b.Error("the attempt has no deadline")
			}
			return Outcome{Result: Success}, nil
		}), nil
	})); err != nil {
		b.Fatal(err)
	}
	spec := &Spec{Kind: "bench", Probe: &v1.Probe{TimeoutSeconds: 1}}
	p := rt.Prepare(spec)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if rep := rt.Run(ctx, p, Target{}); rep.Err != nil {
			b.Fatal(rep.Err)
		}
	}
}

// BenchmarkOnInjectedClock is the check a handler adds to each attempt on
// the real clock: a context-value lookup through an attempt's context
// (a timer context over the manager's cancel context).
func BenchmarkOnInjectedClock(b *testing.B) {
	parent, cancelParent := context.WithCancel(context.Background())
	defer cancelParent()
	ctx, cancel := WithTimeout(parent, nil, time.Second)
	defer cancel()
	b.ReportAllocs()
	for b.Loop() {
		if OnInjectedClock(ctx) {
			b.Fatal("a real-clock attempt is marked as injected")
		}
	}
}
