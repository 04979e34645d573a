package faults

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/probed/probed/manager"
	"github.com/probed/probed/manager/results"
)

type statusMap map[types.UID]v1.PodStatus

func (m statusMap) GetPodStatus(uid types.UID) (v1.PodStatus, bool) {
	st, ok := m[uid]
	return st, ok
}

// BR-17 (connection churn at density; spec SC1 at full length): 300 pods,
// each with a TCP readiness probe and an HTTP liveness probe, period 1 s —
// 600 connections per second — against ONE TCP listener and ONE HTTP
// listener on 127.0.0.1, for 60 s through the real manager and handlers:
// no Failure at all, and no prober socket left behind (no ESTABLISHED or
// CLOSE_WAIT build-up; probed's own TIME-WAIT stays bounded — with SO_LINGER
// {on, 0} it is zero). Long: skipped with -short; CI runs it.
func TestBR17_ConnectionChurnAtDensity(t *testing.T) {
	if testing.Short() {
		t.Skip("60 s of probing; runs without -short")
	}
	// The TCP target accepts and closes; the HTTP target answers 200.
	tcpLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	acceptDone := make(chan struct{})
	go func() {
		defer close(acceptDone)
		for {
			c, err := tcpLn.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	defer func() { tcpLn.Close(); <-acceptDone }()
	var httpReqs atomic.Int64
	httpLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		httpReqs.Add(1)
		io.WriteString(w, "ok")
	})}
	go srv.Serve(httpLn)
	defer srv.Close()
	tcpPort := tcpLn.Addr().(*net.TCPAddr).Port
	httpPort := httpLn.Addr().(*net.TCPAddr).Port

	const pods = 300
	status := statusMap{}
	var podList []*v1.Pod
	started := true
	for i := 0; i < pods; i++ {
		uid := types.UID("churn-" + strconv.Itoa(i))
		p := &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "p" + strconv.Itoa(i), Namespace: "br17", UID: uid},
			Spec: v1.PodSpec{Containers: []v1.Container{{
				Name: "c",
				ReadinessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(int32(tcpPort))}},
					PeriodSeconds: 1, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3},
				LivenessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(int32(httpPort)), Scheme: v1.URISchemeHTTP}},
					PeriodSeconds: 1, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3},
			}}},
		}
		podList = append(podList, p)
		status[uid] = v1.PodStatus{Phase: v1.PodRunning, PodIP: "127.0.0.1", ContainerStatuses: []v1.ContainerStatus{{
			Name: "c", ContainerID: "test://" + string(uid), Started: &started,
			State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(time.Now().Add(-time.Minute))}},
		}}}
	}
	reg := prometheus.NewRegistry()
	var failures atomic.Int64
	res := []results.Manager{results.NewManager(), results.NewManager(), results.NewManager()}
	stop := make(chan struct{})
	drained := make(chan struct{}, 3)
	for _, rm := range res {
		go func(ch <-chan results.Update) {
			defer func() { drained <- struct{}{} }()
			for {
				select {
				case u := <-ch:
					if u.Result == results.Failure {
						failures.Add(1)
					}
				case <-stop:
					return
				}
			}
		}(rm.Updates())
	}
	m, err := manager.New(manager.Options{Status: status, Liveness: res[0], Readiness: res[1], Startup: res[2],
		MetricsRegisterer: reg, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range podList {
		m.AddPod(context.Background(), p)
	}
	time.Sleep(60 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	failedRuns := counter(t, reg, "failed") + counter(t, reg, "unknown")
	okRuns := counter(t, reg, "successful")
	if err := manager.Drain(ctx, m); err != nil {
		t.Fatal(err)
	}
	close(stop)
	for range res {
		<-drained
	}

	t.Logf("60 s: %v successful runs, %v failed, %d HTTP requests; load %s", okRuns, failedRuns, httpReqs.Load(), loadAvg())
	if failedRuns != 0 || failures.Load() != 0 {
		t.Fatalf("%v failed probe runs and %d Failure results against healthy targets (BR-17: zero)", failedRuns, failures.Load())
	}
	// 600 probes a second for 60 s, the first within a second: at least 90%.
	if okRuns < 0.9*600*60 {
		t.Fatalf("only %v probe runs succeeded in 60 s, want about 36,000", okRuns)
	}
	for _, port := range []int{tcpPort, httpPort} {
		tw, late := expectNoProberSockets(t, port, nil)
		if late != nil {
			t.Logf("sockets to :%d took %v to go", port, late)
		}
		if tw > 0 {
			t.Errorf("%d prober TIME_WAIT sockets to :%d; probed closes with SO_LINGER {on, 0}", tw, port)
		}
	}
}

// counter sums prober_probe_total for one result label.
func counter(t *testing.T, reg *prometheus.Registry, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != manager.MetricProbeTotal {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}
