package release_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/probed/probed/agent/kube/offload"
	"github.com/probed/probed/agent/release"
	"github.com/probed/probed/internal/kubetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreCurrent()) }

const gate = "probed.io/ready"

// gatedPod is a pod of ns on a test node listing the gate, with the
// annotation's probes and, when specReadiness, a spec readinessProbe on
// its container "app"; probed's condition True as the agent left it.
func gatedPod(t *testing.T, c kubernetes.Interface, ns, name, annotation string, specReadiness bool) *v1.Pod {
	t.Helper()
	pod := kubetest.NewPod(ns, name, kubetest.NodeName(t), "app")
	pod.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: gate}}
	if annotation != "" {
		pod.Annotations = map[string]string{"probed.io/probes": annotation}
	}
	if specReadiness {
		pod.Spec.Containers[0].ReadinessProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(8080)}}}
	}
	pod = kubetest.CreatePod(t, c, pod)
	// The condition as the agent writes it (kubetest.PatchPodStatus writes the kubelet's part).
	patch := fmt.Sprintf(`{"metadata":{"uid":%q},"status":{"conditions":[{"type":%q,"status":"True","reason":"ProbeSucceeded","lastTransitionTime":"2026-12-05T10:00:00Z"}]}}`, pod.UID, gate)
	pod, err := c.CoreV1().Pods(ns).Patch(kubetest.Context(t), name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

func condition(t *testing.T, c kubernetes.Interface, ns, name string) *v1.PodCondition {
	t.Helper()
	pod, err := c.CoreV1().Pods(ns).Get(kubetest.Context(t), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == gate {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

const (
	readiness = `[{"container": "app", "type": "readiness", "tcpSocket": {"port": 8080}}]`
	liveness  = `[{"container": "app", "type": "liveness", "tcpSocket": {"port": 8080}}]`
)

// TestReleaseHandsBackEachPod: against a real API server, the pods left
// gated get probed's condition one last time: True where the kubelet's spec
// readinessProbe checks the container probed checked, or probed checked no
// readiness (liveness only); False, naming the container, where probed's
// readiness probe was the only one. A pod without the gate and a
// terminating gated pod are not touched. A second run writes nothing.
func TestReleaseHandsBackEachPod(t *testing.T) {
	c := kubetest.Client(t)
	ns := kubetest.Namespace(t)
	gatedPod(t, c, ns, "checked-by-kubelet", readiness, true)
	gatedPod(t, c, ns, "only-probed", readiness, false)
	gatedPod(t, c, ns, "liveness-only", liveness, false)
	gatedPod(t, c, ns, "no-annotation", "", false)
	plain := kubetest.NewPod(ns, "not-gated", kubetest.NodeName(t), "app")
	kubetest.CreatePod(t, c, plain)
	leaving := gatedPod(t, c, ns, "terminating", readiness, false)
	leaving.Finalizers = []string{"example.com/hold"}
	if _, err := c.CoreV1().Pods(ns).Update(kubetest.Context(t), leaving, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p, err := c.CoreV1().Pods(ns).Get(kubetest.Context(t), "terminating", metav1.GetOptions{})
		if err == nil {
			p.Finalizers = nil
			_, _ = c.CoreV1().Pods(ns).Update(kubetest.Context(t), p, metav1.UpdateOptions{})
		}
	})
	if err := c.CoreV1().Pods(ns).Delete(kubetest.Context(t), "terminating", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	check, err := release.Run(kubetest.Context(t), c, release.Options{Gate: gate, Namespace: ns, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if got := condition(t, c, ns, "only-probed"); got == nil || got.Reason != "ProbeSucceeded" {
		t.Fatalf("without Write the condition changed: %+v", got)
	}
	r, err := release.Run(kubetest.Context(t), c, release.Options{Gate: gate, Namespace: ns, Write: true, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if len(check.Pods) != 4 || len(r.Pods) != 4 {
		t.Fatalf("pods %+v, want the 4 gated ones not terminating", r.Pods)
	}
	want := map[string]v1.ConditionStatus{"checked-by-kubelet": v1.ConditionTrue, "only-probed": v1.ConditionFalse,
		"liveness-only": v1.ConditionTrue, "no-annotation": v1.ConditionTrue}
	for _, p := range r.Pods {
		got := condition(t, c, ns, p.Name)
		if got == nil || got.Status != want[p.Name] || got.Reason != release.Reason || !p.Written {
			t.Errorf("pod %s: condition %+v (written %v), want %s %s", p.Name, got, p.Written, want[p.Name], release.Reason)
		}
		if want[p.Name] == v1.ConditionTrue && !got.LastTransitionTime.Time.Before(now) {
			t.Errorf("pod %s stayed True: lastTransitionTime %v moved to %v", p.Name, got.LastTransitionTime, now)
		}
	}
	if rep := r.Replace(); len(rep) != 1 || rep[0].Name != "only-probed" || len(rep[0].Unchecked) != 1 || rep[0].Unchecked[0] != "app" {
		t.Errorf("to replace: %+v, want only-probed (container app)", rep)
	}
	if got := condition(t, c, ns, "terminating"); got.Reason != "ProbeSucceeded" {
		t.Errorf("terminating pod written: %+v", got)
	}
	again, err := release.Run(kubetest.Context(t), c, release.Options{Gate: gate, Namespace: ns, Write: true, Now: func() time.Time { return now.Add(time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range again.Pods {
		if p.Written {
			t.Errorf("second run wrote pod %s again", p.Name)
		}
	}
}

// TestReleaseRefusesWhileATemplateIsGated: a Deployment whose template lists
// the gate would make pods that never turn Ready once probed is gone: Run
// names it and writes nothing, until the template no longer lists it. A
// ReplicaSet owned by a Deployment follows the Deployment, and one scaled to
// zero makes no pod: neither counts.
func TestReleaseRefusesWhileATemplateIsGated(t *testing.T) {
	c := kubetest.Client(t)
	ns := kubetest.Namespace(t)
	gatedPod(t, c, ns, "leftover", readiness, true)
	labels := map[string]string{"app": "web"}
	zero := int32(0)
	template := v1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec: v1.PodSpec{
			ReadinessGates: []v1.PodReadinessGate{{ConditionType: gate}},
			Containers:     []v1.Container{{Name: "app", Image: "probed.test/none:1"}},
		},
	}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec:       appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: template},
	}
	d, err := c.AppsV1().Deployments(ns).Create(kubetest.Context(t), d, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "idle"},
		Spec:       appsv1.ReplicaSetSpec{Replicas: &zero, Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: template},
	}
	if _, err := c.AppsV1().ReplicaSets(ns).Create(kubetest.Context(t), rs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	r, err := release.Run(kubetest.Context(t), c, release.Options{Gate: gate, Namespace: ns, Write: true})
	var gated *release.ErrTemplatesGated
	if !errors.As(err, &gated) || len(gated.Workloads) != 1 || gated.Workloads[0] != (release.Workload{Kind: "Deployment", Namespace: ns, Name: "web"}) {
		t.Fatalf("err %v, want the Deployment named", err)
	}
	if len(r.Pods) != 1 || r.Pods[0].Written || condition(t, c, ns, "leftover").Reason != "ProbeSucceeded" {
		t.Fatalf("written while a template is gated: %+v", r.Pods)
	}

	d.Spec.Template.Spec.ReadinessGates = nil
	if _, err := c.AppsV1().Deployments(ns).Update(kubetest.Context(t), d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := release.Run(kubetest.Context(t), c, release.Options{Gate: gate, Namespace: ns, Write: true}); err != nil {
		t.Fatal(err)
	}
	if got := condition(t, c, ns, "leftover"); got.Reason != release.Reason || got.Status != v1.ConditionTrue {
		t.Errorf("leftover pod: %+v", got)
	}
}

// offloadedPod is a pod of ns as the offload webhook leaves it: app's
// readiness and liveness probes moved into the record, the gate added and
// said so in the note, owned by owner (nil: none); probed's condition True.
func offloadedPod(t *testing.T, c kubernetes.Interface, ns, name string, owner *metav1.OwnerReference) *v1.Pod {
	t.Helper()
	pod := kubetest.NewPod(ns, name, kubetest.NodeName(t), "app")
	pod.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: gate}}
	pod.Annotations = map[string]string{
		offload.RecordAnnotation: `[{"container":"app","type":"readiness","probe":{"httpGet":{"path":"/ready","port":8080}}},` +
			`{"container":"app","type":"liveness","probe":{"tcpSocket":{"port":8080}}}]`,
		offload.NoteAnnotation: `{"readinessGate":"` + gate + `"}`,
	}
	if owner != nil {
		pod.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	return kubetest.CreatePod(t, c, pod)
}

// TestReleaseRefusesWhileOffloaded: pods whose probes the offload webhook
// moved would have nobody to run them once probed is gone: Run (and
// ListOffloaded, `probed offload status`) names their workloads — a
// Deployment's pods under the Deployment, a pod of no controller as a Pod
// — with the probes rolling restores, the gate, and the command, the
// namespace's label off first while it opts in; nothing is written, and
// the offloaded gated pod counts as checked by probed alone (its readiness
// probe is no longer in its spec). Once the pods are replaced, Run goes on.
func TestReleaseRefusesWhileOffloaded(t *testing.T) {
	c := kubetest.Client(t)
	ns := kubetest.Namespace(t)
	kubetest.LabelNamespace(t, ns, map[string]string{offload.NamespaceLabel: "enabled"})
	labels := map[string]string{"app": "web"}
	d, err := c.AppsV1().Deployments(ns).Create(kubetest.Context(t), &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: v1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app", Image: "probed.test/none:1"}}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	isController := true
	rs, err := c.AppsV1().ReplicaSets(ns).Create(kubetest.Context(t), &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-5d4f", OwnerReferences: []metav1.OwnerReference{
			{APIVersion: "apps/v1", Kind: "Deployment", Name: d.Name, UID: d.UID, Controller: &isController}}},
		Spec: appsv1.ReplicaSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: d.Spec.Template},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	byRS := &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: &isController}
	offloadedPod(t, c, ns, "web-5d4f-a", byRS)
	offloadedPod(t, c, ns, "web-5d4f-b", byRS)
	offloadedPod(t, c, ns, "bare", nil)

	r, err := release.Run(kubetest.Context(t), c, release.Options{Gate: gate, Namespace: ns, Write: true})
	var off *release.ErrOffloaded
	if !errors.As(err, &off) || len(off.Workloads) != 2 {
		t.Fatalf("err %v, want the two workloads named", err)
	}
	for _, p := range r.Pods {
		if p.Written || p.Ready || len(p.Unchecked) != 1 || p.Unchecked[0] != "app" {
			t.Errorf("pod %s: %+v, want not written, False, app checked by probed alone", p.Name, p)
		}
	}
	list, err := release.ListOffloaded(kubetest.Context(t), c, ns, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Namespaces) != 1 || list.Namespaces[0] != ns || len(list.Workloads) != 2 {
		t.Fatalf("offload report %+v", list)
	}
	bare, web := list.Workloads[1], list.Workloads[0]
	if web.String() != "Deployment "+ns+"/web" || len(web.Pods) != 2 || web.Gate != gate || !web.StillSelected ||
		fmt.Sprint(web.Probes) != "[app/readiness app/liveness]" {
		t.Errorf("web %+v", web)
	}
	if want := "kubectl label namespace " + ns + " probed.io/offload- first"; !strings.HasPrefix(web.Roll, want) ||
		!strings.Contains(web.Roll, "kubectl rollout restart deployment/web -n "+ns) {
		t.Errorf("web's roll %q", web.Roll)
	}
	if bare.String() != "Pod "+ns+"/bare" || !strings.Contains(bare.Roll, "kubectl delete pod -n "+ns+" bare, then create it again from its manifest") {
		t.Errorf("bare %+v", bare)
	}
	if !strings.Contains(web.Restores(), "the kubelet's app/readiness, app/liveness, and no readiness gate "+gate) {
		t.Errorf("restores %q", web.Restores())
	}

	for _, name := range []string{"web-5d4f-a", "web-5d4f-b", "bare"} {
		if err := c.CoreV1().Pods(ns).Delete(kubetest.Context(t), name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
	}
	kubetest.Eventually(t, "the offloaded pods gone", func() bool {
		l, err := c.CoreV1().Pods(ns).List(kubetest.Context(t), metav1.ListOptions{})
		return err == nil && len(l.Items) == 0
	})
	if _, err := release.Run(kubetest.Context(t), c, release.Options{Gate: gate, Namespace: ns, Write: true}); err != nil {
		t.Fatalf("with no pod offloaded: %v", err)
	}
}
