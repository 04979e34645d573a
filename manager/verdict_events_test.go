package manager

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"

	"github.com/probed/probed/internal/testevents"
	"github.com/probed/probed/manager/customprobe"
	"github.com/probed/probed/manager/results"
	"github.com/probed/probed/runtime"
)

// Events that say where the threshold stands
// (kubernetes/kubernetes#115823): an annotation probe's events carry the
// count against the threshold and what the verdict changed; spec probes
// keep the kubelet's K4 texts; --events=transitions records one event per
// verdict change. The fake exec handler's output is "fake".

// execEnv is a test env with the fake exec handler and events recorded
// into the returned log, in mode.
func execEnv(t *testing.T, mode EventMode) (*testEnv, *testevents.Log) {
	t.Helper()
	return execEnvWith(t, mode, nil)
}

// execEnvWith is execEnv with the manager's options changed by mutate.
func execEnvWith(t *testing.T, mode EventMode, mutate func(*Options)) (*testEnv, *testevents.Log) {
	t.Helper()
	log := &testevents.Log{}
	var rt *runtime.Runtime
	e := newTestEnv(t, func(o *Options) {
		var err error
		rt, err = runtime.New(runtime.Options{PoolSize: 4, ExecPoolSize: 4, Logger: quietLogger(), Clock: o.Clock})
		if err != nil {
			t.Fatal(err)
		}
		o.Runtime, o.Recorder, o.Events = rt, log, mode
		if mutate != nil {
			mutate(o)
		}
	})
	if err := rt.Register(runtime.KindExec, e.exec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	return e, log
}

// sequence runs the worker once per verdict in rs.
func sequence(e *testEnv, w *worker, rs ...runtime.Result) {
	e.t.Helper()
	for _, r := range rs {
		e.exec.set(r)
		e.runOnce(w)
	}
}

func wantLines(t *testing.T, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("events:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// Threshold events with the kubelet's event mode: every failed run of an
// annotation probe says where the threshold stands and, at the threshold,
// what the verdict changed; the recovery says how many failures came
// before. The examples of the issue.
func TestEvents_AnnotationThresholdTexts(t *testing.T) {
	e, log := execEnv(t, EventsAll)
	w := annotated(e, "ev", `"type":"readiness","failureThreshold":3,"periodSeconds":10,"exec":{"command":["true"]}`)
	F, S := runtime.Failure, runtime.Success
	sequence(e, w, S, F, F, F, F, S)
	e.expectCached(runtime.Readiness, results.Success)
	wantLines(t, log.Lines(),
		"Normal ProbeSucceeded Readiness probe succeeded: container marked ready",
		"Warning ProbeFailureBelowThreshold Readiness probe failed (1/3, threshold not reached): fake",
		"Warning ProbeFailureBelowThreshold Readiness probe failed (2/3, threshold not reached): fake",
		"Warning Unhealthy Readiness probe failed (3/3): container marked not ready: fake",
		"Warning Unhealthy Readiness probe failed (threshold 3 reached): container not ready: fake",
		"Normal ProbeSucceeded Readiness probe succeeded after 4 failures: container marked ready",
	)
}

// A liveness verdict leads to Options.Consequence (the kubelet's
// "container will be restarted" by default; the agent's cluster mode says
// what its actuator decided); errored runs keep the kubelet's P5 text and
// never count.
func TestEvents_AnnotationLivenessAndErrored(t *testing.T) {
	e, log := execEnv(t, EventsAll)
	w := annotated(e, "live", `"type":"liveness","failureThreshold":2,"periodSeconds":10,"exec":{"command":["true"]}`)
	e.exec.setErr(errFake)
	e.runOnce(w)
	e.exec.setErr(nil)
	sequence(e, w, runtime.Failure, runtime.Failure)
	e.expectCached(runtime.Liveness, results.Failure)
	wantLines(t, log.Lines(),
		"Warning Unhealthy Liveness probe errored and resulted in unknown state: fake handler error",
		"Warning ProbeFailureBelowThreshold Liveness probe failed (1/2, threshold not reached): fake",
		"Warning Unhealthy Liveness probe failed (2/2): container will be restarted: fake",
	)
}

// The announcement of a liveness or startup verdict is what the actuator
// decided (Options.Consequence, asked once, with the run's record: the
// count and threshold of the verdict), not a text fixed for the node: a
// refused restart is announced as refused, never "is to be restarted".
func TestEvents_VerdictAnnouncesTheActuatorsDecision(t *testing.T) {
	var asked []RunRecord
	e, log := execEnvWith(t, EventsAll, func(o *Options) {
		o.Consequence = func(r RunRecord) string {
			asked = append(asked, r)
			return "the container is not restarted: namespace ns1 is not selected by --liveness-action-namespaces"
		}
	})
	w := annotated(e, "live", `"type":"liveness","failureThreshold":2,"periodSeconds":10,"exec":{"command":["true"]}`)
	sequence(e, w, runtime.Failure, runtime.Failure)
	wantLines(t, log.Lines(),
		"Warning ProbeFailureBelowThreshold Liveness probe failed (1/2, threshold not reached): fake",
		"Warning Unhealthy Liveness probe failed (2/2): the container is not restarted: namespace ns1 is not selected by --liveness-action-namespaces: fake",
	)
	if len(asked) != 1 || asked[0].Count != 2 || asked[0].Threshold != 2 || !asked[0].Transition || asked[0].ProbeType != runtime.Liveness {
		t.Fatalf("asked %+v, want once, for the verdict (2/2)", asked)
	}
}

// The run record carries where the run left the threshold (W10): the
// count of its result toward the threshold of that result, the failures
// since the last Success verdict, whether the previous run was errored;
// an errored run has no count.
func TestRunRecord_CountAndThreshold(t *testing.T) {
	obs := &recordObserver{}
	e, _ := execEnvWith(t, EventsAll, func(o *Options) { o.Observer = obs })
	w := annotated(e, "count", `"type":"readiness","failureThreshold":3,"successThreshold":1,"periodSeconds":10,"exec":{"command":["true"]}`)
	sequence(e, w, runtime.Failure, runtime.Failure)
	e.exec.setErr(errFake)
	e.runOnce(w)
	e.exec.setErr(nil)
	sequence(e, w, runtime.Failure, runtime.Success)
	type facts struct {
		count, threshold, failures int32
		erroredBefore              bool
	}
	want := []facts{{1, 3, 1, false}, {2, 3, 2, false}, {0, 0, 0, false}, {3, 3, 3, true}, {1, 1, 3, false}}
	recs := obs.get()
	if len(recs) != len(want) {
		t.Fatalf("%d records, want %d", len(recs), len(want))
	}
	for i, r := range recs {
		if got := (facts{r.Count, r.Threshold, r.Failures, r.ErroredBefore}); got != want[i] {
			t.Errorf("run %d: %+v, want %+v", i, got, want[i])
		}
	}
}

// P5, P6 with the kubelet's texts for a spec probe under EventsAll (the
// prober's PR4 formats): a warning is a ProbeWarning, a failure an
// Unhealthy, an errored run Unhealthy "errored and resulted in unknown
// state", a success nothing; each on the container's object reference
// (P8).
func TestEvents_SpecProbeKubeletTexts(t *testing.T) {
	rec := &refLog{}
	e := newTestEnv(t, func(o *Options) {
		rt, err := runtime.New(runtime.Options{PoolSize: 4, ExecPoolSize: 4, Logger: quietLogger(), Clock: o.Clock})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rt.Close(context.Background()) })
		o.Runtime, o.Recorder = rt, rec
	})
	if err := e.m.rt.Register(runtime.KindExec, e.exec); err != nil {
		t.Fatal(err)
	}
	p := execProbe()
	p.FailureThreshold = 5
	e.status.set(testPodUID, runningStatus(fakeNow, true))
	e.m.AddPod(context.Background(), testPod(probeOf(runtime.Liveness, p)))
	w := e.worker(testPodUID, testContainerName, runtime.Liveness)
	sequence(e, w, runtime.Success, runtime.Warning, runtime.Failure)
	e.exec.setErr(errFake)
	e.runOnce(w)
	wantLines(t, rec.Lines(),
		"Warning ProbeWarning Liveness probe warning: fake spec.containers{"+testContainerName+"}",
		"Warning Unhealthy Liveness probe failed: fake spec.containers{"+testContainerName+"}",
		"Warning Unhealthy Liveness probe errored and resulted in unknown state: fake handler error spec.containers{"+testContainerName+"}",
	)
}

// refLog keeps each event with the field path of its object.
type refLog struct{ testevents.Log }

func (l *refLog) Eventf(obj k8sruntime.Object, eventtype, reason, format string, args ...any) {
	l.Log.Eventf(obj, eventtype, reason, format+" "+obj.(*v1.ObjectReference).FieldPath, args...)
}

// --events=transitions: one event per verdict change (the
// first verdict of the container included) and one when a probe starts
// erroring, whatever the runs in between.
func TestEvents_TransitionsOnly(t *testing.T) {
	e, log := execEnv(t, EventsTransitions)
	w := annotated(e, "tr", `"type":"readiness","failureThreshold":3,"periodSeconds":10,"exec":{"command":["true"]}`)
	F, S := runtime.Failure, runtime.Success
	sequence(e, w, F, F, F, F, F, S, S, F, S)
	e.exec.setErr(errFake)
	e.runOnce(w)
	e.runOnce(w)
	e.exec.setErr(nil)
	sequence(e, w, S)
	e.exec.setErr(errFake)
	e.runOnce(w)
	wantLines(t, log.Lines(),
		"Warning Unhealthy Readiness probe failed (3/3): container marked not ready: fake",
		"Normal ProbeSucceeded Readiness probe succeeded after 5 failures: container marked ready",
		"Warning Unhealthy Readiness probe errored and resulted in unknown state: fake handler error",
		"Warning Unhealthy Readiness probe errored and resulted in unknown state: fake handler error",
	)
}

// Spec probes keep the kubelet's exact K4 texts: one per failed run in the
// kubelet's mode (recorded by the runtime before the threshold), and under
// --events=transitions the same text once, for the run that changed the
// verdict.
func TestEvents_SpecProbesKeepK4Texts(t *testing.T) {
	for _, tc := range []struct {
		mode EventMode
		want []string
	}{
		{EventsAll, []string{
			"Warning Unhealthy Readiness probe failed: fake",
			"Warning Unhealthy Readiness probe failed: fake",
			"Warning Unhealthy Readiness probe failed: fake",
		}},
		{EventsTransitions, []string{
			"Normal ProbeSucceeded Readiness probe succeeded: container marked ready",
			"Warning Unhealthy Readiness probe failed: fake",
			"Normal ProbeSucceeded Readiness probe succeeded after 2 failures: container marked ready",
		}},
	} {
		e, log := execEnv(t, tc.mode)
		p := execProbe()
		p.FailureThreshold = 2
		e.status.set(testPodUID, runningStatus(fakeNow, true))
		e.m.AddPod(context.Background(), testPod(probeOf(runtime.Readiness, p)))
		w := e.worker(testPodUID, testContainerName, runtime.Readiness)
		sequence(e, w, runtime.Success, runtime.Failure, runtime.Failure, runtime.Success)
		got := log.Lines()
		if tc.mode == EventsAll {
			// K4: one per failed run; no success event (the kubelet has none).
			got = filter(got, "Unhealthy")
			tc.want = tc.want[:2]
		}
		wantLines(t, got, tc.want...)
	}
}

func filter(lines []string, sub string) []string {
	var out []string
	for _, l := range lines {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return out
}

// The health-event log's facts in the run record: the
// verdict before the run (UNKNOWN until the first), whether the run
// changed it, whether it was the container's first check; and the time
// from the container's start to its first Success verdict, in the record
// and in probed_probe_time_to_first_success_seconds
// (kubernetes/kubernetes#96411).
func TestRunRecord_TransitionFacts(t *testing.T) {
	obs := &recordObserver{}
	reg := prometheus.NewRegistry()
	e := newTestEnv(t, func(o *Options) { o.Observer, o.RuntimeMetricsRegisterer = obs, reg })
	p := testPod(v1.Container{Name: testContainerName})
	p.UID = "facts"
	p.Annotations = map[string]string{customprobe.Annotation: `[{"container":"` + testContainerName +
		`","type":"readiness","failureThreshold":2,"periodSeconds":10,"exec":{"command":["true"]}}]`}
	e.m.AddPod(context.Background(), p)
	w := e.worker("facts", testContainerName, runtime.Readiness)
	e.step(4500 * time.Millisecond) // no status yet: no run
	e.status.set("facts", runningStatus(fakeNow.Add(time.Second), true))
	sequence(e, w, runtime.Success, runtime.Failure, runtime.Failure, runtime.Success)
	recs := obs.get()
	type facts struct {
		prev              results.Result
		transition, first bool
		ttfs              time.Duration
	}
	want := []facts{
		{results.Unknown, true, true, 3500 * time.Millisecond},
		{results.Success, false, false, 0},
		{results.Success, true, false, 0},
		{results.Failure, true, false, 0},
	}
	if len(recs) != len(want) {
		t.Fatalf("%d records, want %d", len(recs), len(want))
	}
	for i, r := range recs {
		if got := (facts{r.Previous, r.Transition, r.FirstCheck, r.TimeToFirstSuccess}); got != want[i] {
			t.Errorf("run %d: %+v, want %+v", i, got, want[i])
		}
	}
	const metric = `
# HELP probed_probe_time_to_first_success_seconds Time from a container's start (its status's startedAt) to its probe's first Success verdict, by handler kind and probe type: time to started, ready and live (containers that started before the agent are not counted).
# TYPE probed_probe_time_to_first_success_seconds histogram
probed_probe_time_to_first_success_seconds_bucket{handler="exec",probe_type="readiness",le="0.1"} 0
probed_probe_time_to_first_success_seconds_bucket{handler="exec",probe_type="readiness",le="0.25"} 0
probed_probe_time_to_first_success_seconds_bucket{handler="exec",probe_type="readiness",le="0.5"} 0
probed_probe_time_to_first_success_seconds_bucket{handler="exec",probe_type="readiness",le="1"} 0
probed_probe_time_to_first_success_seconds_bucket{handler="exec",probe_type="readiness",le="2.5"} 0
probed_probe_time_to_first_success_seconds_bucket{handler="exec",probe_type="readiness",le="5"} 1
probed_probe_time_to_first_success_seconds_bucket{handler="exec",probe_type="readiness",le="10"} 1
probed_probe_time_to_first_success_seconds_bucket{handler="exec",probe_type="readiness",le="20"} 1
probed_probe_time_to_first_success_seconds_bucket{handler="exec",probe_type="readiness",le="30"} 1
probed_probe_time_to_first_success_seconds_bucket{handler="exec",probe_type="readiness",le="60"} 1
probed_probe_time_to_first_success_seconds_bucket{handler="exec",probe_type="readiness",le="120"} 1
probed_probe_time_to_first_success_seconds_bucket{handler="exec",probe_type="readiness",le="300"} 1
probed_probe_time_to_first_success_seconds_bucket{handler="exec",probe_type="readiness",le="600"} 1
probed_probe_time_to_first_success_seconds_bucket{handler="exec",probe_type="readiness",le="+Inf"} 1
probed_probe_time_to_first_success_seconds_sum{handler="exec",probe_type="readiness"} 3.5
probed_probe_time_to_first_success_seconds_count{handler="exec",probe_type="readiness"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(metric), "probed_probe_time_to_first_success_seconds"); err != nil {
		t.Fatal(err)
	}
}

// Options.Events holds with the default runtime (the built-in handlers): with
// EventsTransitions, a real refused TCP probe failing three times records
// one event, at its verdict.
func TestEvents_DefaultRuntimeTakesTheMode(t *testing.T) {
	_, refused := listenTCP(t)
	log := &testevents.Log{}
	e := newTestEnv(t, func(o *Options) { o.Runtime, o.Recorder, o.Events = nil, log, EventsTransitions })
	w := annotated(e, "mode", fmt.Sprintf(`"type":"readiness","failureThreshold":2,"tcpSocket":{"port":%d}`, refused))
	for i := 0; i < 3; i++ {
		e.runOnce(w)
	}
	got := log.Lines()
	if len(got) != 1 || !strings.HasPrefix(got[0], "Warning Unhealthy Readiness probe failed (2/2): container marked not ready: dial tcp 127.0.0.1:") {
		t.Fatalf("events %q, want the verdict's only", got)
	}
}
