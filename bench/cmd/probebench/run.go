package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	goruntime "runtime"
	"runtime/pprof"
	"time"

	"github.com/probed/probed/bench/internal/lateness"
	"github.com/probed/probed/bench/internal/sysstat"

	"github.com/probed/probed/runtime"
)

// Result is the JSON line of one run.
type Result struct {
	Impl          string `json:"impl"`
	Mode          string `json:"mode"`
	Label         string `json:"label,omitempty"`
	Pods          int    `json:"pods"`
	Probes        int    `json:"probes"`
	PeriodSeconds int    `json:"period_seconds"`
	// PeriodMs is set for a sub-second run (-period-ms): probed only, its
	// probes declared in the probed.io/probes annotation with
	// periodMilliseconds; PeriodSeconds is then 0.
	PeriodMs   int     `json:"period_ms,omitempty"`
	OneAddr    string  `json:"one_addr,omitempty"`
	HungEvery  int     `json:"hung_every,omitempty"`
	Pool       int     `json:"pool,omitempty"`
	TickMs     float64 `json:"tick_ms,omitempty"`     // probed: -tick, when set
	CoalesceMs float64 `json:"coalesce_ms,omitempty"` // probed: -coalesce, when set
	KeepAlive  bool    `json:"keepalive,omitempty"`   // probed: -keepalive
	// VoluntarySwitches and InvoluntarySwitches are the process's context
	// switches in the window (getrusage): a voluntary one is a thread that
	// went to sleep, about one per wake-up of an idle thread.
	VoluntarySwitches   int64   `json:"voluntary_switches"`
	InvoluntarySwitches int64   `json:"involuntary_switches"`
	Concurrency         int     `json:"concurrency,omitempty"`
	SettleSeconds       float64 `json:"settle_seconds"`
	WarmupSeconds       float64 `json:"warmup_seconds"`

	// Memory after warm-up (RSS before, heap and stack after a forced GC).
	RSSBytes          int64   `json:"rss_bytes"`
	HeapBytes         int64   `json:"heap_bytes"`
	StackBytes        int64   `json:"stack_bytes"`
	Goroutines        int     `json:"goroutines"`
	BaselineRSSBytes  int64   `json:"baseline_rss_bytes"`
	BaselineHeapBytes int64   `json:"baseline_heap_bytes"`
	MemPerProbeBytes  float64 `json:"mem_per_probe_bytes"` // (heap+stack) added by AddPod and warm-up, per probe
	// RegisteredBytesPerProbe is (heap+stack) added by AddPod alone, per
	// probe: what registering a probe costs before it has run (no results
	// cache entries, no metric series yet).
	RegisteredBytesPerProbe float64 `json:"registered_bytes_per_probe"`
	RSSPerProbeBytes        float64 `json:"rss_per_probe_bytes"`

	// The measuring window.
	CPUSeconds              float64 `json:"cpu_seconds"`
	CPUUserSeconds          float64 `json:"cpu_user_seconds"`
	CPUSysSeconds           float64 `json:"cpu_sys_seconds"`
	WindowSeconds           float64 `json:"window_seconds"`
	ProbesExecuted          int64   `json:"probes_executed"`
	ProbesPerSecond         float64 `json:"probes_per_second"`
	ExpectedProbesPerSecond float64 `json:"expected_probes_per_second"`
	CPUPer1kProbes          float64 `json:"cpu_ms_per_1k_probes"`
	// CPUMsPerSecond is the window's CPU per second of wall time: for a
	// baseline run (-pods 0: the same process, manager and recorder with no
	// pod) the fixed cost of the harness and the implementation at rest.
	CPUMsPerSecond  float64 `json:"cpu_ms_per_second"`
	LatenessP50Ms   float64 `json:"lateness_p50_ms"`
	LatenessP99Ms   float64 `json:"lateness_p99_ms"`
	LatenessP999Ms  float64 `json:"lateness_p999_ms"`
	LatenessMaxMs   float64 `json:"lateness_max_ms"`
	SkippedRuns     int64   `json:"skipped_runs"`   // grid periods without a run (between a worker's first and last run)
	SilentWorkers   int     `json:"silent_workers"` // workers without any run in the window
	ExtraRuns       int64   `json:"extra_runs"`     // more than one run in one period
	LostSamples     int64   `json:"lost_samples"`   // runs beyond the recorder's room
	Failures        int64   `json:"failures"`       // prober_probe_total{result=failed} in the window (healthy targets)
	Unknown         int64   `json:"unknown"`        // prober_probe_total{result=unknown} in the window
	HungFailures    int64   `json:"hung_failures,omitempty"`
	TimeWait        int     `json:"time_wait"`             // TIME-WAIT sockets of the probers' side of connections to this run's targets, at the end of the window
	TimeWaitTargets int     `json:"time_wait_targets"`     // TIME-WAIT sockets on the targets' side
	TimeWaitAll     int     `json:"time_wait_host"`        // every TIME-WAIT socket on the host (other work included)
	DialOK          int64   `json:"dial_ok,omitempty"`     // dialloop, getloop: attempts that succeeded in the window
	DialFailed      int64   `json:"dial_failed,omitempty"` // and those that did not

	// Burst after adding all pods at once.
	Burstiness float64 `json:"burstiness"`
	BurstPeak  int     `json:"burst_peak_per_100ms"`
	// Starts per 100 ms from AddPod on (at most 40 values).
	BurstProfile []int `json:"burst_profile_per_100ms,omitempty"`

	AddPodSeconds       float64 `json:"addpod_seconds"`
	DrainSeconds        float64 `json:"drain_seconds"`         // RemovePod of all pods until every worker is gone
	DrainGoroutinesLeft int     `json:"drain_goroutines_left"` // goroutines above the pre-AddPod baseline then
	DrainHeapLeftBytes  int64   `json:"drain_heap_left_bytes"` // heap above the pre-AddPod baseline then (after GC)
	DrainIdleSeconds    float64 `json:"drain_idle_seconds"`    // until goroutines are back to the baseline too (-1: not within -drain-wait)
	TargetAccepted      int64   `json:"target_accepted,omitempty"`
	TargetAcceptErrors  int64   `json:"target_accept_errors,omitempty"`
	// TargetCPUSeconds is the target server's own CPU in the window (its
	// process): the other end of the probes' connections.
	TargetCPUSeconds float64 `json:"target_cpu_seconds,omitempty"`
	GoVersion        string  `json:"go"`
	GOMAXPROCS       int     `json:"gomaxprocs"`
	Time             string  `json:"time"`
	// LoadAverage is the host's 1, 5 and 15 minute load average at the end
	// of the window: what else ran on the machine.
	LoadAverage []float64      `json:"loadavg,omitempty"`
	Extra       map[string]any `json:"extra,omitempty"`
}

// recHandle is where probe calls are recorded: in this process (instant)
// or in the target server (tcp, http, hung).
type recHandle interface {
	burst() error
	window(perWorker int) error
	stopWindow() error
	stats(period, span time.Duration, expected float64, keep func(int) bool) (targetStats, error)
}

type localRec struct{ r *lateness.Recorder }

func (l localRec) burst() error               { l.r.StartBurst(); return nil }
func (l localRec) window(perWorker int) error { l.r.StartWindow(perWorker); return nil }
func (l localRec) stopWindow() error          { l.r.StopWindow(); return nil }
func (l localRec) stats(period, span time.Duration, expected float64, keep func(int) bool) (targetStats, error) {
	var ts targetStats
	ts.Stats = l.r.Stats(period, keep)
	ts.Burstiness, ts.BurstPeak = l.r.Burstiness(span, expected)
	ts.Profile = l.r.Profile(min(int(span/(100*time.Millisecond)), 40))
	return ts, nil
}

type remoteRec struct{ tp *targetProc }

func (r remoteRec) burst() error { _, err := r.tp.cmdLine("burst"); return err }
func (r remoteRec) window(perWorker int) error {
	_, err := r.tp.cmdLine("window %d", perWorker)
	return err
}
func (r remoteRec) stopWindow() error { _, err := r.tp.cmdLine("stopwindow"); return err }
func (r remoteRec) stats(period, span time.Duration, expected float64, _ func(int) bool) (targetStats, error) {
	return r.tp.stats(period, span, expected)
}

func runMain(args []string) error {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	implName := fs.String("impl", "probed", "probed, kubelet, bare (a goroutine and ticker per probe, plain GET and dial: the floor of the kubelet's model), dialloop (a bare dial-and-close loop, -mode tcp) or getloop (a bare GET loop, -mode http)")
	mode := fs.String("mode", modeInstant, "instant, tcp, http, hung or node (an HTTP readiness and a TCP liveness probe per pod)")
	label := fs.String("label", "", "free-form run label")
	pods := fs.Int("pods", 1000, "pods; each has a readiness and a liveness probe (0: a baseline run, the same machinery with no probe)")
	periodS := fs.Int("period", 1, "probe period, seconds")
	periodMs := fs.Int("period-ms", 0, "probe period in milliseconds (probed only: annotation probes with periodMilliseconds; overrides -period)")
	warmup := fs.Duration("warmup", 0, "time from the end of AddPod to the memory snapshot and the window (0: period+3s)")
	window := fs.Duration("window", 0, "measuring window (0: max(15s, 3 periods))")
	settle := fs.Duration("settle", 0, "time between creating the manager and adding the pods (> period: a node that has run for a while)")
	pool := fs.Int("pool", 0, "probed: network pool size (0: the runtime's default)")
	execPool := fs.Int("exec-pool", 0, "probed: exec pool size (0: the runtime's default)")
	shards := fs.Int("shards", 0, "probed: scheduler shards (0: default)")
	tick := fs.Duration("tick", 0, "probed: the scheduler's wheel tick (0: its default, 10ms)")
	coalesce := fs.Duration("coalesce", 0, "probed: the scheduler's coalescing window (manager.Options.Coalesce; 0: off)")
	keepAlive := fs.Bool("keepalive", false, "probed: HTTP probes keep their connection between runs (probed --http-keep-alive)")
	hungEvery := fs.Int("hung-every", 10, "hung mode: pod i never answers when i%n == n-1")
	oneAddr := fs.String("one-addr", "", "tcp/http: every pod at this one address (e.g. 127.0.0.1)")
	conc := fs.Int("concurrency", runtime.DefaultPoolSize, "dialloop, getloop: goroutines probing (default: probed's network pool size)")
	drainWait := fs.Duration("drain-wait", 10*time.Second, "longest wait for RemovePod to leave nothing behind")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the window")
	memProfile := fs.String("memprofile", "", "write a heap profile after the window")
	_ = fs.Parse(args)
	if *pods < 0 {
		return fmt.Errorf("-pods %d: must be 0 (a baseline run) or more", *pods)
	}

	period := time.Duration(*periodS) * time.Second
	if *periodMs > 0 {
		if *implName != "probed" {
			return fmt.Errorf("-period-ms: only probed has sub-second periods (annotation probes); -impl is %q", *implName)
		}
		period, *periodS = time.Duration(*periodMs)*time.Millisecond, 0
	}
	if *warmup == 0 {
		*warmup = period + 3*time.Second
	}
	if *window == 0 {
		*window = max(15*time.Second, 3*period)
	}
	if *mode != modeHung {
		*hungEvery = 0
	}
	nWorkers := *pods * 2
	horizon := *settle + 3*period + 5*time.Second
	span := 2 * period

	res := Result{
		Impl: *implName, Mode: *mode, Label: *label, Pods: *pods, Probes: nWorkers, PeriodSeconds: *periodS, PeriodMs: *periodMs,
		OneAddr: *oneAddr, HungEvery: *hungEvery, SettleSeconds: settle.Seconds(), WarmupSeconds: warmup.Seconds(),
		GoVersion: goruntime.Version(), GOMAXPROCS: goruntime.GOMAXPROCS(0), Time: time.Now().UTC().Format(time.RFC3339),
	}
	healthy := func(pod int) bool { return *hungEvery <= 0 || pod%*hungEvery != *hungEvery-1 }
	healthyWorkers := 0
	for i := 0; i < *pods; i++ {
		if healthy(i) {
			healthyWorkers += 2
		}
	}
	res.ExpectedProbesPerSecond = float64(healthyWorkers) / period.Seconds()

	// Targets and recorder.
	var rec recHandle
	var localR *lateness.Recorder
	var tp *targetProc
	rport, lport := 0, 0
	switch {
	case *implName == implDialLoop && *mode != modeTCP:
		return fmt.Errorf("dialloop needs -mode tcp, not %q", *mode)
	case *implName == implGetLoop && *mode != modeHTTP:
		return fmt.Errorf("getloop needs -mode http, not %q", *mode)
	}
	if *mode == modeInstant {
		localR = lateness.New(nWorkers, horizon)
		rec = localRec{localR}
	} else {
		var err error
		tp, err = startTargets(*mode, *pods, *hungEvery, *oneAddr, horizon)
		if err != nil {
			return fmt.Errorf("starting targets: %w", err)
		}
		defer tp.Close()
		rec = remoteRec{tp}
		rport, lport = tp.rport, tp.lport
	}

	sc := newScenario(*mode, *pods, period, *periodMs > 0, rport, lport, *oneAddr, *hungEvery)

	var im impl
	var floor *floorLoop
	var err error
	switch *implName {
	case "probed":
		res.Pool, res.TickMs = *pool, float64(*tick)/float64(time.Millisecond)
		res.CoalesceMs = float64(*coalesce) / float64(time.Millisecond)
		res.KeepAlive = *keepAlive
		im, err = newProbed(sc, probedRunner{instantRunner{localR}}, implOptions{pool: *pool, execPool: *execPool, shards: *shards, tick: *tick, coalesce: *coalesce, keepAlive: *keepAlive})
	case "kubelet":
		im, err = newKubelet(sc, kubeletRunner{instantRunner{localR}})
	case implBare:
		im, err = newBare(sc)
	case implDialLoop:
		res.Concurrency = *conc
		floor = newDialLoop(sc, *conc)
	case implGetLoop:
		res.Concurrency = *conc
		floor = newGetLoop(sc, *conc)
	default:
		err = fmt.Errorf("unknown -impl %q", *implName)
	}
	if err != nil {
		return err
	}

	base := sysstat.Snapshot()
	res.BaselineRSSBytes, res.BaselineHeapBytes = base.RSS, base.HeapAlloc
	if *settle > 0 {
		time.Sleep(*settle)
	}

	// Add every pod at once.
	if err := rec.burst(); err != nil {
		return err
	}
	ctx := context.Background()
	t0 := time.Now()
	if floor != nil {
		floor.start()
	} else {
		for _, pod := range sc.pods {
			im.AddPod(ctx, pod)
		}
	}
	res.AddPodSeconds = time.Since(t0).Seconds()
	if reg := sysstat.Snapshot(); im != nil && nWorkers > 0 {
		res.RegisteredBytesPerProbe = float64(reg.HeapAlloc+reg.StackInuse-base.HeapAlloc-base.StackInuse) / float64(nWorkers)
	}
	time.Sleep(*warmup)

	mem := sysstat.Snapshot()
	res.RSSBytes, res.HeapBytes, res.StackBytes, res.Goroutines = mem.RSS, mem.HeapAlloc, mem.StackInuse, mem.Goroutines
	if nWorkers > 0 {
		res.MemPerProbeBytes = float64(mem.HeapAlloc+mem.StackInuse-base.HeapAlloc-base.StackInuse) / float64(nWorkers)
		res.RSSPerProbeBytes = float64(mem.RSS-base.RSS) / float64(nWorkers)
	}

	// The window.
	// Counting failures gathers every prober_probe_total series; past
	// 200k probes that costs more than it tells (the instant handler
	// cannot fail), so it is skipped there.
	countFailures := im != nil && nWorkers <= 200000
	var before []int64
	if countFailures {
		before = failuresNow(im, sc, healthy)
	}
	perWorker := int(*window/period) + 3
	if err := rec.window(perWorker); err != nil {
		return err
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
	}
	var dialOK0, dialFail0 int64
	if floor != nil {
		dialOK0, dialFail0 = floor.ok.Load(), floor.fail.Load()
	}
	u0, s0 := sysstat.CPU()
	vcs0, ivcs0 := sysstat.Switches()
	w0 := time.Now()
	time.Sleep(*window)
	u1, s1 := sysstat.CPU()
	vcs1, ivcs1 := sysstat.Switches()
	res.VoluntarySwitches, res.InvoluntarySwitches = vcs1-vcs0, ivcs1-ivcs0
	res.WindowSeconds = time.Since(w0).Seconds()
	if *cpuProfile != "" {
		pprof.StopCPUProfile()
	}
	if err := rec.stopWindow(); err != nil {
		return err
	}
	if floor != nil {
		res.DialOK, res.DialFailed = floor.ok.Load()-dialOK0, floor.fail.Load()-dialFail0
	}
	res.LoadAverage = sysstat.LoadAverage()
	res.TimeWaitAll, res.TimeWait, res.TimeWaitTargets = sysstat.TimeWait(rport, lport)
	res.CPUUserSeconds, res.CPUSysSeconds = (u1 - u0).Seconds(), (s1 - s0).Seconds()
	res.CPUSeconds = res.CPUUserSeconds + res.CPUSysSeconds
	res.CPUMsPerSecond = res.CPUSeconds * 1000 / res.WindowSeconds
	if countFailures {
		after := failuresNow(im, sc, healthy)
		res.Failures, res.Unknown, res.HungFailures = after[0]-before[0], after[1]-before[1], after[2]-before[2]
	}

	keep := func(w int) bool { return healthy(w / 2) }
	ts, err := rec.stats(period, span, res.ExpectedProbesPerSecond, keep)
	if err != nil {
		return err
	}
	res.ProbesExecuted = ts.Calls
	if *oneAddr != "" || floor != nil {
		// Not attributable to workers (one address) or no schedule
		// (dialloop, getloop): count what the targets accepted.
		res.ProbesExecuted = ts.Counters.Accepted
	}
	res.ProbesPerSecond = float64(res.ProbesExecuted) / res.WindowSeconds
	if res.ProbesExecuted > 0 {
		res.CPUPer1kProbes = res.CPUSeconds * 1000 / (float64(res.ProbesExecuted) / 1000)
	}
	res.LatenessP50Ms, res.LatenessP99Ms, res.LatenessP999Ms, res.LatenessMaxMs = ts.LatenessP50Ms, ts.LatenessP99Ms, ts.LatenessP999Ms, ts.LatenessMaxMs
	res.SkippedRuns, res.SilentWorkers, res.ExtraRuns, res.LostSamples = ts.Missed, ts.WorkersSilent, ts.Duplicates, ts.Lost
	res.Burstiness, res.BurstPeak, res.BurstProfile = ts.Burstiness, ts.BurstPeak, ts.Profile
	res.TargetAccepted, res.TargetAcceptErrors = ts.Counters.Accepted, ts.Counters.AcceptErrs
	res.TargetCPUSeconds = ts.CPUSeconds
	if *oneAddr != "" || floor != nil {
		res.LatenessP50Ms, res.LatenessP99Ms, res.LatenessP999Ms, res.LatenessMaxMs = 0, 0, 0, 0
		res.Burstiness, res.BurstPeak = 0, 0
		res.SkippedRuns, res.SilentWorkers, res.ExtraRuns, res.LostSamples = 0, 0, 0, 0
	}
	if *memProfile != "" {
		f, err := os.Create(*memProfile)
		if err != nil {
			return err
		}
		// The heap profile lags by up to two cycles: collect twice so that
		// it shows what is retained, not the garbage of recent runs.
		goruntime.GC()
		goruntime.GC()
		if err := pprof.WriteHeapProfile(f); err != nil {
			return err
		}
		f.Close()
	}
	if im != nil {
		res.Extra = im.Extra()
	}

	// Drain: RemovePod of every pod until nothing is left.
	if floor != nil {
		t := time.Now()
		floor.stopAndWait()
		res.DrainSeconds = time.Since(t).Seconds()
	} else {
		t := time.Now()
		for _, pod := range sc.pods {
			im.RemovePod(pod)
		}
		deadline := t.Add(*drainWait)
		for !im.Gone(base.Goroutines, goruntime.NumGoroutine()) && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		res.DrainSeconds = time.Since(t).Seconds()
		if !im.Gone(base.Goroutines, goruntime.NumGoroutine()) {
			res.DrainSeconds = -1
		}
		left := sysstat.Snapshot()
		res.DrainGoroutinesLeft = left.Goroutines - base.Goroutines
		res.DrainHeapLeftBytes = left.HeapAlloc - base.HeapAlloc
		res.DrainIdleSeconds = -1
		for time.Now().Before(deadline) {
			if goruntime.NumGoroutine() <= base.Goroutines {
				res.DrainIdleSeconds = time.Since(t).Seconds()
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err := im.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "close:", err)
		}
	}
	b, err := json.Marshal(res)
	if err != nil {
		return err
	}
	fmt.Println(string(b))
	return nil
}

// failuresNow returns the failed and unknown counts of healthy pods and the
// failed count of hung pods.
func failuresNow(im impl, sc *scenario, healthy func(int) bool) []int64 {
	mfs, err := im.Gather()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gather:", err)
		return []int64{0, 0, 0}
	}
	f, u, _ := failureCounts(mfs, healthy)
	hf, _, _ := failureCounts(mfs, func(i int) bool { return !healthy(i) })
	return []int64{f, u, hf}
}
