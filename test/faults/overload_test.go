//go:build linux

package faults

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/probed/probed/manager"
	"github.com/probed/probed/manager/results"
	"github.com/probed/probed/runtime"
)

// slowTarget is the HTTP endpoint of the overload test: every probe has its
// own path /w/N; each request takes the current delay, and the server
// records when each worker's requests came and how many ran at once.
type slowTarget struct {
	srv   *httptest.Server
	port  int
	delay atomic.Int64 // nanoseconds

	inFlight, maxInFlight atomic.Int64

	mu   sync.Mutex
	runs map[int][]time.Time // request arrivals by worker
}

func newSlowTarget(t *testing.T, workers int) *slowTarget {
	s := &slowTarget{runs: map[int][]time.Time{}}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived := time.Now()
		n, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/w/"))
		if err != nil || n < 0 || n >= workers {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		cur := s.inFlight.Add(1)
		defer s.inFlight.Add(-1)
		for {
			m := s.maxInFlight.Load()
			if cur <= m || s.maxInFlight.CompareAndSwap(m, cur) {
				break
			}
		}
		s.mu.Lock()
		s.runs[n] = append(s.runs[n], arrived)
		s.mu.Unlock()
		if d := time.Duration(s.delay.Load()); d > 0 {
			select {
			case <-time.After(d):
			case <-r.Context().Done():
			}
		}
		_, _ = w.Write([]byte("ok"))
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.srv.Listener = ln
	s.srv.Start()
	s.port = ln.Addr().(*net.TCPAddr).Port
	t.Cleanup(s.srv.Close)
	return s
}

// arrivals returns the request times of every worker.
func (s *slowTarget) arrivals() map[int][]time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[int][]time.Time{}
	for k, v := range s.runs {
		out[k] = append([]time.Time(nil), v...)
	}
	return out
}

// staticStatus is the status provider: every container running, started,
// at 127.0.0.1.
type staticStatus map[types.UID]v1.PodStatus

func (s staticStatus) GetPodStatus(uid types.UID) (v1.PodStatus, bool) {
	st, ok := s[uid]
	return st, ok
}

// runLog is the manager's observer: every executed run.
type runLog struct {
	mu   sync.Mutex
	runs []manager.RunRecord
}

func (l *runLog) ProbeRan(rec manager.RunRecord) {
	l.mu.Lock()
	l.runs = append(l.runs, rec)
	l.mu.Unlock()
}

func (l *runLog) all() []manager.RunRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]manager.RunRecord(nil), l.runs...)
}

// lagHist is a snapshot of the network lane's probed_scheduler_lag_seconds.
type lagHist struct {
	count   uint64
	sum     float64
	buckets map[float64]uint64 // cumulative, by upper bound
}

// sub returns the observations between an earlier snapshot and h.
func (h lagHist) sub(earlier lagHist) lagHist {
	out := lagHist{count: h.count - earlier.count, sum: h.sum - earlier.sum, buckets: map[float64]uint64{}}
	for le, n := range h.buckets {
		out.buckets[le] = n - earlier.buckets[le]
	}
	return out
}

// above returns how many observations exceeded le (a bucket bound).
func (h lagHist) above(le float64) uint64 { return h.count - h.buckets[le] }

// maxBound returns the smallest bucket bound that holds every observation
// (+Inf when some exceed every bound).
func (h lagHist) maxBound() string {
	var les []float64
	for le := range h.buckets {
		les = append(les, le)
	}
	sort.Float64s(les)
	for _, le := range les {
		if h.buckets[le] == h.count {
			return fmt.Sprintf("≤ %gs", le)
		}
	}
	return "> every bucket"
}

func (h lagHist) String() string {
	if h.count == 0 {
		return "no observations"
	}
	return fmt.Sprintf("%d runs, mean %.3fs, all %s", h.count, h.sum/float64(h.count), h.maxBound())
}

// runtimeMetrics reads what the test needs from the registry.
type runtimeMetrics struct {
	lag     lagHist
	skipped float64
	backlog float64 // network lane
}

func gatherRuntime(t *testing.T, reg *prometheus.Registry) runtimeMetrics {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gathering metrics: %v", err)
	}
	var out runtimeMetrics
	found := map[string]bool{}
	network := func(m *dto.Metric) bool {
		for _, l := range m.GetLabel() {
			if l.GetName() == "lane" {
				return l.GetValue() == "network"
			}
		}
		return false
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "probed_scheduler_lag_seconds":
				if !network(m) {
					continue
				}
				h := m.GetHistogram()
				out.lag = lagHist{count: h.GetSampleCount(), sum: h.GetSampleSum(), buckets: map[float64]uint64{}}
				for _, b := range h.GetBucket() {
					out.lag.buckets[b.GetUpperBound()] = b.GetCumulativeCount()
				}
			case "probed_scheduler_skipped_runs_total":
				out.skipped = m.GetCounter().GetValue()
			case "probed_scheduler_backlog":
				if !network(m) {
					continue
				}
				out.backlog = m.GetGauge().GetValue()
			default:
				continue
			}
			found[mf.GetName()] = true
		}
	}
	for _, name := range []string{"probed_scheduler_lag_seconds", "probed_scheduler_skipped_runs_total", "probed_scheduler_backlog"} {
		if !found[name] {
			t.Fatalf("metric %s not registered", name)
		}
	}
	return out
}

// TestOverload gives a manager with a pool of 4 network slots 40 readiness
// probes (period 1 s, timeout 1 s) against an endpoint that takes 200 ms:
// 8 slot-seconds of work per second for 4 slots, twice what the pool can
// serve. Then the endpoint becomes fast again. On the real clock:
//
//   - the backlog is bounded by the number of workers (one queued run per
//     worker at most), and the pool bounds the requests in flight;
//   - the overload is visible: lag and skipped runs in the runtime metrics
//     (probed_scheduler_lag_seconds, probed_scheduler_skipped_runs_total,
//     probed_scheduler_backlog) and in manager.StatsOf;
//   - no worker starves: each runs within period + timeout + the time the
//     pool needs to serve every worker once (ceil(workers/pool) × handler
//     time) of its previous run;
//   - no false failure: the timeout starts when the handler starts, so runs
//     that waited longer than the timeout in the backlog still succeed, and
//     no cached result ever turns to Failure after its first Success;
//   - once the endpoint is fast, the manager recovers by itself: the
//     backlog empties, lag returns near zero, no run is skipped.
func TestOverload(t *testing.T) {
	noLeaks(t)
	const (
		workers = 40
		pool    = 4
		handler = 200 * time.Millisecond
		period  = time.Second
		// overloaded and recovery are the phases' lengths; settle is the
		// part of the recovery given to draining the backlog.
		overloaded = 7 * time.Second
		settle     = 2 * time.Second
		recovered  = 3 * time.Second
	)
	// The time the pool needs to serve every worker once.
	rounds := (workers + pool - 1) / pool
	lagBudget := time.Duration(rounds) * handler
	// A run's interval under overload: its period, plus the wait behind
	// every other worker, plus its own run (at most its timeout). The extra
	// half of the lag budget absorbs the pool's unordered hand-over between
	// the scheduler's shards.
	starveBound := period + timeout + lagBudget + lagBudget/2

	target := newSlowTarget(t, workers)
	target.delay.Store(int64(handler))

	status := staticStatus{}
	pods := make([]*v1.Pod, workers)
	now := metav1.Now()
	for i := range pods {
		uid := types.UID(fmt.Sprintf("overload-%02d", i))
		pods[i] = &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%02d", i), Namespace: "overload", UID: uid},
			Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", ReadinessProbe: &v1.Probe{
				ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{
					Path: fmt.Sprintf("/w/%d", i), Port: intstr.FromInt32(int32(target.port)), Scheme: v1.URISchemeHTTP}},
				TimeoutSeconds: 1, PeriodSeconds: 1, SuccessThreshold: 1, FailureThreshold: 1,
			}}}},
		}
		started := true
		status[uid] = v1.PodStatus{Phase: v1.PodRunning, PodIP: "127.0.0.1", ContainerStatuses: []v1.ContainerStatus{{
			Name: "c", ContainerID: fmt.Sprintf("containerd://c%02d", i), Started: &started,
			State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: now}},
		}}}
	}

	// Readiness results: every change, by container.
	readiness := results.NewManager()
	var (
		updMu   sync.Mutex
		updates = map[string][]results.Result{}
	)
	stopDrain := make(chan struct{})
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for {
			select {
			case u := <-readiness.Updates():
				updMu.Lock()
				updates[u.ContainerID.ID] = append(updates[u.ContainerID.ID], u.Result)
				updMu.Unlock()
			case <-stopDrain:
				return
			}
		}
	}()

	reg := prometheus.NewRegistry()
	log := &runLog{}
	mgr, err := manager.New(manager.Options{
		Status:                   status,
		Readiness:                readiness,
		PoolSize:                 pool,
		ExecPoolSize:             1,
		RuntimeMetricsRegisterer: reg,
		Observer:                 log,
		Logger:                   quietLogger,
	})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	closeMgr := func() {
		if closed {
			return
		}
		closed = true
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := mgr.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
		close(stopDrain)
		<-drained
	}
	t.Cleanup(closeMgr)

	// sample polls StatsOf and the metrics every 50 ms for d.
	type phaseStats struct {
		maxBacklog, maxBacklogMetric, lastBacklog int
		maxWaiting                                int // dispatchers blocked on the full pool
		samples                                   int
	}
	sample := func(d time.Duration) phaseStats {
		var ps phaseStats
		end := time.Now().Add(d)
		for i := 0; time.Now().Before(end); i++ {
			st, ok := manager.StatsOf(mgr)
			if !ok {
				t.Fatal("StatsOf: not a manager built by New")
			}
			b := st.Backlog["network"]
			if b > workers {
				t.Errorf("StatsOf: backlog %d, more than the %d workers", b, workers)
			}
			ps.maxBacklog = max(ps.maxBacklog, b)
			ps.maxWaiting = max(ps.maxWaiting, st.Pools["network"].Waiting)
			ps.lastBacklog = b
			if i%5 == 0 {
				m := gatherRuntime(t, reg)
				ps.maxBacklogMetric = max(ps.maxBacklogMetric, int(m.backlog))
			}
			ps.samples++
			time.Sleep(50 * time.Millisecond)
		}
		return ps
	}

	start := time.Now()
	for _, p := range pods {
		mgr.AddPod(context.Background(), p)
	}

	// Phase 1: overload.
	over := sample(overloaded)
	m1 := gatherRuntime(t, reg)
	st1, _ := manager.StatsOf(mgr)
	switchAt := time.Now()
	runsOver := target.arrivals()

	// Phase 2: the endpoint is fast again.
	target.delay.Store(0)
	sample(settle)
	m2 := gatherRuntime(t, reg)
	st2, _ := manager.StatsOf(mgr)
	rec := sample(recovered)
	m3 := gatherRuntime(t, reg)
	st3, _ := manager.StatsOf(mgr)
	recoveredFrom := switchAt.Add(settle)
	arrivals := target.arrivals()
	runs := log.all()
	closeMgr()

	lagOver := m1.lag
	lagRec := m3.lag.sub(m2.lag)
	t.Logf("overload (%v, %d workers, pool %d, handler %v): %d runs (%.1f/s; the pool serves %.0f/s)",
		overloaded, workers, pool, handler, lagOver.count, float64(lagOver.count)/overloaded.Seconds(), float64(pool)/handler.Seconds())
	t.Logf("overload: lag %v, %d above 1 s; skipped %g (StatsOf %d); backlog max %d (metric max %d) of %d workers, up to %d more dispatched and waiting for a slot; %d requests in flight at most",
		lagOver, lagOver.above(1), m1.skipped, st1.Skipped, over.maxBacklog, over.maxBacklogMetric, workers, over.maxWaiting, target.maxInFlight.Load())
	t.Logf("recovery (after %v to settle, for %v): lag %v; skipped +%g (StatsOf +%d); backlog max %d, last %d",
		settle, recovered, lagRec, m3.skipped-m2.skipped, st3.Skipped-st2.Skipped, rec.maxBacklog, rec.lastBacklog)

	// Bounded, and the pool bounds the work in flight.
	if over.maxBacklog == 0 || over.maxBacklogMetric == 0 {
		t.Errorf("overload: backlog never seen (StatsOf max %d, metric max %d)", over.maxBacklog, over.maxBacklogMetric)
	}
	if over.maxBacklogMetric > workers {
		t.Errorf("overload: probed_scheduler_backlog reached %d, more than the %d workers", over.maxBacklogMetric, workers)
	}
	if n := target.maxInFlight.Load(); n > pool {
		t.Errorf("%d requests in flight at once, more than the pool's %d slots", n, pool)
	}

	// Visible: lag above the timeout, skipped runs, in both views.
	if lagOver.above(1) == 0 {
		t.Errorf("overload: no run waited more than 1 s (lag %v): the test did not overload the pool", lagOver)
	}
	if m1.skipped == 0 || st1.Skipped == 0 {
		t.Errorf("overload: no skipped runs (metric %g, StatsOf %d)", m1.skipped, st1.Skipped)
	}

	// No starvation: every worker ran within starveBound of the start and
	// of its previous run, as the target saw it.
	worst := time.Duration(0)
	for i := 0; i < workers; i++ {
		at := runsOver[i]
		if len(at) == 0 {
			t.Errorf("worker %d never ran during the overload", i)
			continue
		}
		prev := start
		for _, a := range at {
			if gap := a.Sub(prev); gap > worst {
				worst = gap
			}
			if gap := a.Sub(prev); gap > starveBound {
				t.Errorf("worker %d: %v without a run (from %v to %v after the start), want at most %v",
					i, gap.Round(time.Millisecond), prev.Sub(start).Round(time.Millisecond), a.Sub(start).Round(time.Millisecond), starveBound)
			}
			prev = a
		}
		if gap := switchAt.Sub(prev); gap > starveBound {
			t.Errorf("worker %d: no run in the last %v of the overload, want one within %v", i, gap.Round(time.Millisecond), starveBound)
		}
	}
	t.Logf("overload: longest time a worker went without a run: %v (bound %v = period %v + timeout %v + 1.5 × %d rounds × %v)",
		worst.Round(time.Millisecond), starveBound, period, timeout, rounds, handler)

	// No false failure.
	failed := 0
	var longest time.Duration
	for _, r := range runs {
		longest = max(longest, r.Duration)
		if r.Err != nil || r.Result != runtime.Success {
			failed++
			if failed <= 5 {
				t.Errorf("run of %s at %v: %v %v %q (took %v), want Success",
					r.PodName, r.Start.Sub(start).Round(time.Millisecond), r.Result, r.Err, r.Message, r.Duration)
			}
		}
	}
	if failed > 0 {
		t.Errorf("%d of %d runs were not a Success", failed, len(runs))
	}
	t.Logf("%d runs in all, longest %v (handler %v, timeout %v)", len(runs), longest.Round(time.Millisecond), handler, timeout)
	updMu.Lock()
	for i := 0; i < workers; i++ {
		id := fmt.Sprintf("c%02d", i)
		// The initial Failure (W1), then Success, and nothing after.
		if got := updates[id]; len(got) != 2 || got[0] != results.Failure || got[1] != results.Success {
			t.Errorf("container %s: readiness updates %v, want [Failure Success]", id, got)
		}
	}
	updMu.Unlock()

	// Recovery.
	if lagRec.count == 0 {
		t.Errorf("recovery: no runs")
	} else if lagRec.above(0.1) > 0 {
		t.Errorf("recovery: %d of %d runs waited more than 100 ms (lag %v), want lag near zero", lagRec.above(0.1), lagRec.count, lagRec)
	}
	if d := m3.skipped - m2.skipped; d != 0 {
		t.Errorf("recovery: %g runs skipped, want none", d)
	}
	if rec.maxBacklog > pool || rec.lastBacklog != 0 && rec.lastBacklog > 1 {
		t.Errorf("recovery: backlog up to %d (last %d), want it empty but for runs just due", rec.maxBacklog, rec.lastBacklog)
	}
	for i := 0; i < workers; i++ {
		n := 0
		for _, a := range arrivals[i] {
			if a.After(recoveredFrom) {
				n++
			}
		}
		if want := int(recovered/period) - 1; n < want {
			t.Errorf("recovery: worker %d ran %d times in %v, want at least %d (period %v)", i, n, recovered, want, period)
		}
	}
}
