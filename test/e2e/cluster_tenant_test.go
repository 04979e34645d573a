package e2e

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/probed/probed/internal/kubetest"
)

// get returns the body of GET base+path, which must answer 200.
func (a *clusterAgent) get(t *testing.T, path string) string {
	t.Helper()
	resp, err := http.Get(a.Base + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s = %d %s", path, resp.StatusCode, body)
	}
	// The status page's line-break hints (<wbr> after a path's separators)
	// are not text: without them a value, or a secret, is matched whole.
	return strings.ReplaceAll(string(body), "<wbr>", "")
}

// TestClusterEvictOnlyInLabelledNamespaces: the real binary
// with --liveness-action=evict, under the agent's identity of deploy/
// (options/clusterrole-eviction.yaml included), evicts a pod whose annotation
// liveness probe fails only in a namespace labelled
// probed.io/liveness-actions=enabled; in another namespace the pod stays and
// the Event says why nothing was done.
func TestClusterEvictOnlyInLabelledNamespaces(t *testing.T) {
	admin := kubetest.Client(t)
	node := kubetest.NodeName(t)
	open, closed := kubetest.Namespace(t), kubetest.Namespace(t)
	kubetest.LabelNamespace(t, open, map[string]string{"probed.io/liveness-actions": "enabled"})
	a := startClusterAgent(t, node, kubetest.AgentConfigWithEviction(t), "--liveness-action=evict")
	annotation := fmt.Sprintf(`[{"container":"app","type":"liveness","periodSeconds":1,"failureThreshold":1,"tcpSocket":{"port":%d}}]`, freePort(t))
	for _, ns := range []string{open, closed} {
		pod := kubetest.NewPod(ns, "web", node, "app")
		pod.Annotations = map[string]string{"probed.io/probes": annotation}
		kubetest.CreatePod(t, admin, pod)
		kubetest.SetPodRunning(t, admin, ns, "web", true)
	}
	waitEvent(t, a, admin, closed, "web", "LivenessProbeFailed",
		"the pod is not evicted: namespace "+closed+" is not selected by --liveness-action-namespaces=probed.io/liveness-actions=enabled")
	eventually(t, a.proc, 30*time.Second, "the pod of the labelled namespace evicted", func() (bool, string) {
		p, err := admin.CoreV1().Pods(open).Get(kubetest.Context(t), "web", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.DeletionTimestamp != nil, "not terminating"
	})
	p, err := admin.CoreV1().Pods(closed).Get(kubetest.Context(t), "web", metav1.GetOptions{})
	if err != nil || p.DeletionTimestamp != nil {
		t.Fatalf("the pod of the namespace not labelled: %v, deletionTimestamp %v", err, p.DeletionTimestamp)
	}
	for _, e := range podEvents(t, admin, closed, "web") {
		if e.Reason == "Evicted" {
			t.Errorf("an Evicted event in the namespace not labelled: %s", e.Note)
		}
	}
	if code := a.stop(syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Fatalf("probed exited %d after SIGTERM; stderr:\n%s", code, tail(a.stderr.String(), 20))
	}
}

// TestClusterAnnotationProbeSecretsRedacted: in cluster mode
// an annotation probe's httpGet query and header values are shown nowhere
// by the real agent: not in /pods, /pods/{namespace}/{name}, the status
// page or the pod's page, which show the probe redacted.
func TestClusterAnnotationProbeSecretsRedacted(t *testing.T) {
	admin := kubetest.Client(t)
	ns, node := kubetest.Namespace(t), kubetest.NodeName(t)
	port := serveHTTP(t, "127.0.0.1:0", http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	a := startClusterAgent(t, node, nil)
	pod := kubetest.NewPod(ns, "web", node, "app")
	pod.Annotations = map[string]string{"probed.io/probes": fmt.Sprintf(`[{"container":"app","type":"readiness","periodSeconds":1,`+
		`"httpGet":{"path":"/ready?token=E2E-TOKEN-1","port":%d,"httpHeaders":[{"name":"X-Api-Key","value":"E2E-HEADER-2"}]}}]`, port)}
	pod.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: "probed.io/ready"}}
	kubetest.CreatePod(t, admin, pod)
	kubetest.SetPodRunning(t, admin, ns, "web", true)
	waitCondition(t, a, admin, ns, "web", "probed.io/ready", v1.ConditionTrue, "ProbeSucceeded", 30*time.Second)
	var all []string
	for _, path := range []string{"/pods", "/pods/" + ns + "/web", "/", "/pod/" + ns + "/web"} {
		all = append(all, a.get(t, path))
	}
	text := strings.Join(all, "\n")
	for _, secret := range []string{"E2E-TOKEN-1", "E2E-HEADER-2"} {
		if strings.Contains(text, secret) {
			t.Errorf("the agent shows %s", secret)
		}
	}
	for _, want := range []string{`/ready?token=REDACTED`, fmt.Sprintf("GET http://127.0.0.1:%d/ready?token=REDACTED", port)} {
		if !strings.Contains(text, want) {
			t.Errorf("the agent does not show %q", want)
		}
	}
}
