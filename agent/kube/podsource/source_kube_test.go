package podsource

// Tests against the real kube-apiserver and etcd (PROBED_TEST_KUBECONFIG;
// skipped without). There is no kubelet: the tests write pod statuses
// through the status subresource as the kubelet would.

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"

	"github.com/probed/probed/agent/health"
	"github.com/probed/probed/agent/pods"
	"github.com/probed/probed/agent/reconciler"
	"github.com/probed/probed/agent/verdicts"
	"github.com/probed/probed/internal/kubetest"
	"github.com/probed/probed/manager"
	"github.com/probed/probed/manager/customprobe"
	"github.com/probed/probed/manager/results"
)

// recorder is the reconciler-shaped callback: it keeps every Update.
type recorder struct {
	mu      sync.Mutex
	updates []pods.Update
}

func (r *recorder) apply(u pods.Update) {
	r.mu.Lock()
	r.updates = append(r.updates, u)
	r.mu.Unlock()
}

// events returns "OP name" for every pod of every update so far.
func (r *recorder) events() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, u := range r.updates {
		for _, p := range u.Pods {
			out = append(out, u.Op.String()+" "+p.Pod.Name)
		}
	}
	return out
}

// last returns the last pod delivered for name and its op.
func (r *recorder) last(name string) (*pods.Pod, pods.Op, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.updates) - 1; i >= 0; i-- {
		for _, p := range r.updates[i].Pods {
			if p.Pod.Name == name {
				return p, r.updates[i].Op, true
			}
		}
	}
	return nil, 0, false
}

func (r *recorder) seen(name string) bool { _, _, ok := r.last(name); return ok }

// runSource runs a Source for node until the test ends and waits for its
// initial sync.
func runSource(t *testing.T, cfg *rest.Config, node string, apply func(pods.Update)) *Source {
	t.Helper()
	// As the agent's client: no overall request timeout, which would cut
	// every watch after it (the reflector bounds its watches itself).
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = 0
	s, err := New(Options{Client: kubetest.ClientFor(t, cfg), NodeName: node, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s.Run(ctx, apply) }()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	kubetest.Eventually(t, "the informer's initial sync", s.HasSynced)
	return s
}

// TestSourceSeesOnlyThisNodesPods: the field selector spec.nodeName=NODE
// keeps other nodes' pods out, before and after the initial list.
func TestSourceSeesOnlyThisNodesPods(t *testing.T) {
	cfg := kubetest.Config(t)
	c := kubetest.ClientFor(t, cfg)
	ns := kubetest.Namespace(t)
	mine, other := kubetest.NodeName(t), kubetest.NodeName(t)
	kubetest.CreatePod(t, c, kubetest.NewPod(ns, "mine-before", mine, "app"))
	kubetest.CreatePod(t, c, kubetest.NewPod(ns, "other-before", other, "app"))

	rec := &recorder{}
	runSource(t, cfg, mine, rec.apply)
	if !rec.seen("mine-before") {
		t.Fatal("synced without this node's pod")
	}
	kubetest.CreatePod(t, c, kubetest.NewPod(ns, "other-after", other, "app"))
	kubetest.SetPodRunning(t, c, ns, "other-before", false)
	kubetest.CreatePod(t, c, kubetest.NewPod(ns, "mine-after", mine, "app")) // written after the other node's changes
	kubetest.Eventually(t, "mine-after", func() bool { return rec.seen("mine-after") })
	for _, e := range rec.events() {
		if e != "UPSERT mine-before" && e != "UPSERT mine-after" {
			t.Errorf("update for a pod of another node or unexpected: %s", e)
		}
	}
}

// TestSourceDeliversAddUpdateDeleteInOrder: create, the kubelet's status
// write, an annotation change, the start of graceful deletion and the final
// removal reach the callback in order, with the hashes the reconciler
// decides on.
func TestSourceDeliversAddUpdateDeleteInOrder(t *testing.T) {
	cfg := kubetest.Config(t)
	c := kubetest.ClientFor(t, cfg)
	ns, node := kubetest.Namespace(t), kubetest.NodeName(t)
	rec := &recorder{}
	runSource(t, cfg, node, rec.apply)
	ctx := kubetest.Context(t)

	pod := kubetest.NewPod(ns, "web", node, "app")
	pod.Annotations = map[string]string{customprobe.Annotation: `[{"container":"app","type":"readiness","plugin":{"name":"x"}}]`}
	kubetest.CreatePod(t, c, pod)
	kubetest.Eventually(t, "the add", func() bool { return len(rec.events()) == 1 })
	added, _, _ := rec.last("web")

	kubetest.SetPodRunning(t, c, ns, "web", false)
	kubetest.Eventually(t, "the status write", func() bool { return len(rec.events()) == 2 })
	running, _, _ := rec.last("web")
	if running.SpecHash != added.SpecHash || running.StatusHash == added.StatusHash {
		t.Fatalf("status write: spec hash %s→%s, status hash %s→%s; want only the status hash to move",
			added.SpecHash, running.SpecHash, added.StatusHash, running.StatusHash)
	}
	if running.Pod.Status.ContainerStatuses[0].ContainerID == "" || running.Pod.UID != added.Pod.UID {
		t.Fatalf("status write not delivered: %+v", running.Pod.Status)
	}

	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, customprobe.Annotation, `[{"container":"app","type":"liveness","plugin":{"name":"x"}}]`)
	if _, err := c.CoreV1().Pods(ns).Patch(ctx, "web", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	kubetest.Eventually(t, "the annotation change", func() bool { return len(rec.events()) == 3 })
	changed, _, _ := rec.last("web")
	if changed.SpecHash == running.SpecHash {
		t.Fatal("a changed probed.io/probes annotation kept the spec hash: its probes would not be replaced")
	}

	// Graceful deletion: the server sets deletionTimestamp and waits for
	// the kubelet; then the kubelet's final delete (grace 0) removes it.
	if err := c.CoreV1().Pods(ns).Delete(ctx, "web", metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(30))}); err != nil {
		t.Fatal(err)
	}
	kubetest.Eventually(t, "the deletion request", func() bool { return len(rec.events()) == 4 })
	deleting, op, _ := rec.last("web")
	if op != pods.Upsert || deleting.Pod.DeletionTimestamp == nil || deleting.SpecHash == changed.SpecHash {
		t.Fatalf("deletion request: %v, deletionTimestamp %v; want an Upsert with a new spec hash (W5.7)", op, deleting.Pod.DeletionTimestamp)
	}
	if err := c.CoreV1().Pods(ns).Delete(ctx, "web", metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}); err != nil {
		t.Fatal(err)
	}
	// The server may first write the shortened grace period (one more
	// update) before it removes the pod.
	kubetest.Eventually(t, "the removal", func() bool { _, op, _ := rec.last("web"); return op == pods.Remove })
	got := rec.events()
	for i, e := range got {
		if want := "UPSERT web"; i == len(got)-1 {
			want = "REMOVE web"
			if e != want {
				t.Fatalf("updates %v: the last is not the removal", got)
			}
		} else if e != want {
			t.Fatalf("updates %v: want upserts, then one removal", got)
		}
	}

	// A pod that completes is removed (its workers would end, W5.2).
	kubetest.CreatePod(t, c, kubetest.NewPod(ns, "job", node, "app"))
	kubetest.SetPodRunning(t, c, ns, "job", false)
	kubetest.PatchPodStatus(t, c, ns, "job", func(s *v1.PodStatus) {
		s.Phase = v1.PodSucceeded
		cs := &s.ContainerStatuses[0]
		cs.State = v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", StartedAt: cs.State.Running.StartedAt, FinishedAt: metav1.Now(), ContainerID: cs.ContainerID}}
		cs.Started, cs.Ready = ptr(false), false
	})
	kubetest.Eventually(t, "the completed pod's removal", func() bool { _, op, ok := rec.last("job"); return ok && op == pods.Remove })
}

// TestTransformDropsManagedFieldsFromTheCache: the server's object has
// managedFields (one entry per writer: the creator and the kubelet's status
// write); the informer's cached object has none, nor the last-applied
// annotation or the labels, but keeps what probed reads.
func TestTransformDropsManagedFieldsFromTheCache(t *testing.T) {
	cfg := kubetest.Config(t)
	c := kubetest.ClientFor(t, cfg)
	ns, node := kubetest.Namespace(t), kubetest.NodeName(t)
	pod := kubetest.NewPod(ns, "web", node, "app")
	pod.Annotations = map[string]string{lastApplied: `{"kind":"Pod"}`, customprobe.Annotation: "[]"}
	pod.Labels = map[string]string{"app": "web"}
	pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1", UID: "8e9f4a34-0000-0000-0000-000000000001", Controller: ptr(true)}}
	pod.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: "probed.io/ready"}}
	kubetest.CreatePod(t, c, pod)
	onServer := kubetest.SetPodRunning(t, c, ns, "web", false)
	if len(onServer.ManagedFields) == 0 {
		t.Fatal("the server's pod has no managedFields: nothing to drop")
	}

	rec := &recorder{}
	s := runSource(t, cfg, node, rec.apply)
	kubetest.Eventually(t, "the running pod", func() bool {
		p, _, ok := rec.last("web")
		return ok && len(p.Pod.Status.ContainerStatuses) == 1
	})
	s.mu.Lock()
	store := s.informer.GetStore()
	s.mu.Unlock()
	obj, ok, err := store.GetByKey(ns + "/web")
	if err != nil || !ok {
		t.Fatalf("pod not in the informer's cache: %v %v", ok, err)
	}
	cached := obj.(*v1.Pod)
	if len(cached.ManagedFields) != 0 {
		t.Errorf("cached pod keeps %d managedFields entries", len(cached.ManagedFields))
	}
	if _, ok := cached.Annotations[lastApplied]; ok {
		t.Error("cached pod keeps the last-applied annotation")
	}
	if cached.Labels != nil {
		t.Error("cached pod keeps its labels")
	}
	if cached.Annotations[customprobe.Annotation] != "[]" || len(cached.OwnerReferences) != 1 ||
		len(cached.Spec.ReadinessGates) != 1 || cached.Status.ContainerStatuses[0].ContainerID != onServer.Status.ContainerStatuses[0].ContainerID {
		t.Errorf("cached pod lost what probed reads: %+v", cached)
	}
	if p, _, _ := rec.last("web"); p.Pod != cached {
		t.Error("the callback got another object than the cache's")
	}
}

// TestPodsArriveDefaulted: the API server applies the probe defaults
// (timeoutSeconds 1, periodSeconds 10, successThreshold 1,
// failureThreshold 3): the source has nothing left to default for the
// manager (spec 1.2). The annotation's probes are defaulted by their parser.
func TestPodsArriveDefaulted(t *testing.T) {
	cfg := kubetest.Config(t)
	c := kubetest.ClientFor(t, cfg)
	ns, node := kubetest.Namespace(t), kubetest.NodeName(t)
	rec := &recorder{}
	runSource(t, cfg, node, rec.apply)
	pod := kubetest.NewPod(ns, "web", node, "app")
	pod.Spec.Containers[0].ReadinessProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(8080)}}}
	kubetest.CreatePod(t, c, pod)
	kubetest.Eventually(t, "the pod", func() bool { return rec.seen("web") })
	p, _, _ := rec.last("web")
	got := p.Pod.Spec.Containers[0].ReadinessProbe
	if got.TimeoutSeconds != 1 || got.PeriodSeconds != 10 || got.SuccessThreshold != 1 || got.FailureThreshold != 3 || p.Pod.UID == "" {
		t.Fatalf("probe as delivered: %+v, uid %q; want the API defaults", got, p.Pod.UID)
	}
}

// startupTarget is the container's startup endpoint on loopback (the pod
// IP the test writes): 500 until opened, then 200.
type startupTarget struct {
	open atomic.Bool
	srv  *httptest.Server
}

func newStartupTarget(t *testing.T) *startupTarget {
	st := &startupTarget{}
	st.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if !st.open.Load() {
			http.Error(w, "starting", http.StatusInternalServerError)
		}
	}))
	t.Cleanup(st.srv.Close)
	return st
}

func (st *startupTarget) port(t *testing.T) int {
	u, err := url.Parse(st.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestStatusesFollowTheKubeletThroughTheInformer runs cluster mode's chain
// on the real server: informer → reconciler → real manager, the Statuses as
// its StatusProvider, the verdicts Fanout feeding the Statuses. The kubelet
// (the test) says started=true, but the annotation's startup probe (a real
// httpGet to a loopback server, the pod IP being 127.0.0.1) has not
// succeeded: Started is false (the overlay); once the probe succeeds it is
// true. The kubelet then restarts the container: the new container ID
// reaches GetPodStatus and Started is false again until the probe succeeds
// for the new instance (W6).
func TestStatusesFollowTheKubeletThroughTheInformer(t *testing.T) {
	cfg := kubetest.Config(t)
	c := kubetest.ClientFor(t, cfg)
	ns, node := kubetest.Namespace(t), kubetest.NodeName(t)

	statuses := NewStatuses()
	liveness, readiness, startup := results.NewManager(), results.NewManager(), results.NewManager()
	m, err := manager.New(manager.Options{Status: statuses, Liveness: liveness, Readiness: readiness, Startup: startup,
		Probes: clusterPolicy, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	gate := newStartupTarget(t)
	statuses.SetProber(m)
	rec := reconciler.New(reconciler.Options{Manager: m, Listener: statuses, Probes: clusterPolicy, Logger: discard()})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); verdicts.New(liveness, readiness, startup, statuses).Run(ctx) }()
	go func() { defer wg.Done(); rec.Run(ctx) }()
	t.Cleanup(func() {
		closeCtx, done := context.WithTimeout(context.Background(), 10*time.Second)
		defer done()
		_ = m.Close(closeCtx)
		cancel()
		wg.Wait()
	})
	runSource(t, cfg, node, rec.Apply)

	pod := kubetest.NewPod(ns, "web", node, "app")
	pod.Annotations = map[string]string{customprobe.Annotation: fmt.Sprintf(`[{"container":"app","type":"startup","periodSeconds":1,"failureThreshold":1000,"httpGet":{"path":"/started","port":%d}}]`, gate.port(t))}
	created := kubetest.CreatePod(t, c, pod)
	running := kubetest.SetPodRunning(t, c, ns, "web", false)
	firstID := running.Status.ContainerStatuses[0].ContainerID

	container := func() v1.ContainerStatus {
		st, ok := statuses.GetPodStatus(created.UID)
		if !ok || len(st.ContainerStatuses) != 1 {
			return v1.ContainerStatus{}
		}
		return st.ContainerStatuses[0]
	}
	kubetest.Eventually(t, "the kubelet's running status in GetPodStatus", func() bool { return container().ContainerID == firstID })
	// The startup probe runs (every second, failing below its threshold):
	// Started stays false although the kubelet wrote started=true.
	time.Sleep(2500 * time.Millisecond)
	if cs := container(); cs.Started == nil || *cs.Started || cs.Ready {
		t.Fatalf("before the annotation startup probe succeeded: started=%v ready=%v, want false/false", cs.Started, cs.Ready)
	}
	if p, ok := statuses.PodByName(ns, "web"); !ok || !*running.Status.ContainerStatuses[0].Started || *p.Status.ContainerStatuses[0].Started {
		t.Fatal("PodByName does not show the overlay")
	}

	gate.open.Store(true)
	kubetest.Eventually(t, "Started after the startup probe's Success", func() bool { cs := container(); return cs.Started != nil && *cs.Started })
	if len(statuses.Pods()) != 1 {
		t.Fatal("Pods() does not list the pod")
	}

	gate.open.Store(false)
	newID := kubetest.RestartContainer(t, c, ns, "web", "app").Status.ContainerStatuses[0].ContainerID
	kubetest.Eventually(t, "the restarted container's ID in GetPodStatus", func() bool { return container().ContainerID == newID })
	if cs := container(); cs.RestartCount != 1 || *cs.Started {
		t.Fatalf("after the kubelet's restart: restartCount %d started %v; want 1, false until its own startup Success (W6)", cs.RestartCount, *cs.Started)
	}
	gate.open.Store(true)
	kubetest.Eventually(t, "the new instance started", func() bool { cs := container(); return cs.Started != nil && *cs.Started })
}

// podRequests counts the pod requests the informer sent through requests:
// full lists (a LIST, or a watch that streams the initial state,
// sendInitialEvents=true) and watches resumed from a resourceVersion; log
// is their queries.
func podRequests(requests *kubetest.Requests) (lists, resumed int, log []string) {
	for _, req := range requests.All() {
		if req.Path != "/api/v1/pods" {
			continue
		}
		q, _ := url.ParseQuery(req.Query)
		switch {
		case q.Get("watch") != "true", q.Get("sendInitialEvents") == "true":
			lists++
		default:
			resumed++
		}
		log = append(log, req.Query)
	}
	return lists, resumed, log
}

// TestWatchResumesAfterOutageWithoutRelist: probed's connections to the API
// server are cut and refused for a while (the server unreachable as the
// agent sees it); meanwhile "the kubelet" restarts a container, a pod is
// created and one is deleted. When the server is reachable again, all three
// changes arrive, in order, through a watch resumed from the last
// resourceVersion: the informer listed the node's pods once, at start, and
// never again (no relist storm). HasSynced (and so /healthz)
// stays true through the outage: probing goes on with the pods already known.
func TestWatchResumesAfterOutageWithoutRelist(t *testing.T) {
	outage := &kubetest.Requests{} // the informer's requests; the test's own client stays up
	cfg := outage.Wrap(kubetest.Config(t))
	c := kubetest.Client(t)
	ns, node := kubetest.Namespace(t), kubetest.NodeName(t)
	kubetest.CreatePod(t, c, kubetest.NewPod(ns, "web", node, "app"))
	kubetest.SetPodRunning(t, c, ns, "web", false)
	kubetest.CreatePod(t, c, kubetest.NewPod(ns, "gone", node, "app"))

	rec := &recorder{}
	s := runSource(t, cfg, node, rec.apply)
	if !rec.seen("web") || !rec.seen("gone") {
		t.Fatal("initial list incomplete")
	}
	time.Sleep(1100 * time.Millisecond) // past the reflector's "very short watch" bound
	atStart, _, log := podRequests(outage)
	if atStart < 1 || atStart > 2 {
		// One watch streaming the initial state (WatchListClient), or a
		// LIST after the server refused it.
		t.Fatalf("%d full lists at start: %v", atStart, log)
	}

	outage.SetDown(true)
	newID := kubetest.RestartContainer(t, c, ns, "web", "app").Status.ContainerStatuses[0].ContainerID
	kubetest.CreatePod(t, c, kubetest.NewPod(ns, "new", node, "app"))
	if err := c.CoreV1().Pods(ns).Delete(kubetest.Context(t), "gone", metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if err := health.New(s.HasSynced, nil).Check(); err != nil || !s.HasSynced() {
		t.Fatalf("unsynced or unhealthy during an outage after the initial sync: %v", err)
	}
	before := len(rec.events())
	outage.SetDown(false)

	kubetest.Eventually(t, "the changes made during the outage", func() bool {
		_, op, ok := rec.last("gone")
		return ok && op == pods.Remove
	})
	got := rec.events()[before:]
	// A deletion with grace 0 of a pod bound to a node is written first
	// (deletionTimestamp set: an update), then removed.
	want := []string{"UPSERT web", "UPSERT new", "REMOVE gone"}
	if len(got) == 4 && got[2] == "UPSERT gone" {
		got = append(got[:2:2], got[3])
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after the outage: %v, want %v", rec.events()[before:], want)
	}
	if p, _, _ := rec.last("web"); p.Pod.Status.ContainerStatuses[0].ContainerID != newID {
		t.Fatal("the restarted container's ID did not arrive")
	}
	lists, resumed, log := podRequests(outage)
	t.Logf("pod requests: %d full lists, %d resumed watches: %v", lists, resumed, log)
	if lists != atStart {
		t.Fatalf("the informer listed %d times, %d at start; after the outage it must resume its watch (no relist)", lists, atStart)
	}
	if resumed < 1 {
		t.Fatal("no watch resumed from a resourceVersion")
	}
}
