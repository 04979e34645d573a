package runtime

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// fixedHandler answers every attempt with the same outcome and error and
// counts the attempts.
type fixedHandler struct {
	out   Outcome
	err   error
	calls atomic.Int64
	// deadlines records whether each attempt's ctx carried a deadline of
	// about the probe's timeout.
	deadlineOK atomic.Bool
}

func (h *fixedHandler) Prepare(spec *Spec) (Prober, error) {
	return ProberFunc(func(ctx context.Context, t Target) (Outcome, error) {
		h.calls.Add(1)
		if dl, ok := ctx.Deadline(); ok {
			left := time.Until(dl)
			h.deadlineOK.Store(left > spec.Timeout()-time.Second && left <= spec.Timeout())
		}
		return h.out, h.err
	}), nil
}

func testSpec(pt ProbeType, kind string) *Spec {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "uid-1"},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app"}}}}
	return &Spec{
		Kind:      kind,
		ProbeType: pt,
		Pod:       pod,
		Container: &pod.Spec.Containers[0],
		Probe:     &v1.Probe{TimeoutSeconds: 3},
	}
}

func newTestRuntime(t *testing.T) *Runtime {
	t.Helper()
	rt, err := New(Options{PoolSize: 2, SlowPoolSize: 2, ExecPoolSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	return rt
}

// PR1 TestProbe (spec §8.3), P1–P6: the verdict of each handler result and
// the retries of P2. The events of P5/P6 (PR4 formats) are recorded from
// the run's record by the manager's observer (manager.ProbeEvents).
func TestPR1_ProbeResults(t *testing.T) {
	cases := []struct {
		name       string
		out        Outcome
		err        error
		wantResult Result
		wantErr    bool
		attempts   int64
	}{
		{"success", Outcome{Result: Success, Output: "ok"}, nil, Success, false, 1},
		{"warning", Outcome{Result: Warning, Output: "careful"}, nil, Warning, false, 1},
		{"failure", Outcome{Result: Failure, Output: "broken"}, nil, Failure, false, 1},
		{"unknown without error", Outcome{Result: Unknown}, nil, Unknown, false, 1},
		{"error: retried three times", Outcome{Result: Unknown}, errors.New("boom"), Unknown, true, 3},
	}
	for _, pt := range []ProbeType{Liveness, Readiness, Startup} {
		for _, c := range cases {
			t.Run(pt.String()+"/"+c.name, func(t *testing.T) {
				rt := newTestRuntime(t)
				h := &fixedHandler{out: c.out, err: c.err}
				if err := rt.Register("fixed", h); err != nil {
					t.Fatal(err)
				}
				rep := rt.Run(context.Background(), rt.Prepare(testSpec(pt, "fixed")), Target{PodIP: "127.0.0.1"})
				if rep.Outcome.Result != c.wantResult || (rep.Err != nil) != c.wantErr {
					t.Fatalf("report = %v, %v; want %v, error %v", rep.Outcome.Result, rep.Err, c.wantResult, c.wantErr)
				}
				if got := h.calls.Load(); got != c.attempts || int64(rep.Attempts) != c.attempts {
					t.Fatalf("attempts = %d (report %d), want %d (P2)", got, rep.Attempts, c.attempts)
				}
				if !h.deadlineOK.Load() {
					t.Fatal("the attempt's context did not carry the 3 s timeout as its deadline (P3)")
				}
			})
		}
	}
}

// P4: a probe without a handler is errored on every run with the kubelet's
// message, naming the pod as format.Pod does.
func TestP4_MissingHandler(t *testing.T) {
	rt := newTestRuntime(t)
	rep := rt.Run(context.Background(), rt.Prepare(testSpec(Readiness, "")), Target{})
	want := "missing probe handler for web_ns(uid-1):app"
	if rep.Err == nil || rep.Err.Error() != want {
		t.Fatalf("error = %v, want %q", rep.Err, want)
	}
}

// P1/P4: the kind of a v1.Probe follows the kubelet's order: exec, httpGet,
// tcpSocket, grpc.
func TestP4_KindOrder(t *testing.T) {
	all := &v1.Probe{ProbeHandler: v1.ProbeHandler{
		Exec: &v1.ExecAction{}, HTTPGet: &v1.HTTPGetAction{}, TCPSocket: &v1.TCPSocketAction{}, GRPC: &v1.GRPCAction{},
	}}
	for _, want := range []string{KindExec, KindHTTP, KindTCP, KindGRPC} {
		if got := KindOf(all); got != want {
			t.Fatalf("KindOf = %q, want %q", got, want)
		}
		switch want {
		case KindExec:
			all.Exec = nil
		case KindHTTP:
			all.HTTPGet = nil
		case KindTCP:
			all.TCPSocket = nil
		}
	}
	if KindOf(&v1.Probe{}) != "" || KindOf(nil) != "" {
		t.Fatal("KindOf of a probe without handler is not empty")
	}
}

// Lanes: exec probes run in their own lane; a network probe moves to the
// slow lane after a run of half its timeout or more and back after a run
// under a quarter of it.
func TestLanes(t *testing.T) {
	if LaneOf(KindExec) != LaneExec || LaneOf(KindHTTP) != LaneNetwork || LaneOf("redis") != LaneNetwork {
		t.Fatal("LaneOf")
	}
	to := time.Second
	for _, c := range []struct {
		lane int
		took time.Duration
		want int
	}{
		{LaneNetwork, 10 * time.Millisecond, LaneNetwork},
		{LaneNetwork, 500 * time.Millisecond, LaneSlow},
		{LaneSlow, 300 * time.Millisecond, LaneSlow},
		{LaneSlow, 200 * time.Millisecond, LaneNetwork},
		{LaneExec, 5 * time.Second, LaneExec},
	} {
		if got := NextLane(c.lane, c.took, to); got != c.want {
			t.Errorf("NextLane(%d, %v) = %d, want %d", c.lane, c.took, got, c.want)
		}
	}
}
