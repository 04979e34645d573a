package evict_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/probed/probed/agent/actuate"
	"github.com/probed/probed/agent/events"
	"github.com/probed/probed/agent/kube/evict"
	"github.com/probed/probed/agent/kube/nsscope"
	"github.com/probed/probed/internal/kubetest"
	"github.com/probed/probed/internal/testlog"
	"github.com/probed/probed/runtime"
)

// evictEnv is an evicting Actuator against the real API server, on a fake
// clock, with its requests counted and its log kept.
type evictEnv struct {
	admin    kubernetes.Interface
	ns, node string
	clock    *testingclock.FakeClock
	requests *kubetest.Requests
	log      *testlog.Buffer
	events   *events.Recorder
	act      *actuate.Queue
}

func newEvictEnv(t *testing.T) *evictEnv {
	return newEvictEnvAs(t, func(admin *rest.Config, _ string) *rest.Config { return admin })
}

// newEvictEnvAs runs the Actuator with the config identity returns for the
// test's namespace, which is labelled for evictions (the default
// --liveness-action-namespaces).
func newEvictEnvAs(t *testing.T, identity func(admin *rest.Config, ns string) *rest.Config) *evictEnv {
	return newEvictEnvWith(t, identity, "", map[string]string{nsscope.LivenessActionsLabel: "enabled"})
}

// newEvictEnvWith is newEvictEnvAs with a namespace selector and the
// labels of the test's namespace.
func newEvictEnvWith(t *testing.T, identity func(admin *rest.Config, ns string) *rest.Config, selector string, nsLabels map[string]string) *evictEnv {
	t.Helper()
	cfg := kubetest.Config(t)
	e := &evictEnv{admin: kubetest.ClientFor(t, cfg), requests: &kubetest.Requests{}, log: &testlog.Buffer{},
		clock: testingclock.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))}
	e.ns, e.node = kubetest.Namespace(t), kubetest.NodeName(t)
	if nsLabels != nil {
		kubetest.LabelNamespace(t, e.ns, nsLabels)
	}
	e.events = events.New(1000, slog.New(slog.DiscardHandler), nil)
	// The agent's actuator of --liveness-action=evict: the queue around
	// the eviction step in the namespace scope.
	client := kubetest.ClientFor(t, e.requests.Wrap(identity(cfg, e.ns)))
	log := slog.New(slog.NewTextHandler(e.log, nil))
	step, err := evict.New(evict.Options{Client: client, Recorder: e.events, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	scope, err := nsscope.New(client, selector)
	if err != nil {
		t.Fatal(err)
	}
	act, err := actuate.New(actuate.Options{Step: nsscope.Guard(scope, step), Texts: evict.Texts, Recorder: e.events, Clock: e.clock,
		Services: []func(context.Context) error{scope.Run}, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	e.act = act
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := act.Run(ctx); err != nil {
			t.Error(err)
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
	return e
}

func (e *evictEnv) pod(t *testing.T, name string, mutate func(*v1.Pod)) *v1.Pod {
	t.Helper()
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: name, Labels: map[string]string{"app": name}},
		Spec:       v1.PodSpec{NodeName: e.node, Containers: []v1.Container{{Name: "app", Image: "example/app"}}},
	}
	if mutate != nil {
		mutate(p)
	}
	kubetest.CreatePod(t, e.admin, p)
	return kubetest.SetPodRunning(t, e.admin, p.Namespace, p.Name, true)
}

func (e *evictEnv) fail(p *v1.Pod, containerID string) {
	e.act.ContainerFailed(actuate.Failure{Pod: p, Container: "app", ContainerID: containerID, Probe: runtime.Liveness})
}

func (e *evictEnv) evictions(pod string) int {
	return e.requests.Count("POST", "/pods/"+pod+"/eviction")
}

func (e *evictEnv) terminating(t *testing.T, name string) bool {
	t.Helper()
	p, err := e.admin.CoreV1().Pods(e.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p.DeletionTimestamp != nil
}

// One Eviction per container instance. There is no kubelet,
// so the evicted pod stays with a deletionTimestamp (graceful deletion
// waits for a kubelet to confirm). Repeated reports of the same instance
// send nothing more; a report about the now terminating pod neither.
func TestEvictOncePerContainerInstance(t *testing.T) {
	e := newEvictEnv(t)
	p := e.pod(t, "web", nil)
	for range 10 {
		e.fail(p, "containerd://app-1")
	}
	kubetest.Eventually(t, "the pod terminating", func() bool { return e.terminating(t, "web") })
	kubetest.Eventually(t, "the Evicted event", func() bool {
		for _, ev := range e.events.List() {
			if ev.Reason == evict.ReasonEvicted && ev.FieldPath == "spec.containers{app}" && ev.Message == "Evicted the pod: container app failed liveness probe" {
				return true
			}
		}
		return false
	})
	if n := e.evictions("web"); n != 1 {
		t.Fatalf("%d eviction requests, want 1 (requests %v)", n, e.requests.All())
	}
	got, err := e.admin.CoreV1().Pods(e.ns).Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.fail(got, "containerd://app-2") // a new instance, but the pod is terminating
	e.fail(p, "containerd://app-1")
	if n := e.evictions("web"); n != 1 {
		t.Fatalf("%d eviction requests after repeats, want 1", n)
	}
	if e.requests.Count("DELETE") != 0 {
		t.Fatal("a plain delete was sent")
	}
}

// A PodDisruptionBudget that allows no disruption makes the
// server answer 429; the actuator logs it and retries with backoff (at least
// the server's Retry-After), and evicts once the budget is gone.
func TestPDBBlocksEvictionUntilAllowed(t *testing.T) {
	e := newEvictEnv(t)
	p := e.pod(t, "db", nil)
	zero := intstr.FromInt32(0)
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "db"},
		Spec:       policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &zero, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}},
	}
	if _, err := e.admin.PolicyV1().PodDisruptionBudgets(e.ns).Create(kubetest.Context(t), pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const refused = "eviction refused (a PodDisruptionBudget allows no disruption now), will retry"
	e.fail(p, "containerd://app-1")
	kubetest.Eventually(t, "a 429 logged", func() bool { return e.log.Count(refused) == 1 })
	if n := e.evictions("db"); n != 1 {
		t.Fatalf("%d eviction requests before the backoff passed, want 1", n)
	}
	e.clock.Step(actuate.DefaultRetryMax) // past any backoff and Retry-After
	kubetest.Eventually(t, "a second 429 logged", func() bool { return e.log.Count(refused) == 2 })
	if e.terminating(t, "db") {
		t.Fatal("evicted through a budget that allows no disruption")
	}
	if err := e.admin.PolicyV1().PodDisruptionBudgets(e.ns).Delete(kubetest.Context(t), "db", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.clock.Step(actuate.DefaultRetryMax)
	kubetest.Eventually(t, "the pod terminating", func() bool { return e.terminating(t, "db") })
	if n := e.evictions("db"); n != 3 {
		t.Fatalf("%d eviction requests, want 3 (429, 429, evicted)", n)
	}
	// The first retry waits the server's Retry-After (10 s), longer than
	// the first backoff (5 s).
	for _, line := range strings.Split(e.log.String(), "\n") {
		if strings.Contains(line, refused) && !strings.Contains(line, " in=10s ") {
			t.Errorf("retry line %q does not wait the server's Retry-After (10 s)", line)
		}
	}
}

// DaemonSet, static and mirror pods are never evicted: no
// eviction request is sent (counted), and the Event says why. A plain pod
// failing after them is evicted (the worker is serial, so the exempt pods'
// requests would have come first).
func TestExemptPodsAreNeverEvicted(t *testing.T) {
	e := newEvictEnv(t)
	ds := e.pod(t, "agent", func(p *v1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent", UID: "ds-uid", Controller: ptr.To(true)}}
	})
	static := e.pod(t, "etcd", func(p *v1.Pod) { p.Annotations = map[string]string{evict.ConfigSourceAnnotation: "file"} })
	mirror := e.pod(t, "apiserver", func(p *v1.Pod) {
		p.Annotations = map[string]string{evict.ConfigSourceAnnotation: "file", evict.ConfigMirrorAnnotation: "0123abcd"}
	})
	plain := e.pod(t, "web", nil)
	for _, p := range []*v1.Pod{ds, static, mirror, plain} {
		e.fail(p, "containerd://"+p.Name)
	}
	kubetest.Eventually(t, "the plain pod terminating", func() bool { return e.terminating(t, "web") })
	if n := e.requests.Count("/eviction"); n != 1 || e.evictions("web") != 1 {
		t.Fatalf("%d eviction requests, want only the plain pod's (requests %v)", n, e.requests.All())
	}
	for _, p := range []*v1.Pod{ds, static, mirror} {
		if e.terminating(t, p.Name) {
			t.Errorf("pod %s was evicted", p.Name)
		}
	}
	why := map[string]string{}
	for _, ev := range e.events.List() {
		if strings.Contains(ev.Message, "not evicted") {
			why[ev.Pod] = ev.Message
		}
	}
	for pod, want := range map[string]string{"agent": "DaemonSet pod", "etcd": "static pod (source file)", "apiserver": "mirror pod"} {
		if !strings.Contains(why[pod], want) {
			t.Errorf("event of %s = %q, want it to say %q", pod, why[pod], want)
		}
	}
}

// The rate bound per node against the real server: 5 pods
// failing at once get 3 evictions (the burst); the 4th and 5th wait for
// tokens, one per 10 s of the (fake) clock.
func TestEvictionRateBoundPerNode(t *testing.T) {
	e := newEvictEnv(t)
	var pods []*v1.Pod
	for i := range 5 {
		pods = append(pods, e.pod(t, fmt.Sprintf("web-%d", i), nil))
	}
	for _, p := range pods {
		e.fail(p, "containerd://"+p.Name)
	}
	evicted := func() int {
		n := 0
		for _, p := range pods {
			if e.terminating(t, p.Name) {
				n++
			}
		}
		return n
	}
	kubetest.Eventually(t, "3 evictions", func() bool { return evicted() == 3 })
	if n := e.requests.Count("/eviction"); n != 3 {
		t.Fatalf("%d eviction requests with the clock still, want 3 (the burst)", n)
	}
	for want := 4; want <= 5; want++ {
		e.clock.Step(actuate.DefaultInterval)
		kubetest.Eventually(t, fmt.Sprintf("%d evictions", want), func() bool { return evicted() == want })
		if n := e.requests.Count("/eviction"); n != want {
			t.Fatalf("%d eviction requests after %d intervals, want %d", n, want-3, want)
		}
	}
}

// Eviction needs pods/eviction create and, since the
// namespace scope, reading the namespaces' labels: as the agent's identity with the RBAC
// of deploy/kubernetes (options/clusterrole-eviction.yaml included), the pod is
// evicted. Without pods/eviction the server refuses (403): retried
// MaxAttempts (5) times, then an EvictionFailed Event.
func TestEvictionWithTheAgentsRBAC(t *testing.T) {
	readNamespaces := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list", "watch"}}}
	t.Run("allowed", func(t *testing.T) {
		e := newEvictEnvAs(t, func(admin *rest.Config, ns string) *rest.Config {
			return kubetest.AgentConfigWithEviction(t)
		})
		p := e.pod(t, "web", nil)
		e.fail(p, "containerd://app-1")
		kubetest.Eventually(t, "the pod terminating", func() bool { return e.terminating(t, "web") })
	})
	t.Run("denied", func(t *testing.T) {
		e := newEvictEnvAs(t, func(admin *rest.Config, ns string) *rest.Config {
			kubetest.GrantClusterRole(t, ns, "probed", readNamespaces)
			return kubetest.ServiceAccountConfig(t, ns, "probed")
		})
		p := e.pod(t, "web", nil)
		e.fail(p, "containerd://app-1")
		for attempt := 1; attempt < actuate.DefaultMaxAttempts; attempt++ {
			kubetest.Eventually(t, fmt.Sprintf("failure %d logged", attempt), func() bool { return e.log.Count("eviction failed, will retry") == attempt })
			e.clock.Step(actuate.DefaultRetryMax)
		}
		kubetest.Eventually(t, "the EvictionFailed event", func() bool {
			for _, ev := range e.events.List() {
				if ev.Reason == evict.ReasonEvictionFailed && strings.Contains(ev.Message, "after 5 attempts") && strings.Contains(ev.Message, "forbidden") {
					return true
				}
			}
			return false
		})
		if n := e.evictions("web"); n != actuate.DefaultMaxAttempts {
			t.Errorf("%d eviction requests, want %d", n, actuate.DefaultMaxAttempts)
		}
		if e.terminating(t, "web") {
			t.Error("evicted without the permission")
		}
	})
}

// --liveness-action=evict acts only in the namespaces the
// selector picks (default: labelled probed.io/liveness-actions=enabled).
// A failure in another namespace sends no eviction request and records one
// Event that says why nothing was done; labelling the namespace later
// allows the next failed instance to be evicted; removing the label again
// stops an eviction already queued (the worker checks before sending).
func TestEvictOnlyInSelectedNamespaces(t *testing.T) {
	const why = "is not selected by --liveness-action-namespaces=probed.io/liveness-actions=enabled (label the namespace to allow liveness actions)"
	e := newEvictEnvWith(t, func(admin *rest.Config, _ string) *rest.Config { return admin }, "", nil)
	p := e.pod(t, "web", nil)
	e.fail(p, "containerd://app-1")
	kubetest.Eventually(t, "the Event saying why the pod is not evicted", func() bool {
		for _, ev := range e.events.List() {
			if ev.Reason == evict.ReasonLivenessProbeFailed && ev.Message == "Container app failed liveness probe; the pod is not evicted: namespace "+e.ns+" "+why {
				return true
			}
		}
		return false
	})
	if n := e.requests.Count("/eviction"); n != 0 || e.terminating(t, "web") {
		t.Fatalf("%d eviction requests in a namespace not selected", n)
	}

	kubetest.LabelNamespace(t, e.ns, map[string]string{nsscope.LivenessActionsLabel: "enabled"})
	// The informer sees the label a moment later: fail a new instance
	// until one is evicted, giving each time to be (a refused instance is
	// refused at once, with its Event, and never requested later).
	deadline := time.Now().Add(kubetest.Timeout)
	for i := 2; !e.terminating(t, "web"); i++ {
		if time.Now().After(deadline) {
			t.Fatal("the pod was not evicted once its namespace was labelled")
		}
		e.fail(p, fmt.Sprintf("containerd://app-%d", i))
		for wait := time.Now().Add(2 * time.Second); time.Now().Before(wait) && !e.terminating(t, "web"); {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if n := e.evictions("web"); n != 1 {
		t.Fatalf("%d eviction requests, want 1", n)
	}
}

// Another selector (--liveness-action-namespaces=team=a) picks
// other namespaces; a namespace whose label was removed after the failure
// was queued is not evicted (the worker checks again).
func TestEvictNamespaceSelectorAndLabelRemoved(t *testing.T) {
	e := newEvictEnvWith(t, func(admin *rest.Config, _ string) *rest.Config { return admin }, "team=a", map[string]string{"team": "a"})
	// The default label means nothing with another selector.
	other := e.pod(t, "web", nil)
	e.fail(other, "containerd://app-1")
	kubetest.Eventually(t, "evicted under team=a", func() bool { return e.terminating(t, "web") })

	// Hold the node's bucket empty so the next eviction waits in the queue.
	var pods []*v1.Pod
	for i := range 3 {
		pods = append(pods, e.pod(t, fmt.Sprintf("db-%d", i), nil))
	}
	for _, p := range pods {
		e.fail(p, "containerd://"+p.Name)
	}
	kubetest.Eventually(t, "two more evictions (the burst of 3 spent)", func() bool { return e.requests.Count("/eviction") == 3 })
	kubetest.LabelNamespace(t, e.ns, map[string]string{"team": "b"})
	// A failure of another pod is refused at once once the informer has
	// seen the change.
	marker := e.pod(t, "marker", nil)
	kubetest.Eventually(t, "the label change seen", func() bool {
		e.fail(marker, fmt.Sprintf("containerd://marker-%d", time.Now().UnixNano()))
		for _, ev := range e.events.List() {
			if ev.Pod == "marker" && strings.Contains(ev.Message, "the pod is not evicted") {
				return true
			}
		}
		return false
	})
	e.clock.Step(actuate.DefaultInterval)
	kubetest.Eventually(t, "the queued eviction dropped with an Event", func() bool {
		for _, ev := range e.events.List() {
			if ev.Pod == "db-2" && strings.Contains(ev.Message, "the pod is not evicted: namespace "+e.ns+" is not selected by --liveness-action-namespaces=team=a") {
				return true
			}
		}
		return false
	})
	if n := e.requests.Count("/eviction"); n != 3 || e.terminating(t, "db-2") {
		t.Fatalf("%d eviction requests, want 3: the queued one was sent after the label was removed", n)
	}
}
