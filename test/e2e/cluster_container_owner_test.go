package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/probed/probed/internal/critest"
	"github.com/probed/probed/internal/kubetest"
)

// A pod's status names its containers' IDs, but whoever writes a status
// could name another pod's container, and the runtime completes a unique
// prefix of an ID. Before Exec, ExecSync and StopContainer the agent checks
// the runtime's labels of the container (io.kubernetes.pod.uid,
// io.kubernetes.container.name) against the pod and container, and
// requires the full ID; otherwise nothing runs or stops, and an Event says
// why. Before that check, a status containerID naming another pod's
// container ran the probe's command in it, and a 12-character prefix
// resolved too.

// An exec probe whose status names another namespace's pod's container, or
// a 12-character prefix of its own container's ID, runs nowhere: each run
// is errored with an Event saying why, in both exec modes.
func TestClusterCRIExecOnlyInThePodsContainer(t *testing.T) {
	for _, mode := range []string{"execsync", "resident"} {
		t.Run(mode, func(t *testing.T) {
			admin := kubetest.Client(t)
			node := kubetest.NodeName(t)
			a := criAgent(t, node, "--exec-mode", mode)
			victim := startCRIPod(t, admin, kubetest.Namespace(t), "victim", node, "[]", "exec sleep 3600", nil, nil)
			ns := kubetest.Namespace(t)
			probes := `[{"container":"app","type":"readiness","periodSeconds":1,"exec":{"command":["sh","-c","echo ` + ns + ` >> /tmp/ran"]}}]`
			// One pod per case: Events of one reason fold into one series.
			other := startCRIPod(t, admin, ns, "other", node, probes, "exec sleep 3600", nil, nil)
			prefix := startCRIPod(t, admin, ns, "prefix", node, probes, "exec sleep 3600", nil, nil)
			for _, c := range []struct {
				p       *criPod
				id, why string
			}{
				{other, "containerd://" + victim.id, "is not container app of pod " + ns + "/other"},
				{prefix, "containerd://" + prefix.id[:12], "is not a container's full ID"},
			} {
				waitCondition(t, a, admin, ns, c.p.name, gate, v1.ConditionTrue, "ProbeSucceeded", 30*time.Second)
				c.p.setContainerID(t, admin, c.id)
				waitEvent(t, a, admin, ns, c.p.name, "Unhealthy", "Readiness probe errored", c.why)
			}
			if got := critest.Exec(t, victim.rs, victim.id, "sh", "-c", "cat /tmp/ran 2>/dev/null; true"); got != "" {
				t.Fatalf("the probe's command ran in another pod's container: %q", got)
			}
			// Its own container by its full ID: runs again.
			ran := strings.Count(prefix.exec(t, "cat /tmp/ran"), "\n")
			prefix.setContainerID(t, admin, "containerd://"+prefix.id)
			eventually(t, a.proc, 30*time.Second, "runs in its own container again", func() (bool, string) {
				n := strings.Count(prefix.exec(t, "cat /tmp/ran"), "\n")
				return n > ran+1, fmt.Sprintf("%d runs, %d before", n, ran)
			})
		})
	}
}

// A liveness Failure whose status names another pod's container stops
// nothing: the Warning Event says why, no StopContainer is made, and the
// other pod's container runs on.
func TestClusterCRIRestartOnlyThePodsContainer(t *testing.T) {
	admin := kubetest.Client(t)
	node := kubetest.NodeName(t)
	ep := critest.Endpoint(t)
	a := startClusterAgent(t, node, kubetest.AgentConfigWithRestart(t), "--container-runtime-endpoint", ep, "--liveness-action", "restart")
	label := func(ns string) {
		patch := []byte(`{"metadata":{"labels":{"probed.io/liveness-actions":"enabled"}}}`)
		if _, err := admin.CoreV1().Namespaces().Patch(kubetest.Context(t), ns, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	victimNS, ns := kubetest.Namespace(t), kubetest.Namespace(t)
	label(victimNS)
	label(ns)
	victim := startCRIPod(t, admin, victimNS, "victim", node, "[]", "exec sleep 3600", nil, nil)
	// A liveness probe that fails (nothing listens on its port), its status
	// naming the victim's container.
	p := startCRIPod(t, admin, ns, "web", node,
		fmt.Sprintf(`[{"container":"app","type":"liveness","periodSeconds":1,"failureThreshold":1,"tcpSocket":{"port":%d}}]`, freePort(t)),
		"exec sleep 3600", nil, nil)
	p.setContainerID(t, admin, "containerd://"+victim.id)
	waitEvent(t, a, admin, ns, "web", "LivenessProbeFailed", "the container is not restarted",
		"is not container app of pod "+ns+"/web")
	time.Sleep(2 * time.Second)
	for _, c := range []*criPod{victim, p} {
		if state, _ := critest.State(t, c.rs, c.id); state != runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Fatalf("container of %s/%s is %v", c.ns, c.name, state)
		}
	}
	metrics, err := apiGet(a.Base, "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(metrics), `method="StopContainer"`) {
		t.Fatalf("StopContainer calls: %s", grepLines(string(metrics), "StopContainer"))
	}
}
