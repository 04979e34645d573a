package manager

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/probed/probed/runtime"
)

// laneNames label the runtime's pool lanes.
var laneNames = [runtime.NumLanes]string{runtime.LaneNetwork: "network", runtime.LaneExec: "exec", runtime.LaneSlow: "slow"}

// runtimeMetrics are probed's own metrics of the scheduler and pools,
// registered when Options.RuntimeMetricsRegisterer is set (served on the
// agent's /metrics; docs/operations.md lists them).
type runtimeMetrics struct {
	reg    prometheus.Registerer
	lag    *prometheus.HistogramVec
	lagObs [runtime.NumLanes]prometheus.Observer
	probes *prometheus.CounterVec
	// errored counts errored runs by reason (runtime.ErroredReason): a
	// prober out of descriptors or ports shows here, by errno, instead of
	// as failures of its targets.
	errored *prometheus.CounterVec
	gauges  *statsCollector
	// firstSuccess is the time from a container's start to its probes'
	// first Success verdict (kubernetes/kubernetes#96411).
	firstSuccess *prometheus.HistogramVec

	mu       sync.Mutex
	counters map[countersKey]*probeCounters
}

func newRuntimeMetrics(reg prometheus.Registerer, m *manager) (*runtimeMetrics, error) {
	rm := &runtimeMetrics{
		reg: reg,
		lag: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "probed_scheduler_lag_seconds",
			Help:    "Time a due probe run waited before it was handed to the pool (scheduler and pool lag).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"lane"}),
		probes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "probed_probes_total",
			Help: "Executed probe runs by handler kind, probe type and handler result (success, warning, failure, unknown, errored).",
		}, []string{"handler", "probe_type", "result"}),
		errored: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "probed_probes_errored_total",
			Help: "Errored probe runs (discarded, as the kubelet discards them: not counted toward thresholds) by handler kind, probe type and reason: the errno when the prober itself ran out of a local resource (EMFILE, ENFILE, ENOBUFS, ENOMEM, EADDRNOTAVAIL, EAGAIN), else handler_error.",
		}, []string{"handler", "probe_type", "reason"}),
		firstSuccess: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "probed_probe_time_to_first_success_seconds",
			Help:    "Time from a container's start (its status's startedAt) to its probe's first Success verdict, by handler kind and probe type: time to started, ready and live (containers that started before the agent are not counted).",
			Buckets: []float64{.1, .25, .5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600},
		}, []string{"handler", "probe_type"}),
		gauges:   &statsCollector{m: m},
		counters: map[countersKey]*probeCounters{},
	}
	for lane := range rm.lagObs {
		rm.lagObs[lane] = rm.lag.WithLabelValues(laneNames[lane])
	}
	for _, c := range []prometheus.Collector{rm.lag, rm.probes, rm.errored, rm.firstSuccess, rm.gauges} {
		if err := reg.Register(c); err != nil {
			rm.unregister()
			return nil, err
		}
	}
	return rm, nil
}

func (rm *runtimeMetrics) observeLag(lane int, d time.Duration) {
	if lane >= 0 && lane < len(rm.lagObs) {
		rm.lagObs[lane].Observe(d.Seconds())
	}
}

// probeCounters are the probed_probes_total children of one (handler kind,
// probe type), bound once per result on first use, so that counting a run
// looks nothing up (no WithLabelValues: no label hashing, no lock). A child
// exists only once its result has been counted, as with WithLabelValues.
// Workers of the same kind and probe type share one.
type probeCounters struct {
	rm        *runtimeMetrics
	kind      string
	probeType string
	byResult  [numRunResults]atomic.Pointer[boundCounter]
}

type boundCounter struct{ prometheus.Counter }

// The result label of probed_probes_total by runtime.Result (Unknown,
// Success, Warning, Failure), then errored.
const numRunResults = 5

var runResultLabels = [numRunResults]string{"unknown", "success", "warning", "failure", "errored"}

type countersKey struct {
	kind string
	pt   runtime.ProbeType
}

// countersFor returns the shared counters of a handler kind and probe type.
func (rm *runtimeMetrics) countersFor(kind string, pt runtime.ProbeType) *probeCounters {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	k := countersKey{kind, pt}
	pc, ok := rm.counters[k]
	if !ok {
		pc = &probeCounters{rm: rm, kind: kind, probeType: pt.Lower()}
		rm.counters[k] = pc
	}
	return pc
}

// countProbe counts one executed run in probed_probes_total (and, for an
// errored run, probed_probes_errored_total by reason).
func (pc *probeCounters) countProbe(rep runtime.Report) {
	i := numRunResults - 1 // errored
	if rep.Err == nil {
		i = int(rep.Outcome.Result)
		if i >= numRunResults-1 {
			i = int(runtime.Unknown) // an out-of-range verdict reads "unknown", as its String does
		}
	} else {
		pc.rm.errored.WithLabelValues(pc.kind, pc.probeType, runtime.ErroredReason(rep.Err)).Inc()
	}
	c := pc.byResult[i].Load()
	if c == nil {
		// Racing runs bind the same child: WithLabelValues is idempotent.
		c = &boundCounter{pc.rm.probes.WithLabelValues(pc.kind, pc.probeType, runResultLabels[i])}
		pc.byResult[i].Store(c)
	}
	c.Inc()
}

// observeFirstSuccess observes a container's time to its probe's first
// Success verdict.
func (rm *runtimeMetrics) observeFirstSuccess(kind string, pt runtime.ProbeType, d time.Duration) {
	rm.firstSuccess.WithLabelValues(kind, pt.Lower()).Observe(d.Seconds())
}

func (rm *runtimeMetrics) unregister() {
	rm.reg.Unregister(rm.firstSuccess)
	rm.reg.Unregister(rm.lag)
	rm.reg.Unregister(rm.probes)
	rm.reg.Unregister(rm.errored)
	rm.reg.Unregister(rm.gauges)
}

// statsCollector exports the scheduler's and pools' figures at scrape time.
type statsCollector struct{ m *manager }

var (
	descEntries    = prometheus.NewDesc("probed_scheduler_entries", "Probe workers registered with the scheduler.", nil, nil)
	descReady      = prometheus.NewDesc("probed_scheduler_backlog", "Due probe runs waiting for a pool slot (the bounded backlog), by lane.", []string{"lane"}, nil)
	descRunning    = prometheus.NewDesc("probed_scheduler_running", "Probe runs dispatched and not finished.", nil, nil)
	descDispatched = prometheus.NewDesc("probed_scheduler_dispatched_total", "Probe runs handed to the pool.", nil, nil)
	descSkipped    = prometheus.NewDesc("probed_scheduler_skipped_runs_total", "Due runs dropped because the previous run of the same probe was still queued or running: the next run starts when it ends.", nil, nil)
	descTriggered  = prometheus.NewDesc("probed_scheduler_triggers_total", "Manual triggers (readiness after UpdatePodStatus, stops).", nil, nil)
	descPoolBusy   = prometheus.NewDesc("probed_pool_busy", "Pool slots running a probe, by lane.", []string{"lane"}, nil)
	descPoolCap    = prometheus.NewDesc("probed_pool_capacity", "Pool size, by lane.", []string{"lane"}, nil)
	descPoolWait   = prometheus.NewDesc("probed_pool_waiting", "Dispatchers blocked on a full pool, by lane.", []string{"lane"}, nil)
	descShareSlots = prometheus.NewDesc("probed_pool_share_slots", "Most pool slots the probe runs of one pod (scope=pod) or one namespace (scope=namespace) hold at once, by lane (--pod-pool-share, --namespace-pool-share; the pool size when unbounded).", []string{"lane", "scope"}, nil)
	descParked     = prometheus.NewDesc("probed_pool_parked", "Probe runs waiting because their pod or namespace holds its share of the pool, by lane.", []string{"lane"}, nil)
	descParkedAll  = prometheus.NewDesc("probed_pool_parked_total", "Probe runs that waited because their pod or namespace held its share of the pool, by lane.", []string{"lane"}, nil)
)

func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descEntries, descReady, descRunning, descDispatched, descSkipped, descTriggered, descPoolBusy, descPoolCap, descPoolWait,
		descShareSlots, descParked, descParkedAll} {
		ch <- d
	}
}

func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.m.sched.Stats()
	ch <- prometheus.MustNewConstMetric(descEntries, prometheus.GaugeValue, float64(st.Entries))
	ch <- prometheus.MustNewConstMetric(descRunning, prometheus.GaugeValue, float64(st.Running))
	ch <- prometheus.MustNewConstMetric(descDispatched, prometheus.CounterValue, float64(st.Dispatched))
	ch <- prometheus.MustNewConstMetric(descSkipped, prometheus.CounterValue, float64(st.Skipped))
	ch <- prometheus.MustNewConstMetric(descTriggered, prometheus.CounterValue, float64(st.Triggered))
	for lane, n := range st.Ready {
		ch <- prometheus.MustNewConstMetric(descReady, prometheus.GaugeValue, float64(n), laneName(lane))
	}
	for lane, ps := range c.m.rt.Stats() {
		ch <- prometheus.MustNewConstMetric(descPoolBusy, prometheus.GaugeValue, float64(ps.Busy), laneName(lane))
		ch <- prometheus.MustNewConstMetric(descPoolCap, prometheus.GaugeValue, float64(ps.Capacity), laneName(lane))
		ch <- prometheus.MustNewConstMetric(descPoolWait, prometheus.GaugeValue, float64(ps.Waiting), laneName(lane))
		ch <- prometheus.MustNewConstMetric(descShareSlots, prometheus.GaugeValue, float64(ps.PodSlots), laneName(lane), "pod")
		ch <- prometheus.MustNewConstMetric(descShareSlots, prometheus.GaugeValue, float64(ps.NamespaceSlots), laneName(lane), "namespace")
		ch <- prometheus.MustNewConstMetric(descParked, prometheus.GaugeValue, float64(ps.Parked), laneName(lane))
		ch <- prometheus.MustNewConstMetric(descParkedAll, prometheus.CounterValue, float64(ps.ParkedTotal), laneName(lane))
	}
}

func laneName(lane int) string {
	if lane >= 0 && lane < len(laneNames) {
		return laneNames[lane]
	}
	return strconv.Itoa(lane)
}

// Stats describes the scheduler and pools of a Manager built by New.
type Stats struct {
	Entries    int                          `json:"entries"`
	Running    int                          `json:"running"`
	Backlog    map[string]int               `json:"backlog"`
	Dispatched uint64                       `json:"dispatched"`
	Skipped    uint64                       `json:"skippedRuns"`
	Triggered  uint64                       `json:"triggers"`
	Pools      map[string]runtime.PoolStats `json:"pools"`
	Started    time.Time                    `json:"started"`
	// WheelAdvanced is the start of the last tick the scheduler's wheel
	// processed, or has nothing due in while it sleeps
	// (scheduler.Stats.Advanced); Now the manager clock's time when the
	// figures were read.
	WheelAdvanced time.Time `json:"wheelAdvanced"`
	Now           time.Time `json:"now"`
}

// StatsOf returns the figures of a Manager built by New; false for any
// other implementation.
func StatsOf(mgr Manager) (Stats, bool) {
	m, ok := mgr.(*manager)
	if !ok {
		return Stats{}, false
	}
	st := m.sched.Stats()
	out := Stats{
		Entries: st.Entries, Running: st.Running, Dispatched: st.Dispatched, Skipped: st.Skipped, Triggered: st.Triggered,
		Backlog: map[string]int{}, Pools: map[string]runtime.PoolStats{}, Started: m.start,
		WheelAdvanced: st.Advanced, Now: m.clock.Now(),
	}
	for lane, n := range st.Ready {
		out.Backlog[laneName(lane)] = n
	}
	for lane, ps := range m.rt.Stats() {
		out.Pools[laneName(lane)] = ps
	}
	return out, true
}
