package e2e

import (
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/probed/probed/internal/kubetest"
)

// TestClusterAgentUnderAdmissionPolicy: the real binary, under
// the agent's identity as the DaemonSet runs it (RBAC, a token bound to a pod
// on its node, the admission policy of deploy/kubernetes installed), writes
// its readiness-gate condition (True, then False when the target fails) and
// its Events about its node's pod, and evicts a pod whose liveness probe
// fails in a namespace labelled probed.io/liveness-actions=enabled. The same
// token is refused the write the issue reproduced on another node's pod.
func TestClusterAgentUnderAdmissionPolicy(t *testing.T) {
	admin := kubetest.Client(t)
	node := kubetest.NodeName(t)
	cfg := kubetest.AgentConfigForNodeWithEviction(t, node)
	ns := kubetest.Namespace(t)
	kubetest.LabelNamespace(t, ns, map[string]string{"probed.io/liveness-actions": "enabled"})

	a := startClusterAgent(t, node, cfg, "--liveness-action=evict")
	checkGateFollowsTarget(t, a, admin, ns)
	waitEvent(t, a, admin, ns, "web", "Unhealthy", "Readiness probe failed")

	// A liveness probe on a closed port: failureThreshold 1, the pod is evicted.
	doomed := kubetest.NewPod(ns, "doomed", node, "app")
	doomed.Annotations = map[string]string{"probed.io/probes": fmt.Sprintf(
		`[{"container":"app","type":"liveness","periodSeconds":1,"failureThreshold":1,"tcpSocket":{"port":%d}}]`, freePort(t))}
	kubetest.CreatePod(t, admin, doomed)
	kubetest.SetPodRunning(t, admin, ns, "doomed", true)
	waitEvent(t, a, admin, ns, "doomed", "Evicted", "Evicted the pod")
	if pod, err := admin.CoreV1().Pods(ns).Get(kubetest.Context(t), "doomed", metav1.GetOptions{}); err == nil && pod.DeletionTimestamp == nil {
		t.Errorf("pod doomed after its Evicted event: no deletionTimestamp")
	}

	// The agent's own token, on another node's pod: the merge patch is refused.
	victim := kubetest.CreatePod(t, admin, kubetest.NewPod(ns, "victim", kubetest.NodeName(t), "app"))
	_, err := kubetest.ClientFor(t, cfg).CoreV1().Pods(ns).Patch(kubetest.Context(t), victim.Name, types.MergePatchType,
		[]byte(`{"status":{"podIP":"10.6.6.6","phase":"Failed"}}`), metav1.PatchOptions{}, "status")
	if !kubetest.DeniedByPolicy(err) || !strings.Contains(err.Error(), "own node") {
		t.Errorf("status patch of another node's pod with the agent's token: %v, want the policy's refusal", err)
	}
	for _, line := range strings.Split(a.stderr.String(), "\n") {
		if strings.Contains(line, "ValidatingAdmissionPolicy") {
			t.Errorf("the agent met the admission policy: %s", line)
		}
	}
}
