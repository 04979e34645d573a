package deploy

import (
	"fmt"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/probed/probed/internal/kubetest"
)

// policyGate is the readiness-gate condition of deploy/kubernetes (the
// DaemonSet's --readiness-gate and the policy's variables.gate).
const policyGate = "probed.io/ready"

// policyWorld is the agent of node under the admission policy of
// deploy/kubernetes/04-admissionpolicy.yaml (and its RBAC with eviction), with a
// gated running pod "mine" on node and "victim" on another node, both in ns
// (not labelled for liveness actions).
type policyWorld struct {
	admin, agent kubernetes.Interface
	ns, node     string
	mine, victim *v1.Pod
}

func newPolicyWorld(t *testing.T) *policyWorld {
	t.Helper()
	w := &policyWorld{admin: kubetest.Client(t), node: kubetest.NodeName(t)}
	w.agent = kubetest.ClientFor(t, kubetest.AgentConfigForNodeWithEviction(t, w.node))
	w.ns = kubetest.Namespace(t)
	w.mine = w.gatedPod(t, w.ns, "mine", w.node)
	w.victim = w.gatedPod(t, w.ns, "victim", kubetest.NodeName(t))
	return w
}

// gatedPod creates a pod with the readiness gate on node, running and ready
// as the kubelet writes it (an admin write: the policy binds the agent only).
func (w *policyWorld) gatedPod(t *testing.T, ns, name, node string) *v1.Pod {
	t.Helper()
	pod := kubetest.NewPod(ns, name, node, "app")
	pod.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: policyGate}}
	kubetest.CreatePod(t, w.admin, pod)
	return kubetest.SetPodRunning(t, w.admin, ns, name, true)
}

// patchStatus sends a patch of the status subresource of ns/name as agent.
func patchStatus(t *testing.T, agent kubernetes.Interface, pt types.PatchType, ns, name, body string) error {
	_, err := agent.CoreV1().Pods(ns).Patch(kubetest.Context(t), name, pt, []byte(body), metav1.PatchOptions{}, "status")
	return err
}

// gatePatch is the readiness-gate writer's patch (agent/kube/gate): the one
// condition and the pod's UID as a precondition.
func gatePatch(uid types.UID, status v1.ConditionStatus, reason string) string {
	return fmt.Sprintf(`{"metadata":{"uid":%q},"status":{"conditions":[{"type":%q,"status":%q,"reason":%q,"message":"","lastTransitionTime":%q}]}}`,
		uid, policyGate, status, reason, time.Now().UTC().Format(time.RFC3339))
}

// agentEvent is an Event as agent/kube/kevents writes it about pod, from node.
func agentEvent(pod *v1.Pod, node string) *eventsv1.Event {
	return &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", pod.Name, time.Now().UnixNano()), Namespace: pod.Namespace},
		EventTime:           metav1.NewMicroTime(time.Now()),
		ReportingController: "probed.io/agent",
		ReportingInstance:   node,
		Action:              "ReadinessProbe",
		Reason:              "Unhealthy",
		Note:                "Readiness probe failed: HTTP probe failed with statuscode: 503",
		Type:                v1.EventTypeWarning,
		Regarding:           v1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, FieldPath: "spec.containers{app}"},
	}
}

func seriesPatch() []byte {
	return []byte(`{"series":{"count":2,"lastObservedTime":"` + time.Now().UTC().Format("2006-01-02T15:04:05.000000Z") + `"}}`)
}

// TestAgentPolicyRefusesWhatRBACAllows: under the admission
// policy, the agent's identity with a token bound to a pod on its node (as the
// DaemonSet's pod gets it) is refused, by the policy, every write of the
// issue that RBAC lets through: another node's pod's status (Ready True, pod
// IP, phase Failed, even its own condition type; strategic-merge and merge
// patches), any field of its own node's pods' status but its condition (pod
// IP, phase, Ready, another condition, the kubelet's conditions dropped), a
// pod's labels or annotations through the status, Events of another
// reporter or node, about a Node or another namespace's pod or with a related
// object, an update of another node's Event, and an eviction in a namespace
// not labelled probed.io/liveness-actions=enabled. The same identity's token
// bound to no pod (no node in it) may write no status at all.
func TestAgentPolicyRefusesWhatRBACAllows(t *testing.T) {
	w := newPolicyWorld(t)
	ctx := kubetest.Context(t)
	const (
		notMyNode   = "probed may write the status only of pods bound to its own node"
		onlyGate    = "probed may change no pod status field but its condition " + policyGate
		onlyMyCond  = "probed may add, change or remove only its own pod condition, " + policyGate
		noMetadata  = "probed may not change a pod's metadata"
		notMyEvent  = "probed may write only its own Events"
		notAboutPod = "probed may write Events only about a Pod of the Event's own namespace"
		notLabelled = "probed may evict pods only in namespaces labelled probed.io/liveness-actions=enabled"
	)
	smp, merge := types.StrategicMergePatchType, types.MergePatchType
	status := func(pt types.PatchType, pod *v1.Pod, body string) func() error {
		return func() error { return patchStatus(t, w.agent, pt, pod.Namespace, pod.Name, body) }
	}
	// An Event of this agent's reporter, but of another node, for the update case.
	foreign := agentEvent(w.mine, "another-node")
	foreign, err := w.admin.EventsV1().Events(w.ns).Create(ctx, foreign, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	event := func(mutate func(*eventsv1.Event)) func() error {
		return func() error {
			e := agentEvent(w.mine, w.node)
			mutate(e)
			_, err := w.agent.EventsV1().Events(e.Namespace).Create(ctx, e, metav1.CreateOptions{})
			return err
		}
	}
	for _, tc := range []struct {
		what string
		call func() error
		want string
	}{
		{"another node's pod: Ready True (strategic merge)", status(smp, w.victim, `{"status":{"conditions":[{"type":"Ready","status":"True"}]}}`), notMyNode},
		{"another node's pod: podIP (strategic merge)", status(smp, w.victim, `{"status":{"podIP":"10.6.6.6"}}`), notMyNode},
		{"another node's pod: phase Failed (strategic merge)", status(smp, w.victim, `{"status":{"phase":"Failed"}}`), notMyNode},
		{"another node's pod: podIP and phase Failed (merge, the issue's curl)", status(merge, w.victim, `{"status":{"podIP":"10.6.6.6","phase":"Failed"}}`), notMyNode},
		{"another node's pod: the gate condition", status(smp, w.victim, gatePatch(w.victim.UID, v1.ConditionTrue, "ProbeSucceeded")), notMyNode},
		{"own node's pod: podIP (strategic merge)", status(smp, w.mine, `{"status":{"podIP":"10.6.6.6"}}`), onlyGate},
		{"own node's pod: phase Failed (merge)", status(merge, w.mine, `{"status":{"phase":"Failed"}}`), onlyGate},
		{"own node's pod: a container not ready", status(smp, w.mine, `{"status":{"containerStatuses":[{"name":"app","ready":false}]}}`), onlyGate},
		{"own node's pod: Ready True", status(smp, w.mine, `{"status":{"conditions":[{"type":"Ready","status":"True"}]}}`), onlyMyCond},
		{"own node's pod: another condition", status(smp, w.mine, `{"status":{"conditions":[{"type":"example.com/other","status":"True"}]}}`), onlyMyCond},
		{"own node's pod: the kubelet's conditions replaced by the gate (merge)", status(merge, w.mine,
			`{"status":{"conditions":[{"type":"`+policyGate+`","status":"True"}]}}`), onlyMyCond},
		{"own node's pod: labels through the status", status(merge, w.mine, `{"metadata":{"labels":{"app":"evil"}}}`), noMetadata},
		{"own node's pod: the probes annotation through the status", status(merge, w.mine, `{"metadata":{"annotations":{"probed.io/probes":"[]"}}}`), noMetadata},
		{"own node's pod: a finalizer through the status", status(merge, w.mine, `{"metadata":{"finalizers":["example.com/hold"]}}`), noMetadata},
		{"event: another node's reportingInstance", event(func(e *eventsv1.Event) { e.ReportingInstance = "another-node" }), notMyEvent},
		{"event: another reportingController", event(func(e *eventsv1.Event) { e.ReportingController = "kubelet" }), notMyEvent},
		{"event: about a Node, in kube-system", event(func(e *eventsv1.Event) {
			e.Namespace = metav1.NamespaceSystem
			e.Regarding = v1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: w.node}
		}), notAboutPod},
		{"event: about a pod of another namespace", event(func(e *eventsv1.Event) {
			e.Regarding.Namespace, e.Regarding.Name = metav1.NamespaceSystem, "kube-apiserver"
		}), notAboutPod},
		{"event: with a related object", event(func(e *eventsv1.Event) {
			e.Related = &v1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: w.ns, Name: w.victim.Name}
		}), notAboutPod},
		{"event: update of another node's Event", func() error {
			_, err := w.agent.EventsV1().Events(w.ns).Patch(ctx, foreign.Name, types.MergePatchType, seriesPatch(), metav1.PatchOptions{})
			return err
		}, notMyEvent},
		{"eviction in a namespace without the label", func() error { return evict(ctx, w.agent, w.ns, "mine") }, notLabelled},
	} {
		err := tc.call()
		if !kubetest.DeniedByPolicy(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want the policy's refusal %q", tc.what, err, tc.want)
		}
	}

	// The agent's own ServiceAccount with a token bound to no pod carries no node.
	username := whoAmI(t, w.agent).Username
	parts := strings.Split(username, ":") // system:serviceaccount:NS:NAME
	unbound := kubetest.ClientFor(t, kubetest.ServiceAccountConfig(t, parts[2], parts[3]))
	if err := patchStatus(t, unbound, smp, w.ns, "mine", gatePatch(w.mine.UID, v1.ConditionTrue, "ProbeSucceeded")); !kubetest.DeniedByPolicy(err) ||
		!strings.Contains(err.Error(), "its token names no node") {
		t.Errorf("gate condition with a token bound to no pod: %v, want the policy's refusal (no node)", err)
	}

	// Nothing of it landed.
	for _, p := range []*v1.Pod{w.mine, w.victim} {
		got, err := w.admin.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.PodIP != kubetest.PodIP || got.Status.Phase != v1.PodRunning || len(got.Labels)+len(got.Annotations)+len(got.Finalizers) > 0 ||
			got.DeletionTimestamp != nil || len(got.Status.Conditions) != len(p.Status.Conditions) {
			t.Errorf("pod %s after the refused writes: podIP %s phase %s labels %v annotations %v finalizers %v deletion %v conditions %+v",
				p.Name, got.Status.PodIP, got.Status.Phase, got.Labels, got.Annotations, got.Finalizers, got.DeletionTimestamp, got.Status.Conditions)
		}
	}
}

// whoAmI is the user the server authenticates c's credentials as.
func whoAmI(t *testing.T, c kubernetes.Interface) authenticationv1.UserInfo {
	t.Helper()
	review, err := c.AuthenticationV1().SelfSubjectReviews().Create(kubetest.Context(t), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return review.Status.UserInfo
}

// TestAgentPolicyAllowsWhatTheAgentDoes: under the same
// policy, every write the agent makes still passes: the readiness-gate
// writer's patch adding its condition to its node's pod, changing it and
// (which the agent never does, but the policy allows: only that type)
// removing it; the kubelet's status writes beside it; its Events about its
// node's pods and their series updates; its condition on a pod being deleted
// (readiness goes on while a pod terminates); an eviction in a namespace
// labelled probed.io/liveness-actions=enabled.
func TestAgentPolicyAllowsWhatTheAgentDoes(t *testing.T) {
	w := newPolicyWorld(t)
	ctx := kubetest.Context(t)
	smp := types.StrategicMergePatchType
	if err := patchStatus(t, w.agent, smp, w.ns, "mine", gatePatch(w.mine.UID, v1.ConditionTrue, "ProbeSucceeded")); err != nil {
		t.Fatalf("add the gate condition: %v", err)
	}
	if err := patchStatus(t, w.agent, smp, w.ns, "mine", gatePatch(w.mine.UID, v1.ConditionFalse, "ProbeFailed")); err != nil {
		t.Fatalf("change the gate condition: %v", err)
	}
	// The kubelet re-derives Ready from the gate (an admin write, not bound by the policy).
	kubetest.RestartContainer(t, w.admin, w.ns, "mine", "app")
	pod, err := w.admin.CoreV1().Pods(w.ns).Get(ctx, "mine", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c := condition(pod, policyGate); c == nil || c.Status != v1.ConditionFalse || c.Reason != "ProbeFailed" {
		t.Errorf("gate condition %+v, want False ProbeFailed", c)
	}
	if err := patchStatus(t, w.agent, smp, w.ns, "mine", `{"status":{"conditions":[{"type":"`+policyGate+`","$patch":"delete"}]}}`); err != nil {
		t.Errorf("remove the gate condition: %v", err)
	}

	leaving := w.gatedPod(t, w.ns, "leaving", w.node)
	if err := w.admin.CoreV1().Pods(w.ns).Delete(ctx, "leaving", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err) // no kubelet: the pod stays, terminating
	}
	if err := patchStatus(t, w.agent, smp, w.ns, "leaving", gatePatch(leaving.UID, v1.ConditionFalse, "ProbeFailed")); err != nil {
		t.Errorf("the gate condition of a terminating pod: %v", err)
	}

	e, err := w.agent.EventsV1().Events(w.ns).Create(ctx, agentEvent(w.mine, w.node), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create the agent's Event: %v", err)
	}
	if _, err := w.agent.EventsV1().Events(w.ns).Patch(ctx, e.Name, types.MergePatchType, seriesPatch(), metav1.PatchOptions{}); err != nil {
		t.Errorf("patch the agent's Event's series: %v", err)
	}

	labelled := kubetest.Namespace(t)
	kubetest.LabelNamespace(t, labelled, map[string]string{"probed.io/liveness-actions": "enabled"})
	kubetest.CreatePod(t, w.admin, kubetest.NewPod(labelled, "doomed", w.node, "app"))
	// The policy reads the namespace from the server's informer: the new label takes a moment.
	err = evict(ctx, w.agent, labelled, "doomed")
	for deadline := time.Now().Add(10 * time.Second); kubetest.DeniedByPolicy(err) && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		err = evict(ctx, w.agent, labelled, "doomed")
	}
	if err != nil {
		t.Errorf("evict in a namespace labelled probed.io/liveness-actions=enabled: %v", err)
	}
	if _, err := w.admin.CoreV1().Pods(labelled).Get(ctx, "doomed", metav1.GetOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

func condition(pod *v1.Pod, t v1.PodConditionType) *v1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == t {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}
