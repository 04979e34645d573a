package gate

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/probed/probed/manager/customprobe"
	"github.com/probed/probed/manager/results"
)

var proberStart = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// The annotation's probes carry parameters a message must never show (BR-22).
const secretParams = `"params":{"path":"/ready?token=s3cr3t-t0ken","body":"password=hunter2"}`

func probeJSON(container, typ string) string {
	return `{"container":"` + container + `","type":"` + typ + `","plugin":{"name":"http-match","port":8080,` + secretParams + `}}`
}

// gatedPod returns a pod with containers app and side, both running since
// startedAt with container IDs containerd://app-1 and containerd://side-1,
// and the annotation holding the given probes.
func gatedPod(startedAt time.Time, probes ...string) *v1.Pod {
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "uid-1"},
		Spec: v1.PodSpec{
			Containers:     []v1.Container{{Name: "app", Image: "app"}, {Name: "side", Image: "side"}},
			ReadinessGates: []v1.PodReadinessGate{{ConditionType: DefaultConditionType}},
		},
	}
	if len(probes) > 0 {
		pod.Annotations = map[string]string{customprobe.Annotation: "[" + strings.Join(probes, ",") + "]"}
	}
	started := true
	for _, name := range []string{"app", "side"} {
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, v1.ContainerStatus{
			Name: name, ContainerID: "containerd://" + name + "-1", Started: &started,
			State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(startedAt)}},
		})
	}
	return pod
}

func containerIDOf(name string) results.ContainerID {
	return results.ParseContainerID("containerd://" + name + "-1")
}

type resultsSet struct{ res Results }

func newResults() *resultsSet {
	return &resultsSet{res: Results{Readiness: results.NewManager(), Startup: results.NewManager()}}
}

// set caches results without a consumer: Set would block on the updates
// channel after 20 changes, far more than any case here.
func (r *resultsSet) readiness(name string, v results.Result) *resultsSet {
	r.res.Readiness.Set(containerIDOf(name), v, nil)
	return r
}

func (r *resultsSet) startup(name string, v results.Result) *resultsSet {
	r.res.Startup.Set(containerIDOf(name), v, nil)
	return r
}

func decide(t *testing.T, pod *v1.Pod, r *resultsSet) Condition {
	t.Helper()
	probes, _ := viewOf(pod)
	if len(probes.Refused) > 0 {
		t.Fatalf("annotation: %v", probes.Errors())
	}
	return Decide(pod, probes, r.res, proberStart)
}

func TestDecide(t *testing.T) {
	fresh := proberStart.Add(time.Minute)     // started after probed: workers write initial values (W1)
	survivor := proberStart.Add(-time.Minute) // started before probed's restart: no initial value (W6c)
	notRunning := func(pod *v1.Pod) *v1.Pod {
		pod.Status.ContainerStatuses[0].State = v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}
		return pod
	}
	noStatus := func(pod *v1.Pod) *v1.Pod { pod.Status.ContainerStatuses = nil; return pod }
	notStartedByKubelet := func(pod *v1.Pod) *v1.Pod {
		f := false
		pod.Status.ContainerStatuses[0].Started = &f
		return pod
	}

	cases := []struct {
		name    string
		pod     *v1.Pod
		results *resultsSet
		want    Condition
	}{
		{"readiness Success → True ProbeSucceeded",
			gatedPod(fresh, probeJSON("app", "readiness")), newResults().readiness("app", results.Success),
			Condition{true, v1.ConditionTrue, ReasonProbeSucceeded, MessageProbesSucceeded}},
		{"readiness Failure (also W1's initial value) → False ProbeFailed",
			gatedPod(fresh, probeJSON("app", "readiness")), newResults().readiness("app", results.Failure),
			Condition{true, v1.ConditionFalse, ReasonProbeFailed, "readiness probe of container app failed"}},
		{"two failing readiness probes are both named, in pod order",
			gatedPod(fresh, probeJSON("side", "readiness"), probeJSON("app", "readiness")),
			newResults().readiness("app", results.Failure).readiness("side", results.Failure),
			Condition{true, v1.ConditionFalse, ReasonProbeFailed, "readiness probe of container app failed; readiness probe of container side failed"}},
		{"one Success and one Failure → False naming the failing one",
			gatedPod(fresh, probeJSON("app", "readiness"), probeJSON("side", "readiness")),
			newResults().readiness("app", results.Success).readiness("side", results.Failure),
			Condition{true, v1.ConditionFalse, ReasonProbeFailed, "readiness probe of container side failed"}},
		{"no annotation probe → True NoProbes (never stranded)",
			gatedPod(fresh), newResults(),
			Condition{true, v1.ConditionTrue, ReasonNoProbes, MessageNoProbes}},
		{"only a liveness probe → True NoProbes",
			gatedPod(fresh, probeJSON("app", "liveness")), newResults(),
			Condition{true, v1.ConditionTrue, ReasonNoProbes, MessageNoProbes}},
		{"startup probe succeeded, no readiness probe → True NoProbes",
			gatedPod(fresh, probeJSON("app", "startup")), newResults().startup("app", results.Success),
			Condition{true, v1.ConditionTrue, ReasonNoProbes, MessageNoProbes}},
		{"startup Unknown (W1) → False ContainerNotStarted",
			gatedPod(fresh, probeJSON("app", "startup"), probeJSON("app", "readiness")),
			newResults().startup("app", results.Unknown).readiness("app", results.Failure),
			Condition{true, v1.ConditionFalse, ReasonContainerNotStarted, "startup probe of container app has not succeeded"}},
		{"startup Failure → False ContainerNotStarted, readiness not judged",
			gatedPod(fresh, probeJSON("app", "startup"), probeJSON("app", "readiness")),
			newResults().startup("app", results.Failure).readiness("app", results.Success),
			Condition{true, v1.ConditionFalse, ReasonContainerNotStarted, "startup probe of container app has not succeeded"}},
		{"startup Success and readiness Success → True",
			gatedPod(fresh, probeJSON("app", "startup"), probeJSON("app", "readiness")),
			newResults().startup("app", results.Success).readiness("app", results.Success),
			Condition{true, v1.ConditionTrue, ReasonProbeSucceeded, MessageProbesSucceeded}},
		{"no startup result yet, readiness Failure → False ContainerNotStarted",
			gatedPod(fresh, probeJSON("app", "startup"), probeJSON("app", "readiness")),
			newResults().readiness("app", results.Failure),
			Condition{true, v1.ConditionFalse, ReasonContainerNotStarted, "startup probe of container app has not succeeded"}},
		{"container not running → False ContainerNotStarted",
			notRunning(gatedPod(fresh, probeJSON("app", "readiness"))), newResults().readiness("app", results.Success),
			Condition{true, v1.ConditionFalse, ReasonContainerNotStarted, "container app is not running"}},
		{"no container status yet (a new pod) → False ContainerNotStarted",
			noStatus(gatedPod(fresh, probeJSON("app", "readiness"))), newResults(),
			Condition{true, v1.ConditionFalse, ReasonContainerNotStarted, "container app is not running"}},
		{"the kubelet reports the container not started → False ContainerNotStarted",
			notStartedByKubelet(gatedPod(fresh, probeJSON("app", "readiness"))), newResults().readiness("app", results.Failure),
			Condition{true, v1.ConditionFalse, ReasonContainerNotStarted, "container app has not started"}},
		{"a stopped container fails the pod even when another is unknown",
			notRunning(gatedPod(fresh, probeJSON("app", "readiness"), probeJSON("side", "readiness"))), newResults(),
			Condition{true, v1.ConditionFalse, ReasonContainerNotStarted, "container app is not running"}},

		// Not known: keep the pod's condition (M8, M9 analogue).
		{"no readiness result yet → not known",
			gatedPod(fresh, probeJSON("app", "readiness")), newResults(), Condition{}},
		{"survivor of a restart without results → not known (W6c)",
			gatedPod(survivor, probeJSON("app", "readiness")), newResults(), Condition{}},
		{"one Success, one without result → not known",
			gatedPod(fresh, probeJSON("app", "readiness"), probeJSON("side", "readiness")),
			newResults().readiness("app", results.Success), Condition{}},
		{"no startup result on a fresh container, readiness Success → not known",
			gatedPod(fresh, probeJSON("app", "startup"), probeJSON("app", "readiness")),
			newResults().readiness("app", results.Success), Condition{}},
		{"startup-only fresh container without result → not known",
			gatedPod(fresh, probeJSON("app", "startup")), newResults(), Condition{}},
		{"survivor reported started, no startup result, readiness Success → True (M8)",
			gatedPod(survivor, probeJSON("app", "startup"), probeJSON("app", "readiness")),
			newResults().readiness("app", results.Success),
			Condition{true, v1.ConditionTrue, ReasonProbeSucceeded, MessageProbesSucceeded}},
		{"survivor started 3 s before probed (inside the kubelet's 10 s window: cluster mode's is 0), no startup result → True (M8)",
			gatedPod(proberStart.Add(-3*time.Second), probeJSON("app", "startup"), probeJSON("app", "readiness")),
			newResults().readiness("app", results.Success),
			Condition{true, v1.ConditionTrue, ReasonProbeSucceeded, MessageProbesSucceeded}},
		{"survivor reported not started, no startup result → not known",
			notStartedByKubelet(gatedPod(survivor, probeJSON("app", "startup"), probeJSON("app", "readiness"))),
			newResults().readiness("app", results.Success), Condition{}},
		{"a result of an earlier container instance does not count",
			func() *v1.Pod {
				pod := gatedPod(fresh, probeJSON("app", "readiness"))
				pod.Status.ContainerStatuses[0].ContainerID = "containerd://app-2"
				return pod
			}(), newResults().readiness("app", results.Success), Condition{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := decide(t, tc.pod, tc.results); got != tc.want {
				t.Errorf("Decide:\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// A restartable init container (sidecar) is judged by its init container
// status, in pod order before the containers.
func TestDecideSidecar(t *testing.T) {
	pod := gatedPod(proberStart.Add(time.Minute), probeJSON("app", "readiness"), probeJSON("proxy", "readiness"))
	always := v1.ContainerRestartPolicyAlways
	pod.Spec.InitContainers = []v1.Container{{Name: "proxy", Image: "proxy", RestartPolicy: &always}}
	started := true
	pod.Status.InitContainerStatuses = []v1.ContainerStatus{{
		Name: "proxy", ContainerID: "containerd://proxy-1", Started: &started,
		State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(proberStart.Add(time.Minute))}},
	}}
	r := newResults().readiness("app", results.Failure).readiness("proxy", results.Failure)
	want := Condition{true, v1.ConditionFalse, ReasonProbeFailed, "readiness probe of container proxy failed; readiness probe of container app failed"}
	if got := decide(t, pod, r); got != want {
		t.Errorf("Decide:\n got %+v\nwant %+v", got, want)
	}
	r.readiness("app", results.Success).readiness("proxy", results.Success)
	if got := decide(t, pod, r); got.Status != v1.ConditionTrue {
		t.Errorf("Decide with both Success: %+v, want True", got)
	}
}

// BR-22: no message carries a probe's parameters, target or output; only
// container names and probe types.
func TestDecideMessagesHoldNoSecrets(t *testing.T) {
	fresh := proberStart.Add(time.Minute)
	pods := []*v1.Pod{
		gatedPod(fresh, probeJSON("app", "readiness"), probeJSON("side", "startup")),
		gatedPod(fresh, probeJSON("app", "startup"), probeJSON("side", "readiness")),
	}
	for _, pod := range pods {
		r := newResults().readiness("app", results.Failure).readiness("side", results.Failure).
			startup("app", results.Failure).startup("side", results.Unknown)
		v := decide(t, pod, r)
		if v.Status != v1.ConditionFalse || v.Message == "" {
			t.Fatalf("Decide: %+v, want False with a message", v)
		}
		for _, secret := range []string{"s3cr3t", "hunter2", "password", "token", "/ready", "8080", "http-match"} {
			if strings.Contains(v.Message, secret) {
				t.Errorf("message %q shows %q", v.Message, secret)
			}
		}
	}
}

// An element of the annotation with errors is not a probe (the default
// Options.Probes): it does not hold the verdict back.
func TestDecideIgnoresBadElements(t *testing.T) {
	pod := gatedPod(proberStart.Add(time.Minute), probeJSON("app", "readiness"),
		`{"container":"side","type":"readiness","plugin":{"name":""}}`)
	probes, _ := viewOf(pod)
	if len(probes.Refused) == 0 {
		t.Fatal("the second element should be refused")
	}
	r := newResults().readiness("app", results.Success)
	got := Decide(pod, probes, r.res, proberStart)
	want := Condition{true, v1.ConditionTrue, ReasonProbeSucceeded, MessageProbesSucceeded}
	if got != want {
		t.Errorf("Decide:\n got %+v\nwant %+v", got, want)
	}
}
