package manager

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/probed/probed/manager/results"
	"github.com/probed/probed/runtime"
)

// recordingRunner is an ExecRunner that records what it was asked to run
// and exits with a set status.
type recordingRunner struct {
	mu     sync.Mutex
	calls  []string
	status int
}

type exitStatus int

func (e exitStatus) Error() string   { return "exit status " + strconv.Itoa(int(e)) }
func (e exitStatus) ExitStatus() int { return int(e) }

func (r *recordingRunner) RunInContainer(_ context.Context, containerID string, cmd []string, _ time.Duration) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, fmt.Sprint(containerID, " ", cmd))
	if r.status != 0 {
		return []byte("not ok"), exitStatus(r.status)
	}
	return []byte("ok"), nil
}

// PR3 (TestNewProber, as it applies): New without a Runtime wires the
// kubelet's four handlers — exec through Options.ExecRunner, http, tcp and
// grpc — each giving real verdicts against real targets (a healthy and an
// unhealthy one per kind, so a handler that always succeeds fails here).
func TestPR3_NewWithoutRuntimeWiresBuiltinHandlers(t *testing.T) {
	httpSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/bad" {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	defer httpSrv.Close()
	httpPort := httpSrv.Listener.Addr().(*net.TCPAddr).Port

	tcpLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcpLn.Close()
	go func() {
		for {
			c, err := tcpLn.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := closed.Addr().(*net.TCPAddr).Port
	closed.Close()

	grpcLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	hs := health.NewServer()
	hs.SetServingStatus("down", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
	go gs.Serve(grpcLn)
	defer gs.Stop()
	grpcPort := int32(grpcLn.Addr().(*net.TCPAddr).Port)
	down := "down"

	probe := func(h v1.ProbeHandler) *v1.Probe {
		return &v1.Probe{ProbeHandler: h, TimeoutSeconds: 1, PeriodSeconds: 1, SuccessThreshold: 1, FailureThreshold: 1}
	}
	cases := []struct {
		name       string
		handler    v1.ProbeHandler
		exitStatus int
		want       results.Result
	}{
		{"exec success", v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"check", "--quick"}}}, 0, results.Success},
		{"exec exit 3", v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"check", "--quick"}}}, 3, results.Failure},
		{"http 200", v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/ok", Port: intstr.FromInt32(int32(httpPort))}}, 0, results.Success},
		{"http 500", v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/bad", Port: intstr.FromInt32(int32(httpPort))}}, 0, results.Failure},
		{"tcp open", v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(int32(tcpLn.Addr().(*net.TCPAddr).Port))}}, 0, results.Success},
		{"tcp refused", v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(int32(closedPort))}}, 0, results.Failure},
		{"grpc serving", v1.ProbeHandler{GRPC: &v1.GRPCAction{Port: grpcPort}}, 0, results.Success},
		{"grpc not serving", v1.ProbeHandler{GRPC: &v1.GRPCAction{Port: grpcPort, Service: &down}}, 0, results.Failure},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			runner := &recordingRunner{status: tc.exitStatus}
			e := newTestEnv(t, func(o *Options) { o.Runtime = nil; o.ExecRunner = runner })
			if !e.m.ownRT {
				t.Fatal("New without a Runtime built none")
			}
			e.status.set("pr3", runningStatus(fakeNow, true))
			p := podWith("pr3", probeOf(runtime.Readiness, probe(tc.handler)))
			e.m.AddPod(context.Background(), p)
			w := e.worker("pr3", testContainerName, runtime.Readiness)
			e.runOnce(w)
			e.expectCached(runtime.Readiness, tc.want)
			if tc.handler.Exec != nil {
				runner.mu.Lock()
				calls := runner.calls
				runner.mu.Unlock()
				if want := testContainerID + " [check --quick]"; len(calls) != 1 || calls[0] != want {
					t.Fatalf("runner calls %q, want one %q (the container ID and the exact argv, PR2)", calls, want)
				}
			}
		})
	}
}
