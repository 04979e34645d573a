package agent_test

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/probed/probed/agent"
	"github.com/probed/probed/internal/kubetest"
	"github.com/probed/probed/internal/testlog"
	"github.com/probed/probed/manager/customprobe"
)

// gateType is the readiness gate the cluster tests use (the default).
const gateType = v1.PodConditionType(agent.DefaultReadinessGate)

// startClusterAgent runs an agent in cluster mode for node, as cfg's
// identity, until the test ends (or stop is called).
func startClusterAgent(t *testing.T, cfg *rest.Config, node string, mutate func(*agent.ClusterOptions)) *running {
	t.Helper()
	logs := &testlog.Buffer{}
	c := &agent.ClusterOptions{Config: cfg, NodeName: node, StatusQPS: 50, StatusBurst: 100}
	if mutate != nil {
		mutate(c)
	}
	a, err := agent.New(agent.Options{
		Cluster:       c,
		Listen:        "127.0.0.1:0",
		SyncFrequency: time.Second,
		PoolSize:      32,
		Logger:        slog.New(slog.NewJSONHandler(logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	return newRunning(t, a, "", logs)
}

// switchableTarget is a loopback TCP port that can be closed and opened again.
type switchableTarget struct {
	t    *testing.T
	port int
	ln   net.Listener
}

func newSwitchableTarget(t *testing.T) *switchableTarget {
	tg := &switchableTarget{t: t}
	tg.open()
	tg.port = tg.ln.Addr().(*net.TCPAddr).Port
	t.Cleanup(tg.close)
	return tg
}

func (tg *switchableTarget) open() {
	addr := "127.0.0.1:0"
	if tg.port != 0 {
		addr = fmt.Sprintf("127.0.0.1:%d", tg.port)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		tg.t.Fatal(err)
	}
	tg.ln = ln
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
}

func (tg *switchableTarget) close() {
	if tg.ln != nil {
		tg.ln.Close()
		tg.ln = nil
	}
}

// gatedPod creates a pod on node with the readiness gate and an annotation
// readiness probe (tcpSocket, period 1 s) against port, and writes its
// status as the kubelet would.
func gatedPod(t *testing.T, c kubernetes.Interface, ns, name, node string, port int, gated bool) *v1.Pod {
	t.Helper()
	pod := kubetest.NewPod(ns, name, node, "app")
	pod.Annotations = map[string]string{customprobe.Annotation: fmt.Sprintf(
		`[{"container":"app","type":"readiness","periodSeconds":1,"failureThreshold":1,"tcpSocket":{"port":%d}}]`, port)}
	if gated {
		pod.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: gateType}}
	}
	kubetest.CreatePod(t, c, pod)
	return kubetest.SetPodRunning(t, c, ns, name, true)
}

// gateCondition returns the pod's gate condition, if any.
func gateCondition(t *testing.T, c kubernetes.Interface, ns, name string) (v1.PodCondition, bool) {
	t.Helper()
	pod, err := c.CoreV1().Pods(ns).Get(kubetest.Context(t), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cond := range pod.Status.Conditions {
		if cond.Type == gateType {
			return cond, true
		}
	}
	return v1.PodCondition{}, false
}

// waitGate polls until the pod's gate condition has status want.
func waitGate(t *testing.T, c kubernetes.Interface, ns, name string, want v1.ConditionStatus) v1.PodCondition {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		cond, ok := gateCondition(t, c, ns, name)
		if ok && cond.Status == want {
			return cond
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s/%s: gate condition %+v (present %v), want status %s", ns, name, cond, ok, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Cluster mode (the gate, Events, the liveness action, RBAC) through the real agent and a real API server, as
// the agent's RBAC identity (deploy/kubernetes ClusterRole): the gate
// follows the annotation probe True → False → True; a pod of another node
// with the same gate is never seen (never patched); a pod without the gate
// is probed (its history is served) but not patched; the failing probe's
// events reach the API server as events.k8s.io Events of probed.io/agent.
func TestClusterGateFollowsProbe(t *testing.T) {
	admin := kubetest.Client(t)
	cfg := kubetest.AgentConfig(t)
	ns, node, other := kubetest.Namespace(t), kubetest.NodeName(t), kubetest.NodeName(t)
	tg := newSwitchableTarget(t)
	gatedPod(t, admin, ns, "web", node, tg.port, true)
	gatedPod(t, admin, ns, "elsewhere", other, tg.port, true)
	gatedPod(t, admin, ns, "ungated", node, tg.port, false)
	r := startClusterAgent(t, cfg, node, nil)

	cond := waitGate(t, admin, ns, "web", v1.ConditionTrue)
	if cond.Reason != "ProbeSucceeded" {
		t.Errorf("reason %q, want ProbeSucceeded", cond.Reason)
	}
	tg.close()
	cond = waitGate(t, admin, ns, "web", v1.ConditionFalse)
	if cond.Reason != "ProbeFailed" {
		t.Errorf("reason %q, want ProbeFailed", cond.Reason)
	}
	tg.open()
	waitGate(t, admin, ns, "web", v1.ConditionTrue)

	// The status page in cluster mode: the API server
	// connection and the pending condition writes in the header; the
	// annotation's readiness probe of web, and not the other node's pod.
	page := r.getPage("/")
	for _, want := range []string{"pods of " + node + " synced; condition writes succeeding", "<dt>condition writes pending</dt>",
		`data-pod="` + ns + `/web"`, `data-probe="app/readiness"`, fmt.Sprintf("tcp :%d", tg.port)} {
		if !strings.Contains(page, want) {
			t.Errorf("status page misses %q", want)
		}
	}
	if strings.Contains(page, ns+"/elsewhere") {
		t.Error("status page lists the other node's pod")
	}

	if _, ok := gateCondition(t, admin, ns, "elsewhere"); ok {
		t.Error("the pod of another node got a gate condition")
	}
	if _, ok := gateCondition(t, admin, ns, "ungated"); ok {
		t.Error("a pod without the readiness gate was patched")
	}
	var hist agent.PodHistory
	r.get("/pods/"+ns+"/ungated/probes", &hist)
	if len(hist.Probes) != 1 || len(hist.Probes[0].Results) == 0 {
		t.Errorf("the ungated pod was not probed: %+v", hist)
	}

	evs, err := admin.EventsV1().Events(ns).List(kubetest.Context(t), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	unhealthy := 0
	for _, ev := range evs.Items {
		if ev.Regarding.Name == "web" && ev.Reason == "Unhealthy" && ev.ReportingController == "probed.io/agent" &&
			ev.ReportingInstance == node && ev.Regarding.FieldPath == "spec.containers{app}" {
			unhealthy++
		}
		if ev.Regarding.Name == "elsewhere" {
			t.Errorf("event about the other node's pod: %+v", ev)
		}
	}
	if unhealthy == 0 {
		t.Errorf("no Unhealthy event of probed.io/agent on web's container among %d events", len(evs.Items))
	}
}

// Stopping probed (SIGTERM: its context) writes no False
// anywhere, and a new probed keeps the existing condition until its own
// first verdict: a rollout never flips a healthy pod to not-ready. The
// container started just now (SetPodRunning): inside the kubelet's 10 s
// restart window, which cluster mode does not apply (W6c with
// manager.Options.AnyRunningSurvives; with it, the second agent's initial
// Failure flipped the gate, as TestNodeProbedRestartNeverFlipsReady saw on
// a real kubelet).
func TestClusterRestartCausesNoFlip(t *testing.T) {
	admin := kubetest.Client(t)
	cfg := kubetest.AgentConfig(t)
	ns, node := kubetest.Namespace(t), kubetest.NodeName(t)
	tg := newSwitchableTarget(t)
	gatedPod(t, admin, ns, "web", node, tg.port, true)
	first := startClusterAgent(t, cfg, node, nil)
	before := waitGate(t, admin, ns, "web", v1.ConditionTrue)

	// Watch the pod from now on: no status False may ever be written.
	w, err := admin.CoreV1().Pods(ns).Watch(kubetest.Context(t), metav1.ListOptions{FieldSelector: "metadata.name=web"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	first.stop()
	second := startClusterAgent(t, cfg, node, nil)
	deadline := time.After(5 * time.Second)
	for done := false; !done; {
		select {
		case ev := <-w.ResultChan():
			pod, ok := ev.Object.(*v1.Pod)
			if !ok {
				continue
			}
			for _, c := range pod.Status.Conditions {
				if c.Type == gateType && c.Status != v1.ConditionTrue {
					t.Fatalf("the gate flipped across the restart: %+v", c)
				}
			}
		case <-deadline:
			done = true
		}
	}
	after := waitGate(t, admin, ns, "web", v1.ConditionTrue)
	if !after.LastTransitionTime.Equal(&before.LastTransitionTime) {
		t.Errorf("lastTransitionTime moved across the restart: %v → %v", before.LastTransitionTime, after.LastTransitionTime)
	}
	second.stop()
}

// Two agents for two nodes against one API server never read
// or write each other's pods.
func TestClusterTwoNodes(t *testing.T) {
	admin := kubetest.Client(t)
	cfg := kubetest.AgentConfig(t)
	ns, nodeA, nodeB := kubetest.Namespace(t), kubetest.NodeName(t), kubetest.NodeName(t)
	up, down := newSwitchableTarget(t), newSwitchableTarget(t)
	down.close()
	gatedPod(t, admin, ns, "a", nodeA, up.port, true)
	gatedPod(t, admin, ns, "b", nodeB, down.port, true)
	ra := startClusterAgent(t, cfg, nodeA, nil)
	rb := startClusterAgent(t, cfg, nodeB, nil)
	waitGate(t, admin, ns, "a", v1.ConditionTrue)
	waitGate(t, admin, ns, "b", v1.ConditionFalse)
	for _, tc := range []struct {
		r    *running
		mine string
	}{{ra, "a"}, {rb, "b"}} {
		var list v1.PodList
		tc.r.get("/pods", &list)
		if len(list.Items) != 1 || list.Items[0].Name != tc.mine {
			names := []string{}
			for _, p := range list.Items {
				names = append(names, p.Name)
			}
			t.Errorf("agent of pod %s serves pods %v", tc.mine, names)
		}
	}
}

// /healthz says unhealthy while the informer has never
// synced (here: an API server that is not there).
func TestClusterHealthzBeforeSync(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	r := startClusterAgent(t, &rest.Config{Host: "https://" + addr}, "node-x", nil)
	resp, err := r.client.Get(r.base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("/healthz = %d with no API server, want 503", resp.StatusCode)
	}
	if page := r.getPage("/"); !strings.Contains(page, "pods of node-x not synced yet") {
		t.Errorf("the status page does not say the node's pods have not synced:\n%s", page)
	}
}

// In cluster mode an exec probe of the annotation and a
// misspelled field are rejected with an Event on that pod
// (InvalidProbeAnnotation, naming the fields) and a log line naming pod,
// container and field; the annotation's valid element still runs, and the
// node's other pods keep being probed and gated.
func TestClusterBadAnnotationIsAnEvent(t *testing.T) {
	admin := kubetest.Client(t)
	cfg := kubetest.AgentConfig(t)
	ns, node := kubetest.Namespace(t), kubetest.NodeName(t)
	tg := newSwitchableTarget(t)
	bad := kubetest.NewPod(ns, "bad", node, "app")
	bad.Annotations = map[string]string{customprobe.Annotation: fmt.Sprintf(`[
		{"container":"app","type":"readiness","exec":{"command":["true"]}},
		{"container":"app","type":"startup","tcpSocket":{"prot":80}},
		{"container":"app","type":"liveness","periodSeconds":1,"tcpSocket":{"port":%d}}]`, tg.port)}
	kubetest.CreatePod(t, admin, bad)
	kubetest.SetPodRunning(t, admin, ns, "bad", true)
	gatedPod(t, admin, ns, "good", node, tg.port, true)
	r := startClusterAgent(t, cfg, node, nil)

	waitGate(t, admin, ns, "good", v1.ConditionTrue)
	deadline := time.Now().Add(20 * time.Second)
	for {
		evs, err := admin.EventsV1().Events(ns).List(kubetest.Context(t), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, ev := range evs.Items {
			if ev.Regarding.Name == "bad" && ev.Reason == agent.ReasonInvalidProbeAnnotation {
				found = true
				for _, want := range []string{"[0].exec", "container runtime", `[1].tcpSocket`, `unknown field "prot"`} {
					if !strings.Contains(ev.Note, want) {
						t.Errorf("event note %q does not say %q", ev.Note, want)
					}
				}
			}
		}
		if found {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s event on the pod among %d events", agent.ReasonInvalidProbeAnnotation, len(evs.Items))
		}
		time.Sleep(100 * time.Millisecond)
	}
	logs := r.logs.String()
	if !strings.Contains(logs, `"msg":"invalid probe annotation"`) || !strings.Contains(logs, `"container":"app"`) ||
		!strings.Contains(logs, `"field":"metadata.annotations[probed.io/probes][0].exec"`) {
		t.Errorf("no log line naming pod, container and field:\n%s", logs)
	}
	var hist agent.PodHistory
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		r.get("/pods/"+ns+"/bad/probes", &hist)
		if len(hist.Probes) == 1 && hist.Probes[0].Type == "liveness" && len(hist.Probes[0].Results) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the annotation's valid liveness probe did not run alone: %+v", hist)
		}
	}
}
