package manager

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/probed/probed/runtime"
)

// spanProbe is a handler whose prober notes the span context it runs under
// and when it ran; carries makes it a runtime.TraceCarrier (as plugin
// probers are).
type spanProbe struct {
	carries bool
	mu      sync.Mutex
	seen    trace.SpanContext
	ranAt   time.Time
}

type spanProber struct{ h *spanProbe }

func (p spanProber) Probe(ctx context.Context, _ runtime.Target) (runtime.Outcome, error) {
	p.h.mu.Lock()
	p.h.seen, p.h.ranAt = trace.SpanContextFromContext(ctx), time.Now()
	p.h.mu.Unlock()
	time.Sleep(5 * time.Millisecond) // a run that takes time, in real time as spans do
	return runtime.Outcome{Result: runtime.Success}, nil
}

type carrierProber struct{ spanProber }

func (carrierProber) CarriesTrace() bool { return true }

func (h *spanProbe) Prepare(*runtime.Spec) (runtime.Prober, error) {
	if h.carries {
		return carrierProber{spanProber{h}}, nil
	}
	return spanProber{h}, nil
}

// Issue #6: one span per executed run, covering the run. An in-process
// prober's span is created when the run has ended (so the sampler sees the
// verdict) but starts at the run's start; a prober that carries the trace
// context out of the process (a plugin) runs under its span, so the
// plugin's spans are its children. Either way the span ends after the
// result was applied and carries the same attributes.
//
// The span is timed on the manager's clock (DESIGN: all timing goes through
// Options.Clock): on the real clock it covers the run in real time; on a
// fake clock that does not move during the run it starts and ends at the
// fake clock's now.
func TestProbeSpanCoversTheRun(t *testing.T) {
	for _, tc := range []struct {
		carries, realClock bool
	}{{false, true}, {true, true}, {false, false}, {true, false}} {
		carries := tc.carries
		name := "in-process (deferred span)"
		if carries {
			name = "trace carrier (span before the run)"
		}
		if tc.realClock {
			name += ", real clock"
		} else {
			name += ", fake clock"
		}
		t.Run(name, func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			defer tp.Shutdown(context.Background())
			h := &spanProbe{carries: carries}
			rt, err := runtime.New(runtime.Options{PoolSize: 4, ExecPoolSize: 4, Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = rt.Close(context.Background()) })
			if err := rt.Register(runtime.KindExec, h); err != nil {
				t.Fatal(err)
			}
			e := newTestEnv(t, func(o *Options) {
				o.Runtime = rt
				o.TracerProvider = tp
				if tc.realClock {
					o.Clock = clock.RealClock{}
				}
			})
			e.status.set("traced", runningStatus(fakeNow, true))
			p := podWith("traced", probeOf(runtime.Readiness, execProbe()))
			p.Spec.Containers[0].Name = testContainerName
			e.m.AddPod(context.Background(), p)
			before := time.Now()
			e.runOnce(e.worker("traced", testContainerName, runtime.Readiness))

			spans := rec.Ended()
			if len(spans) != 1 {
				t.Fatalf("%d spans, want 1", len(spans))
			}
			s := spans[0]
			h.mu.Lock()
			seen, ranAt := h.seen, h.ranAt
			h.mu.Unlock()
			if s.Name() != "probe readiness" {
				t.Errorf("span name %q", s.Name())
			}
			if tc.realClock {
				if s.StartTime().Before(before) || s.StartTime().After(ranAt) {
					t.Errorf("span starts at %v; the run started after %v and probed at %v", s.StartTime(), before, ranAt)
				}
				if s.EndTime().Before(ranAt.Add(5 * time.Millisecond)) {
					t.Errorf("span ends at %v, before the run ended (%v + 5 ms)", s.EndTime(), ranAt)
				}
			} else if now := e.clk.Now(); !s.StartTime().Equal(now) || !s.EndTime().Equal(now) {
				t.Errorf("span from %v to %v, want both at the fake clock's %v", s.StartTime(), s.EndTime(), now)
			}
			if carries != seen.IsValid() || (carries && seen.SpanID() != s.SpanContext().SpanID()) {
				t.Errorf("the prober ran under span %v (valid %v); the probe span is %v, carrier %v", seen.SpanID(), seen.IsValid(), s.SpanContext().SpanID(), carries)
			}
			attrs := map[string]string{}
			for _, a := range s.Attributes() {
				attrs[string(a.Key)] = a.Value.Emit()
			}
			for k, want := range map[string]string{
				"k8s.pod.uid": "traced", "k8s.container.name": testContainerName, "prober.type": "readiness",
				"prober.handler": "exec", "prober.result": "success", "prober.applied": "true", "prober.changed": "true",
				"prober.attempt": "1", "process.executable.name": "true",
			} {
				if attrs[k] != want {
					t.Errorf("attribute %s = %q, want %q (all: %v)", k, attrs[k], want, attrs)
				}
			}
		})
	}
}

// The prebuilt start attributes of a deferred span say what resultAttribute
// and the changed flag say, for every verdict and for an errored run.
func TestVerdictOptionMatchesResultAttribute(t *testing.T) {
	reps := []runtime.Report{{Err: errFake}}
	for r := runtime.Unknown; r <= runtime.Failure+1; r++ {
		reps = append(reps, runtime.Report{Outcome: runtime.Outcome{Result: r}})
	}
	for _, rep := range reps {
		for _, changed := range []bool{false, true} {
			cfg := trace.NewSpanStartConfig(verdictOption(rep, changed))
			got := cfg.Attributes()
			want := []string{resultAttribute(rep).Value.AsString(), map[bool]string{false: "false", true: "true"}[changed]}
			if len(got) != 2 || got[0].Key != "prober.result" || got[0].Value.AsString() != want[0] ||
				got[1].Key != "prober.changed" || got[1].Value.Emit() != want[1] {
				t.Errorf("verdictOption(%+v, %v) = %v, want prober.result=%s prober.changed=%s", rep, changed, got, want[0], want[1])
			}
		}
	}
}

// OpenTelemetry's unset global provider is recognised by
// identity and behaviour, not by its type's name: the delegating default
// starts nothing, an SDK provider does.
func TestUnsetGlobalTracerProviderIsRecognisedByBehaviour(t *testing.T) {
	if unsetGlobal() == nil {
		t.Fatal("the global provider was never set, but unsetGlobal did not recognise it")
	}
	if !startsNothing(otel.GetTracerProvider()) {
		t.Fatal("the unset global provider starts spans")
	}
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	if startsNothing(tp) {
		t.Fatal("an SDK provider was taken for the unset global")
	}
	if !runtime.IsRealClock(clock.RealClock{}) || runtime.IsRealClock(testingclock.NewFakeClock(time.Now())) {
		t.Fatal("runtime.IsRealClock")
	}
}
