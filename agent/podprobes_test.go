package agent_test

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/probed/probed/agent/events"
	"github.com/probed/probed/agent/kube/kevents"
	"github.com/probed/probed/agent/output"
	"github.com/probed/probed/agent/statusview"
	"github.com/probed/probed/internal/kubetest"
	"github.com/probed/probed/internal/nettest"
	"github.com/probed/probed/manager/customprobe"
)

// views counts the pods' annotations read since start (customprobe.Reads:
// wherever it is parsed, by podprobes.Of or anyone else); the agent tests
// do not run in parallel.
func views(start uint64) uint64 { return customprobe.Reads() - start }

// holdViews checks, for the given time, that no view is worked out beyond
// want while the agent runs: its periodic pod syncs, status changes,
// condition writes and the reads of its API and page cost no parse.
func holdViews(t *testing.T, start, want uint64, d time.Duration, meanwhile func()) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if meanwhile != nil {
			meanwhile()
		}
		if n := views(start); n != want {
			t.Fatalf("the pods' annotations were read %d times, want %d", n, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestClusterProbesWorkedOutOncePerPodAndSpec (cluster mode, a real API
// server): a pod's probes are worked out once when it comes and once per
// change of its spec or annotation, whatever else happens — kubelet status
// writes, the gate's condition writes, periodic pod syncs (every second
// here), the page, GET .../probes and `probed status` — and a label change
// (not the spec) works out nothing. Every consumer reads that one view: the
// gate follows the valid readiness probe, the refused exec probe is shown
// refused with its reason, and the failing probe's Events say it is the
// annotation's (label probed.io/probe-origin on the API server's Events,
// origin in the agent's ring and health-event log, `probed status`).
func TestClusterProbesWorkedOutOncePerPodAndSpec(t *testing.T) {
	admin := kubetest.Client(t)
	cfg := kubetest.AgentConfig(t)
	ns, node := kubetest.Namespace(t), kubetest.NodeName(t)
	up, down := newSwitchableTarget(t), newSwitchableTarget(t)
	down.close()
	good := kubetest.NewPod(ns, "good", node, "app")
	good.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: gateType}}
	good.Annotations = map[string]string{customprobe.Annotation: fmt.Sprintf(`[
		{"container":"app","type":"readiness","periodSeconds":1,"tcpSocket":{"port":%d}},
		{"container":"app","type":"liveness","exec":{"command":["true"]}}]`, up.port)}
	kubetest.CreatePod(t, admin, good)
	kubetest.SetPodRunning(t, admin, ns, "good", true)
	failing := kubetest.NewPod(ns, "failing", node, "app")
	failing.Annotations = map[string]string{customprobe.Annotation: fmt.Sprintf(
		`[{"container":"app","type":"readiness","periodSeconds":1,"failureThreshold":1,"tcpSocket":{"port":%d}}]`, down.port)}
	kubetest.CreatePod(t, admin, failing)
	kubetest.SetPodRunning(t, admin, ns, "failing", true)

	start := customprobe.Reads()
	r := startClusterAgent(t, cfg, node, nil)
	cond := waitGate(t, admin, ns, "good", v1.ConditionTrue)
	if cond.Reason != "ProbeSucceeded" {
		t.Errorf("gate reason %q: the refused liveness probe must not hold readiness back", cond.Reason)
	}
	status := func(format output.Format) string {
		var buf bytes.Buffer
		if err := statusview.Print(context.Background(), statusview.Options{Server: r.base, Output: format}, &buf); err != nil {
			t.Fatal(err)
		}
		return buf.String()
	}
	// Two pods, two views; nothing else parses while the agent runs.
	holdViews(t, start, 2, 3*time.Second, func() {
		r.getPage("/")
		r.getPage("/pod/" + ns + "/good")
		status(output.Wide)
		kubetest.PatchPodStatus(t, admin, ns, "good", func(s *v1.PodStatus) { s.ContainerStatuses[0].RestartCount++ })
	})

	// What every reader shows comes from the views.
	st, err := statusview.Fetch(context.Background(), statusview.Options{Server: r.base})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range st.Pods {
		if p.Name != "good" {
			continue
		}
		if len(p.Probes) != 1 || p.Probes[0].Type != "readiness" || p.Probes[0].Origin != "annotation" {
			t.Errorf("good's probes %+v: want its annotation readiness probe", p.Probes)
		}
		if len(p.Refused) != 1 || p.Refused[0].Container != "app" || p.Refused[0].Type != "liveness" || p.Refused[0].Origin != "annotation" ||
			p.Refused[0].Field != "metadata.annotations[probed.io/probes][1].exec" || !strings.Contains(p.Refused[0].Reason, "need the container runtime") {
			t.Errorf("good's refused probes %+v", p.Refused)
		}
	}
	if wide := status(output.Wide); !strings.Contains(wide, "annotation:app/readiness=success,annotation:app/liveness=refused") {
		t.Errorf("probed status -o wide does not show the origins and the refused probe:\n%s", wide)
	}

	// The failing probe's Events say where it is declared.
	var labelled []string
	kubetest.Eventually(t, "a labelled Unhealthy Event of the failing pod", func() bool {
		list, err := admin.EventsV1().Events(ns).List(kubetest.Context(t), metav1.ListOptions{LabelSelector: kevents.LabelOrigin + "=annotation"})
		if err != nil {
			t.Fatal(err)
		}
		labelled = labelled[:0]
		for _, ev := range list.Items {
			if ev.Regarding.Name == "failing" && ev.Reason == "Unhealthy" {
				labelled = append(labelled, ev.Note)
			}
		}
		return len(labelled) > 0
	})
	ring := false
	for _, ev := range r.events() {
		if ev.Pod == "failing" && ev.Reason == "Unhealthy" {
			ring = true
			if ev.Origin != "annotation" {
				t.Errorf("ring event %+v: origin %q, want annotation", ev, ev.Origin)
			}
		}
	}
	if !ring {
		t.Error("no Unhealthy event of the failing pod in the agent's ring")
	}
	var trans events.TransitionList
	r.get("/events?type=transition", &trans)
	for _, tr := range trans.Transitions {
		if tr.Origin != "annotation" {
			t.Errorf("transition %+v: origin %q", tr, tr.Origin)
		}
	}
	if len(trans.Transitions) == 0 {
		t.Error("no transition")
	}

	// A changed annotation is a changed spec: one more view; a label is
	// not.
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, customprobe.Annotation,
		fmt.Sprintf(`[{"container":"app","type":"readiness","periodSeconds":2,"tcpSocket":{"port":%d}}]`, up.port))
	if _, err := admin.CoreV1().Pods(ns).Patch(kubetest.Context(t), "good", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	r.eventually("the changed annotation worked out", func() bool { return views(start) == 3 })
	r.eventually("the refused probe gone with the old annotation", func() bool {
		st, err := statusview.Fetch(context.Background(), statusview.Options{Server: r.base})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range st.Pods {
			if p.Name == "good" {
				return len(p.Refused) == 0
			}
		}
		return false
	})
	if _, err := admin.CoreV1().Pods(ns).Patch(kubetest.Context(t), "good", types.MergePatchType, []byte(`{"metadata":{"labels":{"tier":"web"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// A status write after it: once the agent shows it, it has handled the
	// label's event too (the informer's events come in order).
	after := kubetest.PatchPodStatus(t, admin, ns, "good", func(s *v1.PodStatus) { s.ContainerStatuses[0].RestartCount = 1000 })
	r.eventually("the status written after the label", func() bool {
		cs, ok := container(r.pods()[ns+"/good"], "app")
		return ok && cs.RestartCount == after.Status.ContainerStatuses[0].RestartCount
	})
	holdViews(t, start, 3, 2*time.Second, func() { r.getPage("/") })
}

// TestAgent_ProbesWorkedOutOncePerDocument (manifest mode): a pod's probes
// are worked out as its document is decoded, once per version of the
// document, not on every rescan (every 500 ms here) or pod sync; `probed
// status` and the events say which probe is the spec's and which the
// annotation's.
func TestAgent_ProbesWorkedOutOncePerDocument(t *testing.T) {
	tg := nettest.NewTarget(t)
	tg.Set("/fail", 500)
	tcp := nettest.AcceptAndClose(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "web.yaml")
	doc := func(period int) string {
		return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: shop
  annotations:
    probed.io/probes: '[{"container":"app","type":"liveness","periodSeconds":%d,"tcpSocket":{"port":%d}}]'
spec:
  containers:
  - name: app
    image: app
    readinessProbe:
      httpGet: {path: /fail, port: %d}
      periodSeconds: 1
`, period, tcp, tg.Port)
	}
	writeFile(t, path, doc(1))
	start := customprobe.Reads()
	r := startAgent(t, dir, nil)
	r.eventually("both probes ran", func() bool {
		var buf bytes.Buffer
		if err := statusview.Print(context.Background(), statusview.Options{Server: r.base, Output: output.Wide}, &buf); err != nil {
			t.Fatal(err)
		}
		return strings.Contains(buf.String(), "annotation:app/liveness=success,spec:app/readiness=failure")
	})
	holdViews(t, start, 1, 2*time.Second, func() { r.getPage("/") })
	found := false
	for _, ev := range r.events() {
		if ev.Pod == "web" && ev.Reason == "Unhealthy" {
			found = true
			if ev.Origin != "spec" || ev.Message != "Readiness probe failed: HTTP probe failed with statuscode: 500" {
				t.Errorf("event %+v: want the kubelet's text with origin spec", ev)
			}
		}
	}
	if !found {
		t.Error("no Unhealthy event of the spec's readiness probe")
	}

	writeFile(t, path, doc(2))
	r.eventually("the new document worked out", func() bool { return views(start) == 2 })
	holdViews(t, start, 2, 1500*time.Millisecond, nil)
}

// TestClusterOffloadedProbes (cluster mode, a real API server): the
// probes of a pod's probed.io/offloaded record, as the offload webhook
// writes it, are probed's: the gate follows the offloaded readiness probe;
// the failing one's Events have the kubelet's text ("Readiness probe
// failed: ..." — no threshold counts: a spec probe in meaning) and the
// label probed.io/probe-origin=offloaded; `probed status` says offloaded;
// a changed record is read again (it is part of the pod's spec hash).
func TestClusterOffloadedProbes(t *testing.T) {
	admin := kubetest.Client(t)
	cfg := kubetest.AgentConfig(t)
	ns, node := kubetest.Namespace(t), kubetest.NodeName(t)
	up, down := newSwitchableTarget(t), newSwitchableTarget(t)
	down.close()
	record := func(port, period int) string {
		return fmt.Sprintf(`[{"container":"app","type":"readiness","probe":{"tcpSocket":{"port":%d},"timeoutSeconds":1,"periodSeconds":%d,"successThreshold":1,"failureThreshold":1}}]`, port, period)
	}
	for _, p := range []struct {
		name string
		port int
	}{{"good", up.port}, {"failing", down.port}} {
		pod := kubetest.NewPod(ns, p.name, node, "app")
		pod.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: gateType}}
		pod.Annotations = map[string]string{customprobe.OffloadedAnnotation: record(p.port, 1)}
		kubetest.CreatePod(t, admin, pod)
		kubetest.SetPodRunning(t, admin, ns, p.name, true)
	}
	start := customprobe.Reads()
	r := startClusterAgent(t, cfg, node, nil)
	waitGate(t, admin, ns, "good", v1.ConditionTrue)
	waitGate(t, admin, ns, "failing", v1.ConditionFalse)

	var notes []string
	kubetest.Eventually(t, "an Unhealthy Event of the failing pod labelled offloaded", func() bool {
		list, err := admin.EventsV1().Events(ns).List(kubetest.Context(t), metav1.ListOptions{LabelSelector: kevents.LabelOrigin + "=offloaded"})
		if err != nil {
			t.Fatal(err)
		}
		notes = notes[:0]
		for _, ev := range list.Items {
			if ev.Regarding.Name == "failing" && ev.Reason == "Unhealthy" {
				notes = append(notes, ev.Note)
			}
		}
		return len(notes) > 0
	})
	for _, n := range notes {
		if !strings.HasPrefix(n, "Readiness probe failed: ") || strings.Contains(n, "threshold") {
			t.Errorf("Event note %q: want the kubelet's text", n)
		}
	}
	var buf bytes.Buffer
	if err := statusview.Print(context.Background(), statusview.Options{Server: r.base, Output: output.Wide}, &buf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "offloaded:app/readiness=success") || !strings.Contains(buf.String(), "offloaded:app/readiness=failure") {
		t.Errorf("probed status -o wide does not say offloaded:\n%s", buf.String())
	}

	seen := views(start)
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, customprobe.OffloadedAnnotation, record(up.port, 2))
	if _, err := admin.CoreV1().Pods(ns).Patch(kubetest.Context(t), "failing", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	r.eventually("the changed record read again", func() bool { return views(start) > seen })
	waitGate(t, admin, ns, "failing", v1.ConditionTrue)
}
