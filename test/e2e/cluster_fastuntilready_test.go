package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/probed/probed/agent/events"
	"github.com/probed/probed/internal/kubetest"
)

// Periods by state, body checks and the health-event log with the real binary in cluster mode against the real
// kube-apiserver: a gated pod's annotation readiness probe that runs every
// 200 ms until ready and checks the body's JSON, the events that say where
// its threshold stands (--events=transitions: one per verdict change) as
// events.k8s.io Events, the health-event log through `probed events`, and
// --min-probe-period holding for an unhealthy period too.
func TestClusterFastUntilReadyExpectAndTransitions(t *testing.T) {
	admin := kubetest.Client(t)
	ns, node := kubetest.Namespace(t), kubetest.NodeName(t)
	var mu sync.Mutex
	state, hits := "starting", 0
	port := serveHTTP(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		st := state
		hits++
		mu.Unlock()
		fmt.Fprintf(w, `{"status":%q,"token":"hunter2-in-the-body"}`, st)
	}))
	hitCount := func() int { mu.Lock(); defer mu.Unlock(); return hits }
	a := startClusterAgent(t, node, nil, "--min-probe-period=150ms", "--events=transitions")

	pod := kubetest.NewPod(ns, "starting", node, "app")
	pod.Annotations = map[string]string{"probed.io/probes": fmt.Sprintf(`[{"container":"app","type":"readiness","periodSeconds":30,`+
		`"unhealthyPeriodMilliseconds":200,"failureThreshold":2,"httpGet":{"path":"/health","port":%d,`+
		`"expect":{"status":[200],"jsonPath":{"path":"{.status}","value":"up"}}}}]`, port)}
	pod.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: "probed.io/ready"}}
	kubetest.CreatePod(t, admin, pod)
	kubetest.SetPodRunning(t, admin, ns, "starting", true)

	const fail = `HTTP probe failed: expect.jsonPath {.status} is not "up"`
	waitCondition(t, a, admin, ns, "starting", "probed.io/ready", v1.ConditionFalse, "ProbeFailed", 30*time.Second)
	waitEvent(t, a, admin, ns, "starting", "Unhealthy", "Readiness probe failed (2/2): container marked not ready: "+fail)
	// Not ready: every 200 ms, not every 30 s.
	h0 := hitCount()
	time.Sleep(2 * time.Second)
	if n := hitCount() - h0; n < 5 {
		t.Fatalf("%d runs in 2 s while not ready, want about ten (the 200 ms unhealthy period)", n)
	}
	mu.Lock()
	state = "up"
	mu.Unlock()
	up := time.Now()
	waitCondition(t, a, admin, ns, "starting", "probed.io/ready", v1.ConditionTrue, "ProbeSucceeded", 30*time.Second)
	if d := time.Since(up); d > 10*time.Second {
		t.Fatalf("ready %v after the target came up, want within a few unhealthy periods (and the condition write)", d)
	}
	waitEvent(t, a, admin, ns, "starting", "ProbeSucceeded", "Readiness probe succeeded after ", "failures: container marked ready")
	h1 := hitCount()
	time.Sleep(2 * time.Second)
	if n := hitCount() - h1; n > 1 {
		t.Fatalf("%d runs in 2 s once ready, want the 30 s period's", n)
	}
	// --events=transitions: one Event per verdict change, never the body.
	var reasons []string
	for _, e := range podEvents(t, admin, ns, "starting") {
		reasons = append(reasons, e.Reason)
		if strings.Contains(e.Note, "hunter2") {
			t.Fatalf("an Event shows the body: %q", e.Note)
		}
		if e.Series != nil {
			t.Fatalf("a transition Event repeated (series %+v): %q", e.Series, e.Note)
		}
	}
	if strings.Join(reasons, ",") != "Unhealthy,ProbeSucceeded" && strings.Join(reasons, ",") != "ProbeSucceeded,Unhealthy" {
		t.Fatalf("Events %v, want one Unhealthy and one ProbeSucceeded", reasons)
	}

	// `probed events`: the health-event log, one JSON object per line.
	out, errOut, code := runProbed(t, nil, "events", "--server", a.Base)
	if code != 0 {
		t.Fatalf("probed events exited %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var log []events.Transition
	for _, l := range lines {
		var tr events.Transition
		if err := json.Unmarshal([]byte(l), &tr); err != nil {
			t.Fatalf("probed events printed %q: %v", l, err)
		}
		if tr.Pod == "starting" {
			log = append(log, tr)
		}
	}
	if len(log) != 2 || log[0].From != "UNKNOWN" || log[0].To != "Failure" || log[0].Run.Message != fail ||
		log[1].From != "Failure" || log[1].To != "Success" || log[1].Handler != "http" || log[1].Namespace != ns {
		t.Fatalf("health-event log of the pod:\n%s", out)
	}

	// The node's shortest period holds for a period by state too.
	fast := kubetest.NewPod(ns, "fast", node, "app")
	fast.Annotations = map[string]string{"probed.io/probes": fmt.Sprintf(
		`[{"container":"app","type":"readiness","periodSeconds":10,"unhealthyPeriodMilliseconds":120,"tcpSocket":{"port":%d}}]`, port)}
	fast.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: "probed.io/ready"}}
	kubetest.CreatePod(t, admin, fast)
	kubetest.SetPodRunning(t, admin, ns, "fast", true)
	c := waitCondition(t, a, admin, ns, "fast", "probed.io/ready", v1.ConditionFalse, "InvalidProbeAnnotation", 30*time.Second)
	if !strings.Contains(c.Message, "unhealthyPeriodMilliseconds") || !strings.Contains(c.Message, "--min-probe-period") {
		t.Fatalf("condition message %q, want the field and the flag", c.Message)
	}
	waitEvent(t, a, admin, ns, "fast", "InvalidProbeAnnotation", "unhealthyPeriodMilliseconds", "the unhealthy period is 120ms", "--min-probe-period")

	if code := a.stop(syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Fatalf("probed exited %d after SIGTERM; stderr:\n%s", code, tail(a.stderr.String(), 20))
	}
}

// Threshold events with the kubelet's event mode in cluster mode: the failures
// below the threshold and the one that reached it are separate
// events.k8s.io Events (their reasons differ: the API server folds the
// Events of one reason and action into one series, whatever the note),
// so the verdict's Event is seen with its own note.
func TestClusterThresholdEventsStayApart(t *testing.T) {
	admin := kubetest.Client(t)
	ns, node := kubetest.Namespace(t), kubetest.NodeName(t)
	port := serveHTTP(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	a := startClusterAgent(t, node, nil)
	pod := kubetest.NewPod(ns, "down", node, "app")
	pod.Annotations = map[string]string{"probed.io/probes": fmt.Sprintf(
		`[{"container":"app","type":"readiness","periodSeconds":1,"failureThreshold":3,"httpGet":{"path":"/","port":%d}}]`, port)}
	kubetest.CreatePod(t, admin, pod)
	kubetest.SetPodRunning(t, admin, ns, "down", true)
	const out = "HTTP probe failed with statuscode: 503"
	below := waitEvent(t, a, admin, ns, "down", "ProbeFailureBelowThreshold", "Readiness probe failed (1/3, threshold not reached): "+out)
	reached := waitEvent(t, a, admin, ns, "down", "Unhealthy", "Readiness probe failed (3/3): container marked not ready: "+out)
	if below.Action != "ReadinessProbe" || reached.Action != "ReadinessProbe" {
		t.Fatalf("actions %q and %q, want ReadinessProbe", below.Action, reached.Action)
	}
}
