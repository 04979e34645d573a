package manager

import (
	"context"
	"fmt"
	"hash/maphash"
	"strings"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/probed/probed/manager/results"
	"github.com/probed/probed/runtime"
	"github.com/probed/probed/scheduler"
)

// worker is the state of one (pod UID, container, probe type). It owns no
// goroutine: the scheduler dispatches its Run to the pool whenever it is due,
// never more than one at a time, so the mutable fields below are only
// touched by one run at a time (the scheduler's lock orders the runs).
//
// It is one allocation of about 200 bytes: the probe's runtime spec and its
// prepared handler are embedded, and everything derivable (the key, the
// initial value, the results manager) is derived.
type worker struct {
	m    *manager
	id   scheduler.ID
	next *worker // the pod's next worker (workerSet)

	// rs holds the snapshots taken at creation (M2: spec changes are
	// ignored): rs.Pod, rs.Container, rs.Probe, and the probe type.
	rs       runtime.Spec
	prepared runtime.Prepared

	restartableInit bool // W7
	lane            uint8
	onHold          bool // W13
	// lackSeen: a run found the status lacking what the probe needs
	// (lack.go); the second such run logs it.
	lackSeen   bool
	lastResult int8  // W10: a results.Result; zero value Success (W12)
	resultRun  int32 // W10

	// written is the result the worker last wrote to its container's
	// cache entry (it is the entry's only writer), noWrite when none: a
	// run's verdict changed the cached result when it differs (W11, R3),
	// known without a lookup.
	written int8
	// state holds what the run before knew of the container instance
	// (stateHealthy, ...): the period by state, the events'
	// counts and the health-event log.
	state uint8
	// pstate is the state whose period the scheduler has.
	pstate runtime.PeriodState
	// failures counts the failed runs since the last Success verdict of
	// the container instance ("succeeded after N failures").
	failures int32

	stopped atomic.Bool // W14: stop was signalled
	ran     atomic.Bool // the scheduler has dispatched the worker at least once

	// Run state (W5–W13): the container ID as the status gives it
	// ("containerd://abc"); containerID parses it.
	cid string

	// Metric series handles, created on the first executed run (X1, X2);
	// atomic because the scrape reads it while a run may be creating it.
	series atomic.Pointer[workerSeries]
	// counters are probed_probes_total's children for the worker's kind
	// and probe type; nil without Options.RuntimeMetricsRegisterer.
	counters *probeCounters
}

// noWrite is worker.written before the worker wrote its container's entry.
const noWrite = -2

// Bits of worker.state, per container instance (cleared by W6).
const (
	stateDecided   uint8 = 1 << iota // a verdict was applied (by a run, or W8's Failure)
	stateHealthy                     // that verdict is Success
	stateSucceeded                   // a run applied a Success verdict (time to first success)
	stateRan                         // a run was executed (the next is not the first check)
	stateErrored                     // the last executed run was errored
)

// verdict is the verdict the container instance has: Unknown before any
// (the initial values of W1 and W6 are no verdict), else the last applied.
func (w *worker) verdict() results.Result {
	switch {
	case w.state&stateDecided == 0:
		return results.Unknown
	case w.state&stateHealthy != 0:
		return results.Success
	}
	return results.Failure
}

// key returns the worker's key (spec §2).
func (w *worker) key() probeKey {
	return probeKey{podUID: w.rs.Pod.UID, containerName: w.rs.Container.Name, probeType: w.rs.ProbeType}
}

// containerID parses cid like results.ParseContainerID ("type://id",
// surrounding quotes ignored; anything else is the empty ID) without
// allocating.
func (w *worker) containerID() results.ContainerID {
	s := strings.Trim(w.cid, "\"")
	typ, id, ok := strings.Cut(s, "://")
	if !ok || strings.Contains(id, "://") {
		return results.ContainerID{}
	}
	return results.ContainerID{Type: typ, ID: id}
}

// resultsManager returns the results manager of the worker's probe type.
func (w *worker) resultsManager() results.Manager { return w.m.results[w.rs.ProbeType] }

// initialValue is W1: readiness Failure, liveness Success, startup Unknown.
func (w *worker) initialValue() results.Result {
	switch w.rs.ProbeType {
	case runtime.Readiness:
		return results.Failure
	case runtime.Startup:
		return results.Unknown
	}
	return results.Success
}

// newWorker creates the worker of spec: its Kind, ProbeType, Pod,
// Container, Probe, and for an annotation probe Plugin and Milliseconds.
func newWorker(m *manager, spec runtime.Spec) *worker {
	w := &worker{m: m, rs: spec, lane: uint8(runtime.LaneOf(spec.Kind)), written: noWrite}
	pod, c := spec.Pod, spec.Container
	// W7: a restartable init container is named in spec.initContainers and
	// has restartPolicy Always.
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == c.Name {
			w.restartableInit = runtime.IsRestartable(c)
			break
		}
	}
	m.rt.PrepareInto(&w.prepared, &w.rs)
	if m.rtm != nil {
		w.counters = m.rtm.countersFor(spec.Kind, spec.ProbeType)
	}
	return w
}

// ownerSeed seeds the hashes of Owner: stable within the process, which is
// all the runtime's shares need.
var ownerSeed = maphash.MakeSeed()

// Owner names the worker's pod and namespace for the runtime's shares
// (runtime.Owned): a pod holds only its share of a lane's slots, so its
// hung probes delay itself, not other pods. Hashed per call
// rather than stored: it is read only when the runtime has shares, and the
// worker stays small.
func (w *worker) Owner() runtime.Owner {
	return runtime.Owner{Pod: maphash.String(ownerSeed, string(w.rs.Pod.UID)), Namespace: maphash.String(ownerSeed, w.rs.Pod.Namespace)}
}

// stop signals the worker to exit (W14): non-blocking, idempotent, safe
// after exit. The exit happens on the worker's next run, which the trigger
// starts now or, if a run is in flight, right after it (M6).
func (w *worker) stop() {
	if w.stopped.CompareAndSwap(false, true) {
		w.m.sched.Trigger(w.id)
	}
}

// Run is one dispatch of the worker on the pool.
func (w *worker) Run() {
	m := w.m
	defer m.runs.Done()
	w.ran.Store(true)
	if w.stopped.Load() || m.ctx.Err() != nil {
		w.exit()
		return
	}
	if !w.doProbeSafe(m.ctx) {
		w.exit()
		return
	}
	m.sched.Done(w.id)
}

// exit is the worker's exit path (W4): unregister from the scheduler, drop
// the cached result of its container, its map entry and its metric series.
func (w *worker) exit() {
	m := w.m
	m.sched.Remove(w.id)
	if !w.containerID().IsEmpty() {
		w.resultsManager().Remove(w.containerID())
	}
	m.removeWorker(w.key())
	w.prepared.Release() // e.g. a kept-alive connection (runtime.Releaser)
	// Last: until Done the run counts as in flight (scheduler stats,
	// Idle), so a caller that waits for the scheduler to be idle after a
	// stop finds the worker's cache entry, map entry and series gone.
	m.sched.Done(w.id)
}

// doProbeSafe runs doProbe, logging and swallowing a panic; the worker keeps
// going (W5).
func (w *worker) doProbeSafe(ctx context.Context) (keepGoing bool) {
	defer func() {
		if r := recover(); r != nil {
			w.m.log.Error("probe worker panicked", "panic", fmt.Sprint(r), "pod", klogPod(w.rs.Pod), "containerName", w.rs.Container.Name, "probeType", w.rs.ProbeType.String())
			keepGoing = true
		}
	}()
	return w.doProbe(ctx)
}

// doProbe is one step of the worker's state machine, the kubelet's
// worker.doProbe (W5). It returns whether the worker keeps going.
func (w *worker) doProbe(ctx context.Context) bool {
	m := w.m
	start := m.clock.Now()

	// W5.1
	status, ok := m.status.GetPodStatus(w.rs.Pod.UID)
	if !ok {
		m.log.Debug("No status for pod", "pod", klogPod(w.rs.Pod))
		m.noteLack(w, "the status provider has no status for the pod (GetPodStatus returned false)")
		return true
	}
	// W5.2
	if status.Phase == v1.PodFailed || status.Phase == v1.PodSucceeded {
		m.log.Debug("Pod is terminated, exiting probe worker", "pod", klogPod(w.rs.Pod), "phase", status.Phase)
		return false
	}
	// W5.3
	c, ok := findStatus(status.ContainerStatuses, w.rs.Container.Name)
	if !ok || c.ContainerID == "" {
		regular := c
		c, ok = findStatus(status.InitContainerStatuses, w.rs.Container.Name)
		if !ok || c.ContainerID == "" {
			m.log.Debug("Probe target container not found", "pod", klogPod(w.rs.Pod), "containerName", w.rs.Container.Name)
			if regular != nil {
				c = regular
			}
			if lack := lackOfContainer(&status, c); lack != "" {
				m.noteLack(w, lack)
			}
			return true
		}
	}
	// W5.4, W6: a new container ID.
	if w.cid != c.ContainerID {
		if old := w.containerID(); !old.IsEmpty() {
			w.resultsManager().Remove(old)
		}
		w.cid = c.ContainerID
		w.written = noWrite
		isRestart := SurvivedRestart(c, m.start, m.restartWindow)
		if w.restartableInit && w.rs.ProbeType == runtime.Startup && c.Started != nil && *c.Started {
			w.write(results.Success) // PR #137146
		}
		if !isRestart {
			w.write(w.initialValue())
		}
		w.onHold = false
		// BR-13: thresholds count per container instance, so the new
		// container needs its own successThreshold/failureThreshold run
		// (the documented semantics; upstream keeps lastResult, W12).
		w.resultRun = 0
		// A new instance has had no Success verdict: the unhealthy period.
		w.state, w.failures = 0, 0
		w.syncPeriod()
	}
	// W5.5, W13
	if w.onHold {
		return true
	}
	// W5.6, W8: not running.
	if c.State.Running == nil {
		m.log.Debug("Non-running container probed", "pod", klogPod(w.rs.Pod), "containerName", w.rs.Container.Name)
		if lack := lackOfContainer(&status, c); lack != "" {
			m.noteLack(w, lack)
		}
		if !w.containerID().IsEmpty() {
			w.write(results.Failure)
			w.state = w.state&^stateHealthy | stateDecided
			w.syncPeriod()
		}
		if c.State.Terminated == nil {
			return true // waiting (W8a)
		}
		return ContainerShouldRestart(w.rs.Container, &w.rs.Pod.Spec, c.State.Terminated.ExitCode) // W8b
	}
	// W5.7, W9: deletion shortcut for liveness and startup.
	if w.rs.Pod.DeletionTimestamp != nil && (w.rs.ProbeType == runtime.Liveness || w.rs.ProbeType == runtime.Startup) {
		m.log.Debug("Pod deletion requested, setting probe result to success", "pod", klogPod(w.rs.Pod), "containerName", w.rs.Container.Name, "probeType", w.rs.ProbeType.String())
		if w.rs.ProbeType == runtime.Startup {
			m.log.Info("Pod deletion requested before container has fully started", "pod", klogPod(w.rs.Pod), "containerName", w.rs.Container.Name)
		}
		w.write(results.Success)
		return false
	}
	// W5.8: initial delay from the running container's StartedAt
	// (initialDelayPending). probed then wakes the worker when the delay
	// ends (plus its phase, under FirstRunSpread whatever the scheduler's
	// age) instead of up to a period later (BR-11; the kubelet waits for
	// its next tick), but never later than its next periodic run: the
	// kubelet re-reads the status at every tick, so a StartedAt that moves
	// earlier (a late or corrected status) is seen within one period.
	elapsed := start.Sub(c.State.Running.StartedAt.Time)
	if delay := w.rs.Timing().InitialDelay; initialDelayPending(elapsed, delay) {
		remaining := delay - elapsed
		if wake := remaining + m.sched.PromptSpread(keyHash(w.key()), w.period()); wake < w.period() {
			m.sched.Schedule(w.id, wake)
		}
		return true
	}
	// W5.9: startup gating.
	started := c.Started != nil && *c.Started
	if started == (w.rs.ProbeType == runtime.Startup) {
		if c.Started == nil {
			m.noteLack(w, lackStarted)
		}
		return true
	}
	// W5.10: run the probe; an errored probe is discarded.
	w.probe(ctx, start, &status, c)
	return true
}

// initialDelayPending is W5.8's test, the kubelet's
// int32(elapsed/time.Second) < initialDelaySeconds: the time since the
// container started, truncated toward zero to whole seconds, is below the
// delay. A delay with milliseconds (an annotation probe's
// initialDelayMilliseconds) is compared the same way in milliseconds.
func initialDelayPending(elapsed, delay time.Duration) bool {
	unit := time.Second
	if delay%time.Second != 0 {
		unit = time.Millisecond
	}
	return elapsed/unit < delay/unit
}

// period returns the probe's period now (runtime.Spec.Timing:
// periodSeconds, plus periodMilliseconds for an annotation probe, a
// non-positive one counting as the API default of 10 s; for an annotation
// probe with periods by state, the one of the state the scheduler has).
func (w *worker) period() time.Duration { return w.rs.Timing().PeriodIn(w.pstate) }

// periodState is where the probe stands for its period:
// in transition while its results since the last verdict differ from it
// and count toward the threshold that would change it (W10, W11: a
// threshold reached sets the verdict, so lastResult equals it again);
// else healthy after a Success verdict of the container instance, else
// unhealthy (before its first Success verdict, after a Failure verdict or
// a container that stopped running, W8).
func (w *worker) periodState() runtime.PeriodState {
	healthy := w.state&stateHealthy != 0
	switch {
	case w.resultRun > 0 && (results.Result(w.lastResult) == results.Success) != healthy:
		return runtime.StateTransition
	case healthy:
		return runtime.StateHealthy
	}
	return runtime.StateUnhealthy
}

// syncPeriod gives the scheduler the period of the worker's state when it
// changed (scheduler.SetPeriod: the grid re-anchored at this run, BR-10
// kept). Only annotation probes with periods by state have more than one
// period; for every other probe it is one nil check and one comparison.
func (w *worker) syncPeriod() {
	ext := w.rs.Extension
	if ext == nil || ext.Periods.IsZero() {
		return
	}
	st := w.periodState()
	if st == w.pstate {
		return
	}
	t := w.rs.Timing()
	before, after := t.PeriodIn(w.pstate), t.PeriodIn(st)
	w.pstate = st
	if before != after {
		w.m.sched.SetPeriod(w.id, keyHash(w.key()), after)
	}
}

// write sets the container's cached result (the worker is its only
// writer) and remembers it.
func (w *worker) write(r results.Result) {
	w.resultsManager().Set(w.containerID(), r, w.rs.Pod)
	w.written = int8(r)
}

// KubeletRestartWindow is the kubelet's window of W6c and M9: a container
// that was running more than this before the manager started survived a
// restart of the agent (Options.AnyRunningSurvives makes it 0).
const KubeletRestartWindow = 10 * time.Second

// SurvivedRestart reports whether container c survived a restart of the
// agent whose prober manager started at start, with window KubeletRestartWindow
// (or 0, Options.AnyRunningSurvives): it is running with a non-zero
// StartedAt earlier than start − window (W6c, M9). Its workers write no
// initial result, its readiness is kept until its first real result (M9),
// and cluster mode's readiness gate counts it as started when the kubelet
// says so (M8, agent/kube/gate).
func SurvivedRestart(c *v1.ContainerStatus, start time.Time, window time.Duration) bool {
	run := c.State.Running
	return run != nil && !run.StartedAt.IsZero() && run.StartedAt.Time.Before(start.Add(-window))
}

// probe runs the handler and applies the result (W5.10, W5.11, W10–W13),
// gives the scheduler the period of the probe's new state (syncPeriod) and
// tells the observer, whose record says where the run left the threshold
// (the probe events are an observer's: events.go).
func (w *worker) probe(ctx context.Context, start time.Time, status *v1.PodStatus, c *v1.ContainerStatus) {
	m := w.m
	runCtx := ctx
	ctx, span := m.startSpan(ctx, w, status.PodIP)
	runStart := m.clock.Now()
	rep := m.rt.Run(ctx, &w.prepared, runtime.Target{PodIP: status.PodIP, PodIPs: status.PodIPs, ContainerID: c.ContainerID})
	duration := m.clock.Since(start)
	// A network probe that ran for half its timeout or more takes the slow
	// lane next time, so hung targets never hold the healthy probes' slots;
	// it comes back once it is fast again.
	if lane := runtime.NextLane(int(w.lane), m.clock.Since(runStart), w.rs.Timeout()); lane != int(w.lane) {
		w.lane = uint8(lane)
		m.sched.SetLane(w.id, lane)
	}
	if w.counters != nil {
		w.counters.countProbe(rep)
	}
	run := runFacts{first: w.state&stateRan == 0, previous: w.verdict(), erroredBefore: w.state&stateErrored != 0}
	w.state |= stateRan
	if rep.Err != nil || ctx.Err() != nil {
		w.state |= stateErrored
		m.log.Debug("Probe errored", "pod", klogPod(w.rs.Pod), "containerName", w.rs.Container.Name, "probeType", w.rs.ProbeType.String(), "err", rep.Err)
		m.endSpan(runCtx, &span, w, rep, results.Unknown, false, false)
		run.discarded = rep.Err == nil
		w.observe(start, duration, rep, results.Unknown, run)
		return
	}
	w.state &^= stateErrored
	// P6: success and warning count as success; failure, unknown and
	// anything else as failure.
	result := results.Failure
	if rep.Outcome.Result == runtime.Success || rep.Outcome.Result == runtime.Warning {
		result = results.Success
	}
	m.metrics.observe(w, result, duration)

	// W10
	if results.Result(w.lastResult) == result {
		w.resultRun++
	} else {
		w.lastResult = int8(result)
		w.resultRun = 1
	}
	run.count, run.threshold = w.resultRun, w.rs.Probe.SuccessThreshold
	if result == results.Failure {
		w.failures++
		run.threshold = w.rs.Probe.FailureThreshold
	}
	run.failures = w.failures
	cached := w.cached()
	changed := false // the cached result changed (the span's)
	// W11
	applied := w.resultRun >= run.threshold
	if applied {
		changed = int8(result) != w.written
		run.transition = result != run.previous
		w.write(result)
		cached = result
		if result == results.Success {
			if w.state&stateSucceeded == 0 {
				run.firstSuccess = w.timeToFirstSuccess(c, start.Add(duration))
			}
			w.state |= stateDecided | stateHealthy | stateSucceeded
			w.failures = 0
		} else {
			w.state = w.state&^stateHealthy | stateDecided
		}
		// W13
		if (w.rs.ProbeType == runtime.Liveness && result == results.Failure) || w.rs.ProbeType == runtime.Startup {
			w.onHold = true
			w.resultRun = 0
		}
	}
	w.syncPeriod()
	m.endSpan(runCtx, &span, w, rep, cached, applied, changed)
	w.observe(start, duration, rep, cached, run)
}

// runFacts are what the observer learns of a run beyond its report.
type runFacts struct {
	first         bool           // the container instance's first executed run
	previous      results.Result // the verdict before the run (worker.verdict)
	transition    bool           // the run applied another verdict
	firstSuccess  time.Duration  // RunRecord.TimeToFirstSuccess
	erroredBefore bool           // the previous executed run was errored too
	discarded     bool           // RunRecord.Discarded

	// RunRecord.Count, Threshold and Failures (W10).
	count, threshold, failures int32
}

// timeToFirstSuccess is the time from the container's start to end, the
// end of the run that gave its first Success verdict, observed in
// probed_probe_time_to_first_success_seconds (kubernetes/kubernetes#96411);
// zero, and not observed, for a container that started before the manager
// (its start was not seen: an agent restart).
func (w *worker) timeToFirstSuccess(c *v1.ContainerStatus, end time.Time) time.Duration {
	if c.State.Running == nil || c.State.Running.StartedAt.IsZero() || c.State.Running.StartedAt.Time.Before(w.m.start) {
		return 0
	}
	d := max(end.Sub(c.State.Running.StartedAt.Time), time.Nanosecond)
	if w.m.rtm != nil {
		w.m.rtm.observeFirstSuccess(w.rs.Kind, w.rs.ProbeType, d)
	}
	return d
}

// cached returns the container's cached result as the worker last wrote
// it (it is the entry's only writer), Unknown when it wrote none.
func (w *worker) cached() results.Result {
	if w.written == noWrite {
		return results.Unknown
	}
	return results.Result(w.written)
}

func (w *worker) observe(start time.Time, d time.Duration, rep runtime.Report, cached results.Result, run runFacts) {
	o := w.m.observer
	if o == nil {
		return
	}
	timing := w.rs.Timing()
	rec := RunRecord{
		Period:             timing.PeriodIn(w.pstate),
		Timeout:            timing.Timeout,
		PodUID:             w.rs.Pod.UID,
		Namespace:          w.rs.Pod.Namespace,
		PodName:            w.rs.Pod.Name,
		Pod:                w.rs.Pod,
		ContainerName:      w.rs.Container.Name,
		ContainerID:        w.cid,
		ProbeType:          w.rs.ProbeType,
		Origin:             w.rs.Origin,
		Kind:               w.rs.Kind,
		Start:              start,
		Duration:           d,
		Result:             rep.Outcome.Result,
		Err:                rep.Err,
		Attempts:           rep.Attempts,
		Cached:             cached,
		Previous:           run.previous,
		Transition:         run.transition,
		FirstCheck:         run.first,
		TimeToFirstSuccess: run.firstSuccess,
		Count:              run.count,
		Threshold:          run.threshold,
		Failures:           run.failures,
		ErroredBefore:      run.erroredBefore,
		Discarded:          run.discarded,
	}
	switch {
	case rep.Err != nil:
		rec.Message = rep.Err.Error()
	case rep.Outcome.Result != runtime.Success:
		rec.Message = rep.Outcome.Output
	}
	o.ProbeRan(rec)
}

func findStatus(statuses []v1.ContainerStatus, name string) (*v1.ContainerStatus, bool) {
	for i := range statuses {
		if statuses[i].Name == name {
			return &statuses[i], true
		}
	}
	return nil, false
}

// ContainerShouldRestart decides whether a terminated container will be
// restarted (W8b, ContainerRestartRules on by default since v1.35), exactly
// as the kubelet's pkg/api/v1/pod/util.go ContainerShouldRestart: when the
// container has its own restartPolicy, the first of its restartPolicyRules
// whose exit codes match decides if its action is Restart (a rule with an
// unknown operator matches nothing and the next rule is tried; a matching
// rule with another action falls through), then that restartPolicy
// (Always; OnFailure: exit code ≠ 0; Never; an unknown value falls
// through); then the pod's (Always; OnFailure: exit code ≠ 0; Never;
// unset or unknown: Always). Rules without a container restartPolicy are
// ignored, as upstream.
func ContainerShouldRestart(c *v1.Container, podSpec *v1.PodSpec, exitCode int32) bool {
	if c.RestartPolicy != nil {
		for _, rule := range c.RestartPolicyRules {
			if rule.ExitCodes != nil && exitCodesMatch(rule.ExitCodes, exitCode) {
				if rule.Action == v1.ContainerRestartRuleActionRestart {
					return true
				}
				break // upstream: the first match decides, else the policy
			}
		}
		switch *c.RestartPolicy {
		case v1.ContainerRestartPolicyAlways:
			return true
		case v1.ContainerRestartPolicyOnFailure:
			return exitCode != 0
		case v1.ContainerRestartPolicyNever:
			return false
		}
	}
	switch podSpec.RestartPolicy {
	case v1.RestartPolicyNever:
		return false
	case v1.RestartPolicyOnFailure:
		return exitCode != 0
	}
	return true // Always, unset or unknown
}

// exitCodesMatch is upstream's findMatchingContainerRestartRule test of one
// rule: In matches a listed code, NotIn an unlisted one, any other operator
// nothing.
func exitCodesMatch(r *v1.ContainerRestartRuleOnExitCodes, code int32) bool {
	in := false
	for _, v := range r.Values {
		if v == code {
			in = true
			break
		}
	}
	switch r.Operator {
	case v1.ContainerRestartRuleOnExitCodesOpIn:
		return in
	case v1.ContainerRestartRuleOnExitCodesOpNotIn:
		return !in
	}
	return false
}
