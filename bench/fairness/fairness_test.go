// Package fairness measures what a hostile pod does to the other pods of a
// node: real HTTP targets on loopback, probed's real manager
// and HTTP handler on the real clock, and the victims' lateness with and
// without the hostile pod, with and without the pool shares.
//
//	cd bench && go test -run '^$' -bench . -benchtime 1x -timeout 30m ./fairness
//
// A run takes -fairness.window (default 60 s) per case; the figures are in
// docs/benchmarks.md ("A hostile pod beside others").
package fairness

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/probed/probed/manager"
	"github.com/probed/probed/manager/results"
	probedruntime "github.com/probed/probed/runtime"
)

var (
	window  = flag.Duration("fairness.window", 60*time.Second, "how long each case runs")
	hostile = flag.Int("fairness.hostile-probes", 300, "probes of the hostile pod")
	victims = flag.Int("fairness.victims", 20, "pods beside it, one probe each")
)

// The review's case: the hostile pod's probes (period 1 s, timeout 20 s)
// hit a target whose every other response hangs until the prober gives up,
// which defeats the slow lane (a fast run moves the probe back to the
// network lane, where its next run hangs); the victims' probes (period 1 s,
// timeout 1 s) hit a healthy target. Pools: probed's defaults (256 network,
// 1024 slow).
const (
	victimPeriod   = time.Second
	hostilePeriod  = time.Second
	hostileTimeout = 20
)

// BenchmarkHostilePod reports, per case, the victims' fewest runs in the
// window (of window/period expected), their largest gap between two runs,
// and the p99 of their lateness (gap − period).
func BenchmarkHostilePod(b *testing.B) {
	for _, c := range []struct {
		name              string
		hostile           bool
		podShare, nsShare float64
	}{
		{"alone", false, 0.125, 0.25},
		{"hostile/no-shares", true, 0, 0},
		{"hostile/shares", true, 0.125, 0.25},
	} {
		b.Run(c.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				r := scenario(b, c.hostile, c.podShare, c.nsShare)
				b.ReportMetric(float64(r.minRuns), "victim-min-runs")
				b.ReportMetric(float64(r.expected), "victim-expected-runs")
				b.ReportMetric(r.maxGap.Seconds(), "victim-max-gap-s")
				b.ReportMetric(float64(r.p99Late.Milliseconds()), "victim-p99-late-ms")
				b.ReportMetric(float64(r.parked), "parked-runs")
			}
		})
	}
}

type result struct {
	minRuns, expected int
	maxGap, p99Late   time.Duration
	parked            uint64
}

// observer records the start of every victim run.
type observer struct {
	mu   sync.Mutex
	runs map[types.UID][]time.Time
}

func (o *observer) ProbeRan(rec manager.RunRecord) {
	if rec.Namespace != "victims" {
		return
	}
	o.mu.Lock()
	o.runs[rec.PodUID] = append(o.runs[rec.PodUID], rec.Start)
	o.mu.Unlock()
}

type statuses struct {
	mu sync.Mutex
	m  map[types.UID]v1.PodStatus
}

func (s *statuses) GetPodStatus(uid types.UID) (v1.PodStatus, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.m[uid]
	return st, ok
}

func scenario(b *testing.B, withHostile bool, podShare, nsShare float64) result {
	b.StopTimer()
	healthy := serve(b, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	var n atomic.Uint64
	hang := serve(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1)%2 == 0 {
			<-r.Context().Done() // hangs until the prober gives up
		}
	}))
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	rt, err := probedruntime.New(probedruntime.Options{PodShare: podShare, NamespaceShare: nsShare, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	if err := manager.RegisterBuiltins(rt, nil); err != nil {
		b.Fatal(err)
	}
	obs := &observer{runs: map[types.UID][]time.Time{}}
	st := &statuses{m: map[types.UID]v1.PodStatus{}}
	rms := []results.Manager{results.NewManager(), results.NewManager(), results.NewManager()}
	mi, err := manager.New(manager.Options{Status: st, Runtime: rt, Observer: obs, Logger: quiet,
		Liveness: rms[0], Readiness: rms[1], Startup: rms[2]})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var drain sync.WaitGroup
	for _, rm := range rms {
		drain.Add(1)
		go func(ch <-chan results.Update) {
			defer drain.Done()
			for {
				select {
				case <-ch:
				case <-ctx.Done():
					return
				}
			}
		}(rm.Updates())
	}
	defer func() {
		cancel()
		drain.Wait()
	}()

	var pods []*v1.Pod
	if withHostile {
		pods = append(pods, pod("hostile", "hostile-0", *hostile, hang, hostilePeriod, hostileTimeout))
	}
	for i := 0; i < *victims; i++ {
		pods = append(pods, pod("victims", fmt.Sprintf("victim-%d", i), 1, healthy, victimPeriod, 1))
	}
	st.mu.Lock()
	for _, p := range pods {
		st.m[p.UID] = running(p)
	}
	st.mu.Unlock()
	b.StartTimer()
	start := time.Now()
	for _, p := range pods {
		mi.AddPod(ctx, p)
	}
	time.Sleep(*window)
	b.StopTimer()
	parked := uint64(0)
	for _, ps := range rt.Stats() {
		parked += ps.ParkedTotal
	}
	closeCtx, closeCancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer closeCancel()
	if err := mi.Close(closeCtx); err != nil {
		b.Fatal(err)
	}
	if err := rt.Close(closeCtx); err != nil {
		b.Fatal(err)
	}

	obs.mu.Lock()
	defer obs.mu.Unlock()
	r := result{minRuns: 1 << 30, expected: int(*window / victimPeriod), parked: parked}
	var lates []time.Duration
	end := start.Add(*window)
	for _, p := range pods[len(pods)-*victims:] {
		runs := obs.runs[p.UID]
		r.minRuns = min(r.minRuns, len(runs))
		prev := start
		for _, t := range append(runs, end) {
			gap := t.Sub(prev)
			if prev != start { // the first run is spread over the first period
				r.maxGap = max(r.maxGap, gap)
				lates = append(lates, max(gap-victimPeriod, 0))
			}
			prev = t
		}
	}
	sort.Slice(lates, func(i, j int) bool { return lates[i] < lates[j] })
	if len(lates) > 0 {
		r.p99Late = lates[len(lates)*99/100]
	}
	return r
}

// pod is a pod of n containers, each with an HTTP readiness probe of port.
func pod(ns, name string, n, port int, period time.Duration, timeout int32) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "/" + name)}}
	for i := 0; i < n; i++ {
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: fmt.Sprintf("c%d", i), ReadinessProbe: &v1.Probe{
			ProbeHandler:  v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/", Port: intstr.FromInt(port), Scheme: v1.URISchemeHTTP}},
			PeriodSeconds: int32(period / time.Second), TimeoutSeconds: timeout, SuccessThreshold: 1, FailureThreshold: 3,
		}})
	}
	return p
}

// running is the pod's status with every container running and started,
// on 127.0.0.1, since an hour.
func running(p *v1.Pod) v1.PodStatus {
	st := v1.PodStatus{Phase: v1.PodRunning, PodIP: "127.0.0.1"}
	started := true
	for i, c := range p.Spec.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses, v1.ContainerStatus{
			Name: c.Name, ContainerID: fmt.Sprintf("bench://%s-%d", p.UID, i), Started: &started,
			State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(time.Now().Add(-time.Hour))}},
		})
	}
	return st
}

// serve serves h on a loopback port until the benchmark ends.
func serve(b *testing.B, h http.Handler) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(l) }()
	b.Cleanup(func() { _ = srv.Close() })
	return l.Addr().(*net.TCPAddr).Port
}
