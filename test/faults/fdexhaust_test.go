//go:build linux

package faults

import (
	"context"
	"errors"
	"net"
	nethttp "net/http"
	"net/http/httptest"
	"strings"
	"testing"

	ggrpc "google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	v1 "k8s.io/api/core/v1"

	"github.com/probed/probed/internal/fdtest"
	"github.com/probed/probed/runtime"
)

// TestProberOutOfDescriptors (P5): every built-in handler
// (http, tcp, grpc, exec) run by the real runtime in a process whose
// descriptor table is full ends errored with a *runtime.LocalResourceError
// (EMFILE) after runtime.MaxAttempts attempts — never a Failure of its
// healthy target, which the kubelet would count (its handlers map every
// dial error to Failure) — and succeeds against the same target once
// descriptors are free again.
func TestProberOutOfDescriptors(t *testing.T) {
	if !fdtest.InChild() {
		fdtest.RunChild(t)
		return
	}
	web := httptest.NewServer(nethttp.HandlerFunc(func(nethttp.ResponseWriter, *nethttp.Request) {}))
	defer web.Close()
	webPort := web.Listener.Addr().(*net.TCPAddr).Port

	grpcLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := ggrpc.NewServer()
	healthpb.RegisterHealthServer(gs, health.NewServer()) // "" is SERVING
	go func() { _ = gs.Serve(grpcLn) }()
	defer gs.Stop()
	grpcProbe := &v1.Probe{TimeoutSeconds: 1, ProbeHandler: v1.ProbeHandler{GRPC: &v1.GRPCAction{Port: int32(grpcLn.Addr().(*net.TCPAddr).Port)}}}

	r := newRig(t)
	probes := map[string]*v1.Probe{
		runtime.KindHTTP: httpProbe("/", webPort),
		runtime.KindTCP:  tcpProbe(webPort),
		runtime.KindGRPC: grpcProbe,
		runtime.KindExec: execProbe("true"),
	}
	prepared := map[string]*runtime.Prepared{}
	for kind, probe := range probes {
		spec := &runtime.Spec{Kind: kind, ProbeType: runtime.Liveness, Pod: pod, Container: &v1.Container{Name: "app"}, Probe: probe}
		prepared[kind] = r.rt.Prepare(spec)
	}
	run := func(kind string) runtime.Report {
		return r.rt.Run(context.Background(), prepared[kind], runtime.Target{PodIP: "127.0.0.1", ContainerID: "containerd://faults"})
	}

	release := fdtest.Exhaust(t)
	exhausted := map[string]runtime.Report{}
	for kind := range probes {
		exhausted[kind] = run(kind)
	}
	release()

	for kind, rep := range exhausted {
		var lre *runtime.LocalResourceError
		if !errors.As(rep.Err, &lre) || lre.Reason != "EMFILE" || rep.Outcome.Result != runtime.Unknown || rep.Attempts != runtime.MaxAttempts {
			t.Errorf("%s under a full descriptor table: result %v, err %v, attempts %d; want errored with EMFILE after %d attempts",
				kind, rep.Outcome.Result, rep.Err, rep.Attempts, runtime.MaxAttempts)
			continue
		}
		if !strings.Contains(rep.Err.Error(), "too many open files") {
			t.Errorf("%s: error %q does not keep the cause", kind, rep.Err)
		}
		t.Logf("%s: %v", kind, rep.Err)
	}
	for kind := range probes {
		if rep := run(kind); rep.Err != nil || rep.Outcome.Result != runtime.Success {
			t.Errorf("%s with descriptors free: result %v, err %v, output %q; want Success", kind, rep.Outcome.Result, rep.Err, rep.Outcome.Output)
		}
	}
}
