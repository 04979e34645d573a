package panicthreshold_test

// Against a real kube-apiserver (PROBED_TEST_KUBECONFIG; test/kube/env.sh
// start DIR): the test writes EndpointSlices as the EndpointSlice
// controller would, and calls the guard's one decision as the gate's
// writer does. The pods are the guard's input only (it reads none from the
// API server): their UIDs are the slices' targetRefs.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/probed/probed/agent/kube/gate"
	"github.com/probed/probed/agent/kube/panicthreshold"
	"github.com/probed/probed/agent/pods"
	"github.com/probed/probed/internal/kubetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreCurrent()) }

// recorder keeps the Events.
type recorder struct {
	mu     sync.Mutex
	events []string // "reason pod: message"
}

func (r *recorder) Eventf(obj k8sruntime.Object, _, reason, format string, args ...any) {
	ref := obj.(*v1.ObjectReference)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, reason+" "+ref.Name+": "+fmt.Sprintf(format, args...))
}

func (r *recorder) with(reason string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.events {
		if strings.HasPrefix(e, reason+" ") {
			out = append(out, e)
		}
	}
	return out
}

// service is a Service's pods and its one EndpointSlice on the server.
type service struct {
	t    *testing.T
	c    kubernetes.Interface
	ns   string
	name string
	pods []*v1.Pod
	// ready by pod index, as the slice says.
	ready []bool
}

// newService writes a slice of n ready endpoints; the pods carry
// annotation (none when "").
func newService(t *testing.T, c kubernetes.Interface, ns, name string, n int, annotation string) *service {
	s := &service{t: t, c: c, ns: ns, name: name}
	for i := range n {
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%d", name, i),
			UID: types.UID(fmt.Sprintf("%s-uid-%02d", name, i))}}
		if annotation != "" {
			pod.Annotations = map[string]string{panicthreshold.Annotation: annotation}
		}
		s.pods = append(s.pods, pod)
		s.ready = append(s.ready, true)
	}
	slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-abc",
		Labels: map[string]string{discoveryv1.LabelServiceName: name}}, AddressType: discoveryv1.AddressTypeIPv4}
	s.fill(slice)
	if _, err := c.DiscoveryV1().EndpointSlices(ns).Create(kubetest.Context(t), slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *service) fill(slice *discoveryv1.EndpointSlice) {
	slice.Endpoints = nil
	for i, pod := range s.pods {
		ready := s.ready[i]
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.0.%d.%d", len(s.name), i+1)},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready},
			TargetRef:  &v1.ObjectReference{Kind: "Pod", Namespace: s.ns, Name: pod.Name, UID: pod.UID}})
	}
}

// set writes the slice with the pods' readiness as ready says.
func (s *service) set(ready func(i int) bool) {
	for i := range s.pods {
		s.ready[i] = ready(i)
	}
	slice, err := s.c.DiscoveryV1().EndpointSlices(s.ns).Get(kubetest.Context(s.t), s.name+"-abc", metav1.GetOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	s.fill(slice)
	if _, err := s.c.DiscoveryV1().EndpointSlices(s.ns).Update(kubetest.Context(s.t), slice, metav1.UpdateOptions{}); err != nil {
		s.t.Fatal(err)
	}
}

var failed = gate.Condition{Known: true, Status: v1.ConditionFalse, Reason: gate.ReasonProbeFailed, Message: "readiness probe of container app failed"}
var passed = gate.Condition{Known: true, Status: v1.ConditionTrue, Reason: gate.ReasonProbeSucceeded, Message: gate.MessageProbesSucceeded}

type harness struct {
	g       *panicthreshold.Guard
	rec     *recorder
	reg     *prometheus.Registry
	mu      sync.Mutex
	requeue map[types.UID]int
}

func start(t *testing.T) *harness {
	h := &harness{rec: &recorder{}, reg: prometheus.NewRegistry(), requeue: map[types.UID]int{}}
	g, err := panicthreshold.New(panicthreshold.Options{Client: kubetest.Client(t), Recorder: h.rec, Registerer: h.reg,
		Requeue: func(uid types.UID) { h.mu.Lock(); h.requeue[uid]++; h.mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	h.g = g
	ctx, cancel := contextFor(t)
	done := make(chan struct{})
	go func() { _ = g.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return h
}

func (h *harness) requeued(uid types.UID) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.requeue[uid]
}

// listed decides pod until the slices are listed (the verdict is not
// known before).
func (h *harness) listed(t *testing.T, pod *v1.Pod) {
	kubetest.Eventually(t, "the EndpointSlices listed", func() bool { return h.g.Condition(pod, failed).Known })
}

// 10 endpoints at 50%: of 7 pods failing together, 5 flip and 2 are kept
// ready with the counts in the condition and one Event each; a second
// decision of the same pod (the writer plans twice) says the same and
// records nothing more; as the slice shows the failed pods out, the kept
// ones stay; when 3 recover in the slice the kept ones are let go as soon
// as the Service is above the threshold; a pod that recovers is forgotten.
func TestHoldsTheThresholdAndLetsGoWhenAbove(t *testing.T) {
	c := kubetest.Client(t)
	ns := kubetest.Namespace(t)
	svc := newService(t, c, ns, "web", 10, "50%")
	h := start(t)
	h.listed(t, svc.pods[9])
	h.g.Condition(svc.pods[9], passed) // the probe passes: not held, forgotten

	var flipped, held []int
	for i := range 7 {
		v := h.g.Condition(svc.pods[i], failed)
		if again := h.g.Condition(svc.pods[i], failed); again != v {
			t.Fatalf("pod %d decided twice: %+v then %+v", i, v, again)
		}
		switch {
		case v.Status == v1.ConditionFalse && v == failed:
			flipped = append(flipped, i)
		case v.Status == v1.ConditionTrue && v.Reason == panicthreshold.Reason:
			held = append(held, i)
			want := "readiness probe of container app failed; kept ready: Service " + ns + "/web has 4 of 10 endpoints ready without it, probed.io/panic-threshold=50% keeps 5"
			if v.Message != want {
				t.Errorf("message %q, want %q", v.Message, want)
			}
		default:
			t.Fatalf("pod %d: %+v", i, v)
		}
	}
	if fmt.Sprint(flipped) != "[0 1 2 3 4]" || fmt.Sprint(held) != "[5 6]" {
		t.Fatalf("flipped %v, held %v; want 5 flipped, 2 held", flipped, held)
	}
	if ev := h.rec.with(panicthreshold.Reason); len(ev) != 2 || !strings.Contains(ev[0], "web-5: Readiness probe failed, the pod is kept ready: Service "+ns+"/web has 4 of 10") {
		t.Errorf("events %q", ev)
	}
	if got := gauge(t, h.reg, "probed_panic_threshold_held_pods"); got != 2 {
		t.Errorf("probed_panic_threshold_held_pods %v, want 2", got)
	}
	if held := h.g.Held(); len(held) != 2 || held[0].Pod != "web-5" || !strings.Contains(held[0].Why, "4 of 10") {
		t.Errorf("Held() = %+v", held)
	}

	// The slice catches up: 0..4 not ready. The kept pods are decided
	// again (Requeue) and stay kept.
	svc.set(func(i int) bool { return i > 4 })
	kubetest.Eventually(t, "the kept pods requeued", func() bool { return h.requeued(svc.pods[5].UID) > 0 && h.requeued(svc.pods[6].UID) > 0 })
	if v := h.g.Condition(svc.pods[5], failed); v.Reason != panicthreshold.Reason {
		t.Fatalf("kept pod let go on the caught-up slice: %+v", v)
	}

	// Three of the flipped recover: 8 ready in the slice, of which 2 are
	// kept; the kept ones go as soon as each leaves 5.
	svc.set(func(i int) bool { return i > 1 })
	for _, i := range []int{2, 3, 4} {
		h.g.Condition(svc.pods[i], passed)
	}
	kubetest.Eventually(t, "the slice seen", func() bool { return h.g.Condition(svc.pods[5], failed) == failed })
	if v := h.g.Condition(svc.pods[6], failed); v != failed {
		t.Errorf("pod 6 still kept with 7 others ready: %+v", v)
	}
	if len(h.g.Held()) != 0 {
		t.Errorf("Held() = %+v after the Service recovered", h.g.Held())
	}
}

// A single failing pod flips at once; a pod without the annotation is
// never held; a pod in no slice flips.
func TestSingleFailureFlipsAtOnce(t *testing.T) {
	c := kubetest.Client(t)
	ns := kubetest.Namespace(t)
	svc := newService(t, c, ns, "api", 4, "50%")
	plain := newService(t, c, ns, "plain", 2, "")
	h := start(t)
	h.listed(t, svc.pods[3])
	h.g.Condition(svc.pods[3], passed)
	if v := h.g.Condition(svc.pods[0], failed); v != failed {
		t.Errorf("single failure held: %+v", v)
	}
	for range 3 {
		if v := h.g.Condition(plain.pods[0], failed); v != failed {
			t.Errorf("pod without the annotation held: %+v", v)
		}
	}
	lonely := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lonely", UID: "lonely-uid",
		Annotations: map[string]string{panicthreshold.Annotation: "100%"}}}
	if v := h.g.Condition(lonely, failed); v != failed {
		t.Errorf("pod of no Service held: %+v", v)
	}
	// A container not running is not a probe's failure: never held.
	notStarted := gate.Condition{Known: true, Status: v1.ConditionFalse, Reason: gate.ReasonContainerNotStarted, Message: "container app is not running"}
	if v := h.g.Condition(svc.pods[1], notStarted); v != notStarted {
		t.Errorf("a container not running held: %+v", v)
	}
}

// Another agent let pods go on the same stale count: the slice shows the
// Service below the threshold. This agent's pods let go are taken back in
// the order of the endpoints' UIDs, only as many as are missing.
func TestTakesBackInUIDOrderWhenBelow(t *testing.T) {
	c := kubetest.Client(t)
	ns := kubetest.Namespace(t)
	svc := newService(t, c, ns, "db", 10, "50%")
	h := start(t)
	h.listed(t, svc.pods[9])
	h.g.Condition(svc.pods[9], passed)
	// This agent's pods: 0, 2, 4, 6 (let go: the slice shows them ready
	// and others'); the others' pods 1, 3, 5 were let go by another node.
	for _, i := range []int{0, 2, 4, 6} {
		if v := h.g.Condition(svc.pods[i], failed); v != failed {
			t.Fatalf("pod %d: %+v", i, v)
		}
	}
	svc.set(func(i int) bool { return i > 6 })
	// Ready now: 7, 8, 9 → 3 of 10, 2 missing. Not ready in UID order: 0
	// (ours), 1, 2 (ours), 3, ... The first two are 0 and 1: this agent
	// takes back 0 only; 1 is the other node's.
	kubetest.Eventually(t, "the slice seen", func() bool { return h.g.Condition(svc.pods[0], failed).Reason == panicthreshold.Reason })
	for _, i := range []int{2, 4, 6} {
		if v := h.g.Condition(svc.pods[i], failed); v != failed {
			t.Errorf("pod %d taken back: %+v", i, v)
		}
	}
	if v := h.g.Condition(svc.pods[0], failed); !strings.Contains(v.Message, "has 3 of 10 endpoints ready without it") {
		t.Errorf("pod 0: %+v", v)
	}
}

// A new pod whose first readiness result is a Failure (W1) was never ready:
// it is never taken in to make up a Service below the threshold (a
// rollout's new pods would otherwise turn ready before their probe passed).
func TestNeverReadyIsNeverTaken(t *testing.T) {
	c := kubetest.Client(t)
	ns := kubetest.Namespace(t)
	svc := newService(t, c, ns, "new", 4, "100%")
	svc.set(func(i int) bool { return i == 3 })
	h := start(t)
	h.listed(t, svc.pods[3])
	h.g.Condition(svc.pods[3], passed)
	for range 2 {
		for i := range 3 {
			if v := h.g.Condition(svc.pods[i], failed); v != failed {
				t.Errorf("never-ready pod %d taken in: %+v", i, v)
			}
		}
	}
}

// Hostile values of the annotation (a tenant's text): malformed, negative,
// over 100%, huge are refused with one Warning Event per pod and value
// naming the annotation, and the pod flips as without it; "0%" never
// holds; "100%" and a count above the Service's size keep every endpoint;
// many opted-in pods of many Services cost one informer and a decision
// each.
func TestHostileThresholds(t *testing.T) {
	c := kubetest.Client(t)
	ns := kubetest.Namespace(t)
	h := start(t)
	bad := newService(t, c, ns, "bad", 6, "")
	for i, val := range []string{"abc", "-1", "-50%", "150%", strings.Repeat("9", 250_000), "1e9", "50%%"} {
		pod := bad.pods[i%len(bad.pods)].DeepCopy()
		pod.Annotations = map[string]string{panicthreshold.Annotation: val}
		for range 3 {
			if v := h.g.Condition(pod, failed); v != failed {
				t.Errorf("%.20q: %+v", val, v)
			}
		}
	}
	invalid := h.rec.with(panicthreshold.ReasonInvalid)
	if len(invalid) != 7 {
		t.Errorf("%d invalid events, want one per pod and value: %q", len(invalid), invalid)
	}
	for _, e := range invalid {
		if !strings.Contains(e, "annotation probed.io/panic-threshold: want a count") || len(e) > 300 {
			t.Errorf("event %.300q", e)
		}
	}

	zero := newService(t, c, ns, "zero", 3, "0%")
	all := newService(t, c, ns, "all", 3, "100%")
	huge := newService(t, c, ns, "huge", 3, "2147483647")
	h.listed(t, zero.pods[0])
	for _, s := range []*service{all, huge} {
		v := h.g.Condition(s.pods[0], failed)
		if v.Reason != panicthreshold.Reason || !strings.Contains(v.Message, "has 2 of 3 endpoints ready without it") || !strings.Contains(v.Message, "keeps 3") {
			t.Errorf("%s: %+v", s.name, v)
		}
	}
	for i := range 3 {
		if v := h.g.Condition(zero.pods[i], failed); v != failed {
			t.Errorf("0%% held pod %d: %+v", i, v)
		}
	}

	// A slice another tenant writes in its own namespace naming a pod of
	// this one (its UID as targetRef, every endpoint not ready) does not
	// make a Service of that pod.
	victim := newService(t, c, ns, "victim", 2, "50%")
	foreign := newService(t, c, kubetest.Namespace(t), "forged", 10, "")
	foreign.pods[0].UID = victim.pods[0].UID
	foreign.set(func(i int) bool { return i <= 1 })
	sentinel := foreign.pods[1].DeepCopy()
	sentinel.Annotations = map[string]string{panicthreshold.Annotation: "100%"}
	kubetest.Eventually(t, "the forged slice seen", func() bool {
		v := h.g.Condition(sentinel, failed)
		h.g.Condition(sentinel, passed) // forgotten: not let go on a slice not seen yet
		return v.Reason == panicthreshold.Reason && strings.Contains(v.Message, "has 1 of 10")
	})
	h.g.Condition(sentinel, passed)
	if v := h.g.Condition(victim.pods[0], failed); v != failed {
		t.Errorf("a forged slice of another namespace held the pod: %+v", v)
	}

	// Many at once: 50 Services of 20 endpoints, every pod failing.
	var many []*service
	for s := range 50 {
		many = append(many, newService(t, c, ns, fmt.Sprintf("many%d", s), 20, "25%"))
	}
	sentinel = many[len(many)-1].pods[0].DeepCopy()
	sentinel.Annotations[panicthreshold.Annotation] = "100%"
	kubetest.Eventually(t, "the slices seen", func() bool {
		held := h.g.Condition(sentinel, failed).Reason == panicthreshold.Reason
		h.g.Condition(sentinel, passed)
		return held
	})
	keptPerService := map[string]int{}
	for _, s := range many {
		for _, pod := range s.pods {
			if h.g.Condition(pod, failed).Reason == panicthreshold.Reason {
				keptPerService[s.name]++
			}
		}
	}
	for _, s := range many {
		if keptPerService[s.name] != 5 {
			t.Errorf("%s: %d kept, want 5 (25%% of 20)", s.name, keptPerService[s.name])
		}
	}
	// Removed pods are forgotten.
	for _, s := range many {
		for _, pod := range s.pods {
			h.g.PodRemoved(&pods.Pod{Pod: pod})
		}
	}
	for _, held := range h.g.Held() {
		if strings.HasPrefix(held.Pod, "many") {
			t.Fatalf("removed pod still held: %+v", held)
		}
	}
}

func contextFor(t *testing.T) (context.Context, context.CancelFunc) {
	return context.WithCancel(context.Background())
}

// gauge is the value of the registry's metric name.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
