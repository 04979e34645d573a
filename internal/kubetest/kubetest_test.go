package kubetest_test

import (
	"testing"
	"time"

	"go.uber.org/goleak"
	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/probed/probed/internal/kubetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreCurrent()) }

const gate = "probed.io/ready"

// TestWatchOfNodeSeesOnlyItsPodsAndKubeletStatus: a watch with field selector
// spec.nodeName=NODE (the agent's informer) sees the pod bound
// to NODE being added and its kubelet-written status (pod IP on loopback,
// container ID, running since, started, ready), and never the pod of another
// node.
func TestWatchOfNodeSeesOnlyItsPodsAndKubeletStatus(t *testing.T) {
	c := kubetest.Client(t)
	ns := kubetest.Namespace(t)
	node, other := kubetest.NodeName(t), kubetest.NodeName(t)
	ctx := kubetest.Context(t)

	w, err := c.CoreV1().Pods(metav1.NamespaceAll).Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	kubetest.CreatePod(t, c, kubetest.NewPod(ns, "elsewhere", other, "app"))
	kubetest.CreatePod(t, c, kubetest.NewPod(ns, "here", node, "app", "sidecar"))
	kubetest.SetPodRunning(t, c, ns, "elsewhere", true)
	written := kubetest.SetPodRunning(t, c, ns, "here", true)

	var got []watch.EventType
	var last *v1.Pod
	timeout := time.After(10 * time.Second)
	for last == nil || last.ResourceVersion != written.ResourceVersion {
		select {
		case ev := <-w.ResultChan():
			pod := ev.Object.(*v1.Pod)
			if pod.Name != "here" {
				t.Fatalf("watch of node %s saw pod %s of node %s", node, pod.Name, pod.Spec.NodeName)
			}
			got = append(got, ev.Type)
			last = pod
		case <-timeout:
			t.Fatalf("watch saw %v, not the status write (resourceVersion %s)", got, written.ResourceVersion)
		}
	}
	if got[0] != watch.Added {
		t.Errorf("first event %s, want ADDED", got[0])
	}
	if last.Status.PodIP != kubetest.PodIP || last.Status.Phase != v1.PodRunning {
		t.Errorf("podIP %q phase %q, want %s Running", last.Status.PodIP, last.Status.Phase, kubetest.PodIP)
	}
	if len(last.Status.ContainerStatuses) != 2 {
		t.Fatalf("container statuses %+v, want app and sidecar", last.Status.ContainerStatuses)
	}
	ids := map[string]bool{}
	for _, cs := range last.Status.ContainerStatuses {
		if cs.ContainerID == "" || ids[cs.ContainerID] || cs.State.Running == nil || cs.State.Running.StartedAt.IsZero() ||
			cs.Started == nil || !*cs.Started || !cs.Ready || cs.RestartCount != 0 {
			t.Errorf("container status %+v: want its own container ID, running since, started, ready, 0 restarts", cs)
		}
		ids[cs.ContainerID] = true
	}
	if cond := condition(last, v1.PodReady); cond == nil || cond.Status != v1.ConditionTrue {
		t.Errorf("Ready %+v, want True", cond)
	}
}

// TestKubeletStatusWritesKeepTheGateCondition: the helper writes statuses as
// the kubelet's status manager does — it keeps a readiness-gate condition
// another writer set (mergePodStatus) and derives Ready from containers and
// gates (GeneratePodReadyCondition) — and a restart is a new container ID
// with restartCount + 1 (what W6 sees as a new container).
func TestKubeletStatusWritesKeepTheGateCondition(t *testing.T) {
	c := kubetest.Client(t)
	ns := kubetest.Namespace(t)
	pod := kubetest.NewPod(ns, "gated", kubetest.NodeName(t), "app")
	pod.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: gate}}
	kubetest.CreatePod(t, c, pod)

	running := kubetest.SetPodRunning(t, c, ns, "gated", true)
	if cond := condition(running, v1.PodReady); cond == nil || cond.Status != v1.ConditionFalse || cond.Reason != "ReadinessGatesNotReady" {
		t.Fatalf("Ready before the gate %+v, want False ReadinessGatesNotReady", cond)
	}

	// The gate's owner: a strategic-merge patch of only its condition, UID precondition.
	patch := []byte(`{"metadata":{"uid":"` + string(running.UID) + `"},"status":{"conditions":[{"type":"` + gate +
		`","status":"True","reason":"ProbeSucceeded","lastTransitionTime":"` + time.Now().UTC().Format(time.RFC3339) + `"}]}}`)
	if _, err := c.CoreV1().Pods(ns).Patch(kubetest.Context(t), "gated", types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	// The kubelet's next write keeps the gate and derives Ready from it.
	after := kubetest.PatchPodStatus(t, c, ns, "gated", func(*v1.PodStatus) {})
	if cond := condition(after, gate); cond == nil || cond.Status != v1.ConditionTrue || cond.Reason != "ProbeSucceeded" {
		t.Fatalf("gate condition after a kubelet write %+v, want kept True ProbeSucceeded", cond)
	}
	if cond := condition(after, v1.PodReady); cond == nil || cond.Status != v1.ConditionTrue {
		t.Fatalf("Ready with the gate True %+v, want True", cond)
	}

	oldID := after.Status.ContainerStatuses[0].ContainerID
	restarted := kubetest.RestartContainer(t, c, ns, "gated", "app")
	cs := restarted.Status.ContainerStatuses[0]
	if cs.ContainerID == oldID || cs.RestartCount != 1 || cs.Ready || cs.LastTerminationState.Terminated == nil ||
		cs.LastTerminationState.Terminated.ContainerID != oldID {
		t.Errorf("after a restart %+v: want a new container ID, restartCount 1, not ready, lastState of %s", cs, oldID)
	}
	if cond := condition(restarted, gate); cond == nil || cond.Status != v1.ConditionTrue {
		t.Errorf("gate condition after a restart %+v, want kept", cond)
	}
	if cond := condition(restarted, v1.PodReady); cond == nil || cond.Status != v1.ConditionFalse {
		t.Errorf("Ready after a restart %+v, want False", cond)
	}
}

// TestServiceAccountConfigIsThatIdentity: the config from the TokenRequest
// API authenticates as the ServiceAccount (not as admin), and RBAC refuses it
// what no role grants.
// The same holds through the kubeconfig file WriteKubeconfig writes (what a
// probed process started with --kubeconfig reads).
func TestServiceAccountConfigIsThatIdentity(t *testing.T) {
	ns := kubetest.Namespace(t)
	cfg := kubetest.ServiceAccountConfig(t, ns, "someone")
	fromFile, err := clientcmd.BuildConfigFromFlags("", kubetest.WriteKubeconfig(t, cfg))
	if err != nil {
		t.Fatal(err)
	}
	fromFile.Dial = cfg.Dial // closed with the test
	for how, cfg := range map[string]*rest.Config{"rest.Config": cfg, "kubeconfig file": fromFile} {
		c := kubetest.ClientFor(t, cfg)
		ctx := kubetest.Context(t)
		review, err := c.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s: %v", how, err)
		}
		if want := "system:serviceaccount:" + ns + ":someone"; review.Status.UserInfo.Username != want {
			t.Errorf("%s: authenticated as %q, want %q", how, review.Status.UserInfo.Username, want)
		}
		if _, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("%s: list pods without a role: %v, want 403 Forbidden", how, err)
		}
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
