package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/probed/probed/internal/kubetest"
)

// clusterAgent is the probed binary running in cluster mode for one node of
// the real test kube-apiserver (internal/kubetest), under the agent's real
// identity of deploy/kubernetes unless the test gives another: its RBAC, a
// token bound to a pod on the node and the admission policy.
type clusterAgent struct {
	*proc
	Base   string // the agent's API, http://127.0.0.1:PORT
	Node   string // --node-name
	Config *rest.Config
}

// startClusterAgent starts `probed run` in cluster mode for node with the
// given identity (nil: kubetest.AgentConfigForNode, the RBAC and the admission
// policy of deploy/kubernetes with a token bound to a pod on node, as the
// DaemonSet's pod has it: every cluster test proves the agent needs no more),
// JSON logs and a free API port, plus args, and waits until /healthz answers
// ok (the informer has synced). It skips without PROBED_TEST_KUBECONFIG.
func startClusterAgent(t *testing.T, node string, cfg *rest.Config, args ...string) *clusterAgent {
	t.Helper()
	return startClusterAgentWith(t, probedBin, nil, node, cfg, args...)
}

// startClusterAgentWith is startClusterAgent with another build of probed
// (checkBin: without the race detector, for figures of the shipped binary)
// and env added to the test's environment.
func startClusterAgentWith(t *testing.T, bin string, env []string, node string, cfg *rest.Config, args ...string) *clusterAgent {
	t.Helper()
	if cfg == nil {
		cfg = kubetest.AgentConfigForNode(t, node)
	}
	listen := "127.0.0.1:" + strconv.Itoa(freePort(t))
	all := append([]string{"run", "--kubeconfig", kubetest.WriteKubeconfig(t, cfg), "--node-name", node,
		"--listen", listen, "--log-format", "json"}, args...)
	p := startBinary(t, bin, env, all...)
	a := &clusterAgent{proc: p, Base: "http://" + listen, Node: node, Config: cfg}
	// The kubelet's statuses always have what a probe needs: the manager's
	// "probe not run" line (manager/lack.go) in the agent is a bug.
	t.Cleanup(func() {
		for _, l := range p.logs() {
			if strings.HasPrefix(l.str("msg"), "probe not run: ") {
				t.Errorf("the agent could not run a probe for what its status lacks: %v", l)
			}
		}
	})
	waitAPI(t, p, a.Base, false)
	return a
}

// gateCondition returns the pod's condition of type ct, or nil.
func gateCondition(pod *v1.Pod, ct v1.PodConditionType) *v1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == ct {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

// waitCondition polls the API server until the pod's condition ct has the
// status want (and, when reason is not empty, that reason), failing the test
// after timeout or as soon as the agent exits.
func waitCondition(t *testing.T, a *clusterAgent, c kubernetes.Interface, ns, name string, ct v1.PodConditionType,
	want v1.ConditionStatus, reason string, timeout time.Duration) *v1.PodCondition {
	t.Helper()
	var got *v1.PodCondition
	eventually(t, a.proc, timeout, fmt.Sprintf("pod %s/%s condition %s=%s %s", ns, name, ct, want, reason), func() (bool, string) {
		pod, err := c.CoreV1().Pods(ns).Get(kubetest.Context(t), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		got = gateCondition(pod, ct)
		if got == nil {
			return false, "no condition"
		}
		return got.Status == want && (reason == "" || got.Reason == reason), fmt.Sprintf("%s %s: %s", got.Status, got.Reason, got.Message)
	})
	return got
}

// podEvents lists the events.k8s.io/v1 Events of ns about the pod name.
func podEvents(t *testing.T, c kubernetes.Interface, ns, name string) []eventsv1.Event {
	t.Helper()
	list, err := c.EventsV1().Events(ns).List(kubetest.Context(t), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list events of %s: %v", ns, err)
	}
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Kind == "Pod" && e.Regarding.Name == name {
			out = append(out, e)
		}
	}
	return out
}

// waitEvent waits until an Event about pod ns/name has reason and a note
// containing every one of parts; it returns that Event.
func waitEvent(t *testing.T, a *clusterAgent, c kubernetes.Interface, ns, name, reason string, parts ...string) eventsv1.Event {
	t.Helper()
	var found eventsv1.Event
	eventually(t, a.proc, 30*time.Second, fmt.Sprintf("event %s on %s/%s with %q", reason, ns, name, parts), func() (bool, string) {
		evs := podEvents(t, c, ns, name)
		var seen []string
		for _, e := range evs {
			seen = append(seen, e.Reason+": "+e.Note)
			if e.Reason != reason {
				continue
			}
			ok := true
			for _, p := range parts {
				ok = ok && strings.Contains(e.Note, p)
			}
			if ok {
				found = e
				return true, ""
			}
		}
		b, _ := json.Marshal(seen)
		return false, string(b)
	})
	return found
}

// serveHTTP serves h on addr (host:port; port 0 picks one) for the
// duration of the test and returns the port.
func serveHTTP(t *testing.T, addr string, h http.Handler) int {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l.Addr().(*net.TCPAddr).Port
}

// TestClusterAgentGatesAPod is the smoke test of the cluster-mode harness:
// the real binary, under the agent's real identity, turns a gated pod's
// condition True from its annotation readiness probe, and False when the
// target starts failing (the verdicts reach the API server).
func TestClusterAgentGatesAPod(t *testing.T) {
	admin := kubetest.Client(t)
	ns, node := kubetest.Namespace(t), kubetest.NodeName(t)
	a := startClusterAgent(t, node, nil)
	checkGateFollowsTarget(t, a, admin, ns)
	if code := a.stop(syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Fatalf("probed exited %d after SIGTERM; stderr:\n%s", code, tail(a.stderr.String(), 20))
	}
}

// checkGateFollowsTarget creates the gated pod web in ns on a's node, running
// and ready, with an annotation readiness probe (every second) of an HTTP
// server of the test, and waits for a to write the probed.io/ready condition
// True, then False once the server answers 503.
func checkGateFollowsTarget(t *testing.T, a *clusterAgent, admin kubernetes.Interface, ns string) {
	t.Helper()
	healthy := make(chan bool, 1)
	healthy <- true
	port := serveHTTP(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		ok := <-healthy
		healthy <- ok
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	pod := kubetest.NewPod(ns, "web", a.Node, "app")
	pod.Annotations = map[string]string{"probed.io/probes": fmt.Sprintf(
		`[{"container":"app","type":"readiness","periodSeconds":1,"httpGet":{"path":"/","port":%d}}]`, port)}
	pod.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: "probed.io/ready"}}
	kubetest.CreatePod(t, admin, pod)
	kubetest.SetPodRunning(t, admin, ns, "web", true)
	waitCondition(t, a, admin, ns, "web", "probed.io/ready", v1.ConditionTrue, "ProbeSucceeded", 30*time.Second)

	<-healthy
	healthy <- false
	waitCondition(t, a, admin, ns, "web", "probed.io/ready", v1.ConditionFalse, "ProbeFailed", 30*time.Second)
}
