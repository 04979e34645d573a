package grpc_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	ggrpc "google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/probed/probed/runtime"
)

// blockingHealth holds every Check until the call ends; arrived receives
// one value per call.
type blockingHealth struct {
	healthpb.UnimplementedHealthServer
	arrived chan struct{}
}

func (h *blockingHealth) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	h.arrived <- struct{}{}
	<-ctx.Done()
	return nil, ctx.Err()
}

type attemptResult struct {
	out runtime.Outcome
	err error
}

// probeOnFakeClock starts one attempt against 127.0.0.1 whose deadline,
// the spec's timeoutSeconds, runs on fc as runtime.Run makes it.
func probeOnFakeClock(p runtime.Prober, fc *testingclock.FakeClock, timeout time.Duration) <-chan attemptResult {
	done := make(chan attemptResult, 1)
	ctx, cancel := runtime.WithTimeout(context.Background(), fc, timeout)
	go func() {
		defer cancel()
		out, err := p.Probe(ctx, runtime.Target{PodIP: "127.0.0.1", Attempt: 1})
		done <- attemptResult{out, err}
	}()
	return done
}

func awaitAttempt(t *testing.T, done <-chan attemptResult) attemptResult {
	t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("the attempt was not cut when the fake clock passed its deadline")
		return attemptResult{}
	}
}

// G2 on a fake clock: a health RPC that has not completed when the fake
// clock passes timeoutSeconds (30 s: a real-time deadline would not end it
// within the wait) is the kubelet's RPC timeout Failure.
func TestG2_RPCTimeoutOnFakeClock(t *testing.T) {
	h := &blockingHealth{arrived: make(chan struct{}, 1)}
	port := serve(t, listen(t, "127.0.0.1:0"), func(s *ggrpc.Server) { healthpb.RegisterHealthServer(s, h) })
	spec := grpcSpec(port, nil, nil)
	spec.Probe.TimeoutSeconds = 30
	fc := testingclock.NewFakeClock(time.Now())
	done := probeOnFakeClock(prepare(t, spec), fc, spec.Timeout())
	select {
	case <-h.arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the health RPC did not reach the server")
	}
	fc.Step(spec.Timeout())
	r := awaitAttempt(t, done)
	want(t, r.out, r.err, runtime.Failure, "timeout: health rpc did not complete within 30s")
}

// G2 on a fake clock: a target that refuses connections until the fake
// clock passes timeoutSeconds is the kubelet's connect timeout Failure.
func TestG2_ConnectTimeoutOnFakeClock(t *testing.T) {
	port := closedPort(t, "127.0.0.1")
	spec := grpcSpec(port, nil, nil)
	spec.Probe.TimeoutSeconds = 30
	fc := testingclock.NewFakeClock(time.Now())
	done := probeOnFakeClock(prepare(t, spec), fc, spec.Timeout())
	fc.Step(spec.Timeout())
	r := awaitAttempt(t, done)
	want(t, r.out, r.err, runtime.Failure, fmt.Sprintf("timeout: failed to connect service %q within 30s: context deadline exceeded", fmt.Sprintf("127.0.0.1:%d", port)))
}

// G1 on a fake clock: a health check answered after more real time than
// timeoutSeconds, while the fake clock stays before the deadline, is not
// cut off: Success.
func TestG1_NotCutOnRealTimeOnFakeClock(t *testing.T) {
	h := &recordingHealth{delay: 1300 * time.Millisecond, slept: make(chan struct{}, 1)}
	port := serve(t, listen(t, "127.0.0.1:0"), func(s *ggrpc.Server) { healthpb.RegisterHealthServer(s, h) })
	spec := grpcSpec(port, nil, nil)
	fc := testingclock.NewFakeClock(time.Now())
	r := awaitAttempt(t, probeOnFakeClock(prepare(t, spec), fc, spec.Timeout()))
	want(t, r.out, r.err, runtime.Success, "service healthy")
	<-h.slept
}
