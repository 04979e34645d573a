package runtime

import (
	"context"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestPrepareResolvesLateHandler: a probe prepared while no handler served
// its kind is errored until a handler registers, then runs with it.
func TestPrepareResolvesLateHandler(t *testing.T) {
	rt, err := New(Options{PoolSize: 1, ExecPoolSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	spec := &Spec{
		Kind:      "late",
		ProbeType: Readiness,
		Pod:       &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"}},
		Container: &v1.Container{Name: "c"},
		Probe:     &v1.Probe{TimeoutSeconds: 1},
		Plugin:    &PluginAction{Name: "late"},
	}
	p := rt.Prepare(spec)
	if err := p.Err(); err == nil || !strings.Contains(err.Error(), `no handler serves probe kind "late"`) {
		t.Fatalf("Err() = %v, want the no-handler error", err)
	}
	rep := rt.Run(context.Background(), p, Target{PodIP: "10.0.0.1"})
	if rep.Err == nil {
		t.Fatalf("Run before registration: %+v, want an error", rep)
	}
	prepared := 0
	if err := rt.Register("late", HandlerFunc(func(s *Spec) (Prober, error) {
		prepared++
		if s != spec {
			t.Errorf("Prepare got another spec")
		}
		return ProberFunc(func(context.Context, Target) (Outcome, error) {
			return Outcome{Result: Success, Output: "ok"}, nil
		}), nil
	})); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		rep = rt.Run(context.Background(), p, Target{PodIP: "10.0.0.1"})
		if rep.Err != nil || rep.Outcome.Result != Success {
			t.Fatalf("Run %d after registration: %+v, want success", i, rep)
		}
	}
	if prepared != 1 {
		t.Errorf("handler prepared the probe %d times, want once", prepared)
	}
	if p.Err() != nil {
		t.Errorf("Err() after resolution = %v", p.Err())
	}
}

// TestPrepareKeepsHandlerErrors: an error from a handler's Prepare is kept;
// it is not retried on every run.
func TestPrepareKeepsHandlerErrors(t *testing.T) {
	rt, err := New(Options{PoolSize: 1, ExecPoolSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	calls := 0
	_ = rt.Register("bad", HandlerFunc(func(*Spec) (Prober, error) {
		calls++
		return nil, errSentinel
	}))
	p := rt.Prepare(&Spec{Kind: "bad", Probe: &v1.Probe{}})
	for i := 0; i < 2; i++ {
		if rep := rt.Run(context.Background(), p, Target{}); rep.Err != errSentinel {
			t.Fatalf("Run: %+v", rep)
		}
	}
	if calls != 1 {
		t.Errorf("Prepare called %d times, want 1", calls)
	}
}

type sentinel struct{}

func (sentinel) Error() string { return "sentinel" }

var errSentinel error = sentinel{}
