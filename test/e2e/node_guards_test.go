package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/probed/probed/internal/kubetest"
	"github.com/probed/probed/internal/nodetest"
	"github.com/probed/probed/internal/probetarget"
)

// TestNodeRestartBudgetThroughTheRuntime (issue 30 item 2, the storm guard
// through the real runtime on the real node): 3 pods of one workload with
// probed.io/restart-budget "1" per 20 s, --liveness-action=restart. Their
// liveness probes fail together (each running instance answers 500; a new
// instance passes): probed stops one container through the CRI and the
// kubelet starts it again; the other two wait, each with a
// LivenessProbeFailed Event saying it is held back by the restart budget,
// and are restarted one per window. The workload's controller is a
// ConfigMap (any owner marked controller makes a workload; a ReplicaSet's
// controller would delete pods it did not create).
func TestNodeRestartBudgetThroughTheRuntime(t *testing.T) {
	n := nodetest.Load(t)
	admin := kubetest.Client(t)
	ns := kubetest.Namespace(t)
	kubetest.LabelNamespace(t, ns, map[string]string{"probed.io/liveness-actions": "enabled"})
	owner, err := admin.CoreV1().ConfigMaps(ns).Create(kubetest.Context(t), &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "web"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a := startClusterAgent(t, n.Name, kubetest.AgentConfigWithRestart(t),
		"--container-runtime-endpoint", n.CRIEndpoint, "--liveness-action", "restart")
	const window = 20 * time.Second
	ports := nodetest.FreePorts(t, 3)
	yes := true
	var targets []nodetest.Target
	for i, port := range ports {
		tg := nodetest.Target{HTTP: port}
		targets = append(targets, tg)
		pod := n.TargetPod(ns, fmt.Sprintf("web-%d", i), tg)
		pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID, Controller: &yes}}
		pod.Annotations = map[string]string{"probed.io/restart-budget": "1", "probed.io/restart-budget-window": window.String(),
			"probed.io/probes": "[" + httpProbe("app", "liveness", "live", port, 1) + "]"}
		kubetest.CreatePod(t, admin, pod)
	}
	for i := range ports {
		waitPod(t, a, admin, ns, fmt.Sprintf("web-%d", i), 60*time.Second, "container running", func(p *v1.Pod) (bool, string) {
			cs := appStatus(p)
			return cs != nil && cs.State.Running != nil && cs.Ready, fmt.Sprintf("%+v", cs)
		})
	}
	time.Sleep(2 * time.Second) // a few passing runs first
	start := time.Now()
	for _, tg := range targets {
		if err := probetarget.SetStatus(tg.Base(n), "live", 500); err != nil {
			t.Fatal(err)
		}
	}
	restarts := func() (total int, desc string) {
		for i := range ports {
			pod, err := admin.CoreV1().Pods(ns).Get(kubetest.Context(t), fmt.Sprintf("web-%d", i), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if cs := appStatus(pod); cs != nil {
				total += int(cs.RestartCount)
				desc += fmt.Sprintf(" web-%d:%d", i, cs.RestartCount)
			}
		}
		return total, desc
	}
	// At no time more restarts than the windows begun allow; all three
	// within three windows.
	deadline := start.Add(3*window + 30*time.Second)
	var history []string
	for {
		total, desc := restarts()
		elapsed := time.Since(start)
		if len(history) == 0 || !strings.HasSuffix(history[len(history)-1], ":"+desc) {
			history = append(history, fmt.Sprintf("%s:%s", elapsed.Round(time.Second), desc))
		}
		if allowed := 1 + int(elapsed/window); total > allowed {
			t.Fatalf("%d restarts %s after the failure, the budget allows %d: %v", total, elapsed.Round(time.Second), allowed, history)
		}
		if total == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not every pod restarted within 3 windows: %v", history)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if time.Since(start) < 2*window-5*time.Second {
		t.Errorf("three restarts after %s: the budget let more than one per window: %v", time.Since(start), history)
	}
	held := 0
	for i := range ports {
		for _, e := range podEvents(t, admin, ns, fmt.Sprintf("web-%d", i)) {
			if e.Reason == "LivenessProbeFailed" && strings.Contains(e.Note, "held back by the restart budget") &&
				strings.Contains(e.Note, "ConfigMap "+ns+"/web's 3 pods on this node") {
				held++
			}
		}
	}
	if held < 2 {
		t.Errorf("%d held-back Events, want one for each of the two pods that waited", held)
	}
	t.Logf("restart counts over time: %v", history)
}
