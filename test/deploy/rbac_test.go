package deploy

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/probed/probed/internal/kubetest"
)

// TestAgentRoleAllowsWhatTheAgentDoes: as the agent's
// ServiceAccount bound to deploy/kubernetes/02-clusterrole.yaml (read from the
// file), the agent's requests succeed: list and watch the node's pods across
// namespaces (field selector spec.nodeName), get a pod, patch its
// readiness-gate condition on the status subresource, create and patch an
// events.k8s.io Event, list and watch the Services' EndpointSlices.
func TestAgentRoleAllowsWhatTheAgentDoes(t *testing.T) {
	admin := kubetest.Client(t)
	agent := kubetest.ClientFor(t, kubetest.AgentConfig(t))
	ns, node := kubetest.Namespace(t), kubetest.NodeName(t)
	ctx := kubetest.Context(t)
	pod := kubetest.NewPod(ns, "web", node, "app")
	pod.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: "probed.io/ready"}}
	pod = kubetest.CreatePod(t, admin, pod)
	kubetest.SetPodRunning(t, admin, ns, "web", true)

	onNode := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()}
	list, err := agent.CoreV1().Pods(metav1.NamespaceAll).List(ctx, onNode)
	if err != nil || len(list.Items) != 1 || list.Items[0].Name != "web" {
		t.Fatalf("list pods of node %s: %v %v, want pod web", node, err, list)
	}
	onNode.ResourceVersion = list.ResourceVersion
	w, err := agent.CoreV1().Pods(metav1.NamespaceAll).Watch(ctx, onNode)
	if err != nil {
		t.Fatalf("watch pods of node %s: %v", node, err)
	}
	defer w.Stop()
	if _, err := agent.CoreV1().Pods(ns).Get(ctx, "web", metav1.GetOptions{}); err != nil {
		t.Errorf("get pod: %v", err)
	}

	patch := []byte(`{"metadata":{"uid":"` + string(pod.UID) + `"},"status":{"conditions":[{"type":"probed.io/ready","status":"True","reason":"ProbeSucceeded"}]}}`)
	if _, err := agent.CoreV1().Pods(ns).Patch(ctx, "web", types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		t.Errorf("patch pods/status: %v", err)
	}
	select {
	case ev := <-w.ResultChan():
		if ev.Type != watch.Modified {
			t.Errorf("watch: %s %v, want MODIFIED (the condition)", ev.Type, ev.Object)
		}
	case <-time.After(10 * time.Second):
		t.Error("watch saw nothing of the status patch")
	}

	now := metav1.NewMicroTime(time.Now())
	event, err := agent.EventsV1().Events(ns).Create(ctx, &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: "web." + "17a0f1c2d3e4f5a6", Namespace: ns},
		EventTime:           now,
		ReportingController: "probed.io/agent",
		ReportingInstance:   node,
		Action:              "Probe",
		Reason:              "Unhealthy",
		Note:                "Readiness probe failed: HTTP probe failed with statuscode: 503",
		Type:                v1.EventTypeWarning,
		Regarding:           v1.ObjectReference{Kind: "Pod", Namespace: ns, Name: "web", UID: pod.UID, APIVersion: "v1", FieldPath: "spec.containers{app}"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create events.k8s.io event: %v", err)
	}
	series := []byte(`{"series":{"count":2,"lastObservedTime":"` + now.UTC().Format("2006-01-02T15:04:05.000000Z") + `"}}`)
	if _, err := agent.EventsV1().Events(ns).Patch(ctx, event.Name, types.MergePatchType, series, metav1.PatchOptions{}); err != nil {
		t.Errorf("patch events.k8s.io event (its series): %v", err)
	}

	// The panic threshold's informer: every Service's EndpointSlices.
	services := metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName}
	slices, err := agent.DiscoveryV1().EndpointSlices(metav1.NamespaceAll).List(ctx, services)
	if err != nil {
		t.Fatalf("list endpointslices: %v", err)
	}
	services.ResourceVersion = slices.ResourceVersion
	sw, err := agent.DiscoveryV1().EndpointSlices(metav1.NamespaceAll).Watch(ctx, services)
	if err != nil {
		t.Fatalf("watch endpointslices: %v", err)
	}
	sw.Stop()
}

// TestAgentRoleRefusesTheRest: the same identity is refused
// (403) everything outside the role: changing a pod's spec or metadata,
// deleting a pod, reading secrets, listing nodes, a core/v1 Event (the role
// grants events.k8s.io only), evicting a pod without
// options/clusterrole-eviction.yaml, and reading a namespace without
// options/clusterrole-restart.yaml.
func TestAgentRoleRefusesTheRest(t *testing.T) {
	admin := kubetest.Client(t)
	agent := kubetest.ClientFor(t, kubetest.AgentConfig(t))
	ns := kubetest.Namespace(t)
	ctx := kubetest.Context(t)
	kubetest.CreatePod(t, admin, kubetest.NewPod(ns, "web", kubetest.NodeName(t), "app"))
	pod, err := agent.CoreV1().Pods(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	for what, call := range map[string]func() error{
		"update a pod": func() error {
			p := pod.DeepCopy()
			p.Spec.ActiveDeadlineSeconds = new(int64)
			*p.Spec.ActiveDeadlineSeconds = 60
			_, err := agent.CoreV1().Pods(ns).Update(ctx, p, metav1.UpdateOptions{})
			return err
		},
		"patch a pod's labels": func() error {
			_, err := agent.CoreV1().Pods(ns).Patch(ctx, "web", types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
			return err
		},
		"update pods/status": func() error {
			_, err := agent.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
			return err
		},
		"delete a pod": func() error {
			return agent.CoreV1().Pods(ns).Delete(ctx, "web", metav1.DeleteOptions{})
		},
		"create a pod": func() error {
			_, err := agent.CoreV1().Pods(ns).Create(ctx, kubetest.NewPod(ns, "intruder", "n", "app"), metav1.CreateOptions{})
			return err
		},
		"list secrets": func() error {
			_, err := agent.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
			return err
		},
		"list nodes": func() error {
			_, err := agent.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			return err
		},
		"create a core/v1 event": func() error {
			_, err := agent.CoreV1().Events(ns).Create(ctx, &v1.Event{
				ObjectMeta:     metav1.ObjectMeta{Name: "web.1"},
				InvolvedObject: v1.ObjectReference{Kind: "Pod", Namespace: ns, Name: "web"},
				Reason:         "Unhealthy",
			}, metav1.CreateOptions{})
			return err
		},
		"evict a pod": func() error { return evict(ctx, agent, ns, "web") },
		"read a namespace": func() error {
			_, err := agent.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			return err
		},
	} {
		if err := call(); !apierrors.IsForbidden(err) {
			t.Errorf("%s: %v, want 403 Forbidden", what, err)
		}
	}
}

// TestEvictionRoleAllowsEviction: with options/clusterrole-eviction.yaml bound too
// (--liveness-action=evict), the agent's policy/v1 Eviction is accepted.
func TestEvictionRoleAllowsEviction(t *testing.T) {
	admin := kubetest.Client(t)
	agent := kubetest.ClientFor(t, kubetest.AgentConfigWithEviction(t))
	ns := kubetest.Namespace(t)
	ctx := kubetest.Context(t)
	kubetest.CreatePod(t, admin, kubetest.NewPod(ns, "web", kubetest.NodeName(t), "app"))
	if err := evict(ctx, agent, ns, "web"); err != nil {
		t.Fatalf("evict with the eviction role: %v", err)
	}
	// The eviction deleted the pod gracefully: it waits for a kubelet that does not run.
	pod, err := admin.CoreV1().Pods(ns).Get(ctx, "web", metav1.GetOptions{})
	if err == nil && pod.DeletionTimestamp == nil {
		t.Errorf("pod after its eviction: no deletionTimestamp")
	} else if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

func evict(ctx context.Context, c kubernetes.Interface, ns, name string) error {
	return c.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
}

// TestRestartRoleReadsNamespaces: with options/clusterrole-restart.yaml bound too
// (--liveness-action=restart), the agent reads and watches namespaces (the
// label that allows restarts, agent/kube/nsscope), and nothing more than
// before: no eviction, no namespace write.
func TestRestartRoleReadsNamespaces(t *testing.T) {
	admin := kubetest.Client(t)
	agent := kubetest.ClientFor(t, kubetest.AgentConfigWithRestart(t))
	ns := kubetest.Namespace(t)
	ctx := kubetest.Context(t)
	if _, err := agent.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
		t.Fatalf("get a namespace with the restart role: %v", err)
	}
	if _, err := agent.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: "probed.io/liveness-actions=enabled"}); err != nil {
		t.Fatalf("list the selected namespaces with the restart role: %v", err)
	}
	kubetest.CreatePod(t, admin, kubetest.NewPod(ns, "web", kubetest.NodeName(t), "app"))
	if err := evict(ctx, agent, ns, "web"); !apierrors.IsForbidden(err) {
		t.Errorf("evict: %v, want 403", err)
	}
	patch := []byte(`{"metadata":{"labels":{"probed.io/liveness-actions":"enabled"}}}`)
	if _, err := agent.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, patch, metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("label a namespace: %v, want 403", err)
	}
}
