package grpc_test

import (
	"context"
	"testing"
	"time"

	ggrpc "google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/probed/probed/internal/standin"
	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/egress"
)

// TestEgressPolicyReachesTheDialer: grpc-go dials with its own context,
// so the prober hands the attempt's policy to its dialer: a target the
// policy does not allow is never connected to (the server accepts
// nothing) and the Failure's Cause is the policy's refusal. The spec's
// 200 ms timeout keeps the connect retries short.
func TestEgressPolicyReachesTheDialer(t *testing.T) {
	t.Parallel()
	lis := &countingListener{Listener: listen(t, "127.0.0.1:0")}
	port := healthServer(t, lis, nil)
	spec := grpcSpec(port, nil, nil)
	spec.Milliseconds = &runtime.Milliseconds{Timeout: -800}
	p := prepare(t, spec)

	out, err := p.Probe(standin.PodContext(t, time.Second, "10.9.9.9"), runtime.Target{PodIP: "127.0.0.1", Attempt: 1})
	if err != nil || out.Result != runtime.Failure || !egress.IsDenied(out.Cause) {
		t.Fatalf("outcome (%v, %q, cause %v, %v), want a Failure caused by the egress policy", out.Result, out.Output, out.Cause, err)
	}
	if n := lis.accepted.Load(); n != 0 {
		t.Fatalf("the server accepted %d connections", n)
	}
	out, err = p.Probe(standin.PodContext(t, time.Second, "127.0.0.1"), runtime.Target{PodIP: "127.0.0.1", Attempt: 1})
	want(t, out, err, runtime.Success, "service healthy")
}

// denyingHealth answers every Check with a status message of its choice.
type denyingHealth struct {
	healthpb.UnimplementedHealthServer
}

func (denyingHealth) Check(context.Context, *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	return nil, status.Error(codes.PermissionDenied, "SSH-2.0-OpenSSH_9.2p1 secret from the server")
}

// TestEgressWithholdsTheServersMessages: under a policy the texts keep the
// kubelet's form and the status code but not the server's message (G2's
// texts quote it); without one they are the kubelet's exactly.
func TestEgressWithholdsTheServersMessages(t *testing.T) {
	t.Parallel()
	denying := serve(t, listen(t, "127.0.0.1:0"), func(s *ggrpc.Server) { healthpb.RegisterHealthServer(s, denyingHealth{}) })
	bare := serve(t, listen(t, "127.0.0.1:0"), nil)

	got, err, _ := probe(t, prepare(t, grpcSpec(denying, nil, nil)), "127.0.0.1")
	want(t, got, err, runtime.Failure, "error: health rpc probe failed: rpc error: code = PermissionDenied desc = SSH-2.0-OpenSSH_9.2p1 secret from the server")
	got, err = prepare(t, grpcSpec(denying, nil, nil)).Probe(standin.PodContext(t, time.Second, "127.0.0.1"), runtime.Target{PodIP: "127.0.0.1", Attempt: 1})
	want(t, got, err, runtime.Failure, "error: health rpc probe failed: rpc error: code = PermissionDenied desc = "+egress.WithheldText)

	got, err = prepare(t, grpcSpec(bare, nil, nil)).Probe(standin.PodContext(t, time.Second, "127.0.0.1"), runtime.Target{PodIP: "127.0.0.1", Attempt: 1})
	want(t, got, err, runtime.Failure, "error: this server does not implement the grpc health protocol (grpc.health.v1.Health): "+egress.WithheldText)
}
