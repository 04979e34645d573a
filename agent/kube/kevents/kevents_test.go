package kevents_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
	v1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/probed/probed/agent/kube/kevents"
	"github.com/probed/probed/internal/kubetest"
	"github.com/probed/probed/manager"
	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/bound"
)

// IgnoreCurrent: goroutines started at package init by dependencies.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreCurrent()) }

// startRecorder runs a Recorder for node until the test ends (Run's flush
// included) and returns it.
func startRecorder(t *testing.T, opts kevents.Options) *kevents.Recorder {
	t.Helper()
	r, err := kevents.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := r.Run(ctx); err != nil {
			t.Error(err)
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
	return r
}

func sidecarPod(ns, node string) *v1.Pod {
	always := v1.ContainerRestartPolicyAlways
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: v1.PodSpec{
			NodeName:       node,
			InitContainers: []v1.Container{{Name: "sidecar", Image: "example/sidecar", RestartPolicy: &always}},
			Containers:     []v1.Container{{Name: "app", Image: "example/app"}},
		},
	}
}

func listEvents(t *testing.T, r interface {
	List(context.Context, metav1.ListOptions) (*eventsv1.EventList, error)
}) []eventsv1.Event {
	t.Helper()
	l, err := r.List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// K4: the kubelet's reasons and messages arrive as
// events.k8s.io/v1 Events about the pod and the container they concern
// (regarding.fieldPath spec.containers{app}, spec.initContainers{sidecar}
// for a sidecar), reportingController probed.io/agent, reportingInstance
// the node, an action naming the probe, no resourceVersion in regarding, the
// note cut to the API's 1,024 bytes.
func TestK4_EventsOnThePodAndContainer(t *testing.T) {
	cfg := kubetest.Config(t)
	c := kubetest.ClientFor(t, cfg)
	ns, node := kubetest.Namespace(t), kubetest.NodeName(t)
	pod, err := c.CoreV1().Pods(ns).Create(kubetest.Context(t), sidecarPod(ns, node), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := startRecorder(t, kevents.Options{Client: c, NodeName: node})

	r.Eventf(runtime.ContainerRef(pod, "app"), v1.EventTypeWarning, manager.ReasonUnhealthy, "%s probe failed: %s", "Liveness", "HTTP probe failed with statuscode: 500")
	r.Eventf(runtime.ContainerRef(pod, "sidecar"), v1.EventTypeWarning, manager.ReasonProbeWarning, "%s probe warning: %s", "Readiness", "Probe terminated redirects, 100% done")
	r.Eventf(runtime.ContainerRef(pod, "app"), v1.EventTypeWarning, manager.ReasonUnhealthy, "%s probe failed: %s", "Startup", strings.Repeat("x", 3000))
	r.Eventf(pod, v1.EventTypeWarning, "FailedProbeAnnotation", "annotation probed.io/probes: container %q: no such container", "db")

	evs := c.EventsV1().Events(ns)
	var got []eventsv1.Event
	kubetest.Eventually(t, "4 events", func() bool { got = listEvents(t, evs); return len(got) == 4 })
	byKey := map[string]eventsv1.Event{}
	for _, e := range got {
		if e.ReportingController != kevents.ReportingController || e.ReportingInstance != node {
			t.Errorf("event %s: reporting %q/%q, want %q/%q", e.Name, e.ReportingController, e.ReportingInstance, kevents.ReportingController, node)
		}
		if e.Regarding.Kind != "Pod" || e.Regarding.Name != "web" || e.Regarding.Namespace != ns || e.Regarding.UID != pod.UID || e.Regarding.ResourceVersion != "" {
			t.Errorf("event %s: regarding %+v", e.Name, e.Regarding)
		}
		if e.Type != v1.EventTypeWarning || e.EventTime.IsZero() {
			t.Errorf("event %s: type %q, eventTime %v", e.Name, e.Type, e.EventTime)
		}
		byKey[e.Regarding.FieldPath+" "+e.Action] = e
	}
	want := []struct{ key, reason, note string }{
		{"spec.containers{app} LivenessProbe", "Unhealthy", "Liveness probe failed: HTTP probe failed with statuscode: 500"},
		{"spec.initContainers{sidecar} ReadinessProbe", "ProbeWarning", "Readiness probe warning: Probe terminated redirects, 100% done"},
		{"spec.containers{app} StartupProbe", "Unhealthy", bound.Cut("Startup probe failed: "+strings.Repeat("x", 3000), kevents.NoteLengthLimit)},
		{" Probing", "FailedProbeAnnotation", `annotation probed.io/probes: container "db": no such container`},
	}
	for _, w := range want {
		e, ok := byKey[w.key]
		if !ok {
			t.Errorf("no event with fieldPath+action %q; got %v", w.key, keys(byKey))
			continue
		}
		if e.Reason != w.reason || e.Note != w.note {
			t.Errorf("event %q: reason %q note %q (%d bytes), want %q %q", w.key, e.Reason, e.Note, len(e.Note), w.reason, w.note)
		}
	}
}

func keys(m map[string]eventsv1.Event) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// 1,000 identical events about one container (the pod's
// resourceVersion changing under them, as the status writes make it) are a
// bounded number of API writes and one Event with an EventSeries; the
// object's bucket let 25 through and dropped the rest.
func TestIdenticalEventsAreOneSeries(t *testing.T) {
	cfg := kubetest.Config(t)
	admin := kubetest.ClientFor(t, cfg)
	ns, node := kubetest.Namespace(t), kubetest.NodeName(t)
	pod, err := admin.CoreV1().Pods(ns).Create(kubetest.Context(t), sidecarPod(ns, node), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var requests kubetest.Requests
	r := startRecorder(t, kevents.Options{Client: kubetest.ClientFor(t, requests.Wrap(cfg)), NodeName: node})
	for i := range 1000 {
		ref := runtime.ContainerRef(pod, "app")
		ref.ResourceVersion = fmt.Sprint(1000 + i)
		r.Eventf(ref, v1.EventTypeWarning, manager.ReasonUnhealthy, "%s probe failed: %s", "Readiness", "dial tcp 127.0.0.1:8080: connect: connection refused")
	}
	evs := admin.EventsV1().Events(ns)
	var got []eventsv1.Event
	kubetest.Eventually(t, "an event with a series", func() bool {
		got = listEvents(t, evs)
		return len(got) == 1 && got[0].Series != nil && got[0].Series.Count >= 2
	})
	if d := r.Dropped(); d != 975 {
		t.Errorf("dropped %d events, want 975 (burst 25)", d)
	}
	writes := requests.Count("POST", "/events") + requests.Count("PATCH", "/events") + requests.Count("PUT", "/events")
	if writes < 2 || writes > 4 {
		t.Errorf("%d event writes for 1,000 identical events (requests %v), want 2 to 4 (a create, a series patch, a retry of a racing patch)", writes, requests.All())
	}
	if got[0].Regarding.FieldPath != "spec.containers{app}" || got[0].Note != "Readiness probe failed: dial tcp 127.0.0.1:8080: connect: connection refused" {
		t.Errorf("series event = %+v", got[0])
	}
}

// Distinct events about one pod (no series can fold them)
// are bounded by the pod's bucket: 25 writes for 100 events; another pod's
// bucket is its own.
func TestDistinctEventsBoundedPerObject(t *testing.T) {
	cfg := kubetest.Config(t)
	admin := kubetest.ClientFor(t, cfg)
	ns, node := kubetest.Namespace(t), kubetest.NodeName(t)
	ctx := kubetest.Context(t)
	pod, err := admin.CoreV1().Pods(ns).Create(ctx, sidecarPod(ns, node), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other := sidecarPod(ns, node)
	other.Name = "api"
	if other, err = admin.CoreV1().Pods(ns).Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var requests kubetest.Requests
	r := startRecorder(t, kevents.Options{Client: kubetest.ClientFor(t, requests.Wrap(cfg)), NodeName: node})
	for i := range 100 {
		r.Eventf(runtime.ContainerRef(pod, "app"), v1.EventTypeWarning, fmt.Sprintf("Reason%d", i), "Readiness probe failed: attempt %d", i)
	}
	r.Eventf(runtime.ContainerRef(other, "app"), v1.EventTypeWarning, manager.ReasonUnhealthy, "Readiness probe failed: %s", "boom")
	evs := admin.EventsV1().Events(ns)
	kubetest.Eventually(t, "26 events", func() bool { return len(listEvents(t, evs)) == 26 })
	perPod := map[string]int{}
	for _, e := range listEvents(t, evs) {
		perPod[e.Regarding.Name]++
	}
	if perPod["web"] != 25 || perPod["api"] != 1 {
		t.Errorf("events per pod = %v, want web 25, api 1", perPod)
	}
	if n := requests.Count("POST", "/events"); n != 26 {
		t.Errorf("%d event creates, want 26", n)
	}
	if d := r.Dropped(); d != 75 {
		t.Errorf("dropped %d, want 75", d)
	}
}

// Sending events needs exactly events.k8s.io events create
// and patch (the series patch); as a ServiceAccount holding only that, the
// event and its series arrive.
func TestEventsWithTheAgentsRBAC(t *testing.T) {
	cfg := kubetest.Config(t)
	admin := kubetest.ClientFor(t, cfg)
	ns, node := kubetest.Namespace(t), kubetest.NodeName(t)
	pod, err := admin.CoreV1().Pods(ns).Create(kubetest.Context(t), sidecarPod(ns, node), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kubetest.GrantRole(t, ns, "probed", []rbacv1.PolicyRule{{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}}})
	sa := kubetest.ServiceAccountConfig(t, ns, "probed")
	saClient := kubetest.ClientFor(t, sa)
	if _, err := saClient.CoreV1().Pods(ns).List(kubetest.Context(t), metav1.ListOptions{}); err == nil {
		t.Fatal("the ServiceAccount may list pods: the test's role is wider than events")
	}
	r := startRecorder(t, kevents.Options{Client: saClient, NodeName: node})
	for range 3 {
		r.Eventf(runtime.ContainerRef(pod, "app"), v1.EventTypeWarning, manager.ReasonUnhealthy, "%s probe failed: %s", "Liveness", "timeout")
	}
	kubetest.Eventually(t, "an event with a series, written as the ServiceAccount", func() bool {
		got := listEvents(t, admin.EventsV1().Events(ns))
		return len(got) == 1 && got[0].Series != nil && got[0].Series.Count >= 2
	})
}
