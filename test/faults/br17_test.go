package faults

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
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
// {on, 0} it is zero). The probes have the case's timing: period 1 s and
// the API default timeout of 1 s.
//
// Long (60 s) and timing-bound: skipped with -short, and under -race, where
// a 2-core CI machine running it next to other test packages stretches
// loopback round trips past the 1 s timeout (runs of up to 1.6 s were
// measured at load 5.7) — that would be the machine, not the churn. .ci/run
// runs it on its own without the race detector.
func TestBR17_ConnectionChurnAtDensity(t *testing.T) {
	if testing.Short() {
		t.Skip("60 s of probing; runs without -short")
	}
	if raceEnabled {
		t.Skip("timing-bound (1 s timeouts at 600 connections/s); .ci/run runs it without -race")
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
	obs := &churnObserver{msgs: map[string]int{}}
	m, err := manager.New(manager.Options{Status: status, Liveness: res[0], Readiness: res[1], Startup: res[2],
		MetricsRegisterer: reg, Logger: slog.New(slog.DiscardHandler), Observer: obs})
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

	t.Logf("60 s: %v successful runs, %v failed, %d HTTP requests, p99 run %v, longest %v; load %s", okRuns, failedRuns, httpReqs.Load(), obs.p99(), obs.longest(), loadAvg())
	if failedRuns != 0 || failures.Load() != 0 {
		t.Fatalf("%v failed probe runs and %d Failure results against healthy targets (BR-17: zero); why: %s", failedRuns, failures.Load(), obs.why())
	}
	// BR-17: p99 probe latency well under 1 s.
	if p99 := obs.p99(); p99 > 500*time.Millisecond {
		t.Errorf("p99 probe duration %v, want well under the 1 s timeout (BR-17)", p99)
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

// churnObserver keeps the longest run and the messages of the runs that did
// not succeed, so that a failure says why.
type churnObserver struct {
	mu   sync.Mutex
	max  time.Duration
	durs []time.Duration
	msgs map[string]int
}

func (o *churnObserver) ProbeRan(rec manager.RunRecord) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.max = max(o.max, rec.Duration)
	o.durs = append(o.durs, rec.Duration)
	if rec.Message == "" {
		return
	}
	key := fmt.Sprintf("%v: %s", rec.ProbeType, rec.Message)
	if _, ok := o.msgs[key]; ok || len(o.msgs) < 20 {
		o.msgs[key]++
	}
}

func (o *churnObserver) longest() time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.max.Round(time.Millisecond)
}

// p99 is the 99th percentile of the runs' durations.
func (o *churnObserver) p99() time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.durs) == 0 {
		return 0
	}
	d := append([]time.Duration(nil), o.durs...)
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[len(d)*99/100]
}

func (o *churnObserver) why() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var parts []string
	for msg, n := range o.msgs {
		parts = append(parts, fmt.Sprintf("%d× %s", n, msg))
	}
	sort.Strings(parts)
	return strings.Join(parts, "; ")
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
