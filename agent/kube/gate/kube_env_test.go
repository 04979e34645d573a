package gate

// The harness of the tests against a real kube-apiserver and etcd:
// PROBED_TEST_KUBECONFIG names the kubeconfig test/kube/env.sh start
// writes; without it the tests skip. There is no kubelet: the test writes
// the pods' statuses through the status subresource as the kubelet would.
// A real shared informer holds the pods (the writer's PodLookup and
// pods.Listener calls), the real results managers and verdicts.Fanout feed
// the writer, and kubetest.Requests on the writer's client records (and, for
// the outage, refuses) its requests.

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/probed/probed/agent/pods"
	"github.com/probed/probed/agent/verdicts"
	"github.com/probed/probed/internal/kubetest"
	"github.com/probed/probed/manager/results"
)

const testNode = "node-a"

// podSpec describes a test pod: containers app and side on testNode.
type podSpec struct {
	name string
	// gates lists spec.readinessGates condition types.
	gates []v1.PodConditionType
	// probes are elements of the probed.io/probes annotation (probeJSON).
	probes []string
}

func createPod(t *testing.T, kube kubernetes.Interface, ns string, s podSpec) *v1.Pod {
	t.Helper()
	pod := gatedPod(time.Now(), s.probes...)
	pod.UID = ""
	pod.Status = v1.PodStatus{}
	pod.Name, pod.Namespace = s.name, ns
	pod.Spec.NodeName = testNode
	pod.Spec.ReadinessGates = nil
	for _, g := range s.gates {
		pod.Spec.ReadinessGates = append(pod.Spec.ReadinessGates, v1.PodReadinessGate{ConditionType: g})
	}
	return kubetest.CreatePod(t, kube, pod)
}

// kubeletStatus is what the test writes as the kubelet would: both
// containers running since startedAt (container IDs containerd://<pod>-app-1
// and containerd://<pod>-side-1), started, and the given conditions.
func kubeletStatus(pod *v1.Pod, startedAt time.Time, conditions ...v1.PodCondition) v1.PodStatus {
	started := true
	st := v1.PodStatus{Phase: v1.PodRunning, PodIP: "127.0.0.1", PodIPs: []v1.PodIP{{IP: "127.0.0.1"}},
		HostIP: "127.0.0.1", StartTime: &metav1.Time{Time: startedAt}, Conditions: conditions}
	for _, c := range pod.Spec.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses, v1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: "sha256:0", ContainerID: testContainerID(pod, c.Name).String(),
			Started: &started,
			State:   v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(startedAt)}},
		})
	}
	return st
}

func testContainerID(pod *v1.Pod, container string) results.ContainerID {
	return results.ContainerID{Type: "containerd", ID: pod.Name + "-" + container + "-1"}
}

// writeStatus replaces the pod's status (an update of the status
// subresource, as the kubelet's status manager sends a patch of it).
func writeStatus(t *testing.T, kube kubernetes.Interface, pod *v1.Pod, status v1.PodStatus) *v1.Pod {
	t.Helper()
	for {
		cur, err := kube.CoreV1().Pods(pod.Namespace).Get(context.Background(), pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get pod %s: %v", pod.Name, err)
		}
		cur.Status = status
		out, err := kube.CoreV1().Pods(pod.Namespace).UpdateStatus(context.Background(), cur, metav1.UpdateOptions{FieldManager: "kubelet"})
		if err == nil {
			return out
		}
		if !strings.Contains(err.Error(), "the object has been modified") {
			t.Fatalf("write status of pod %s: %v", pod.Name, err)
		}
	}
}

// requestLog is the writer's status patches among the requests of the
// writer's client (kubetest.Requests: SetDown is the outage as the writer
// sees it; the test's own client stays up).
type requestLog struct{ kubetest.Requests }

// all returns the recorded status patches (refused ones with Code 0);
// accepted only those answered 2xx.
func (l *requestLog) all() []kubetest.Request {
	var out []kubetest.Request
	for _, r := range l.All() {
		if r.Method == http.MethodPatch && strings.HasSuffix(r.Path, "/status") {
			out = append(out, r)
		}
	}
	return out
}

// podFromPath: /api/v1/namespaces/NS/pods/NAME/status → NAME.
func podFromPath(p string) string {
	parts := strings.Split(strings.TrimSuffix(p, "/status"), "/")
	return parts[len(parts)-1]
}

func (l *requestLog) accepted() []kubetest.Request {
	var out []kubetest.Request
	for _, r := range l.all() {
		if r.Code >= 200 && r.Code < 300 {
			out = append(out, r)
		}
	}
	return out
}

func (l *requestLog) count(pod string) int {
	n := 0
	for _, r := range l.all() {
		if podFromPath(r.Path) == pod {
			n++
		}
	}
	return n
}

// gateEnv is one writer over one namespace of the real API server.
type gateEnv struct {
	t         *testing.T
	kube      kubernetes.Interface // the test's client: plays the kubelet
	ns        string
	readiness results.Manager
	startup   results.Manager
	writer    *Writer
	log       *requestLog
	informer  cache.SharedIndexInformer

	mu   sync.Mutex
	seen map[types.UID]string // resourceVersion of the last pod the listener was told of

	cancel func()
	done   sync.WaitGroup
}

// startGate starts an informer on ns, a Fanout and a Writer with opts
// (Pods, Client, Readiness and Startup are filled in).
func startGate(t *testing.T, kube kubernetes.Interface, ns string, opts Options) *gateEnv {
	t.Helper()
	e := &gateEnv{t: t, kube: kube, ns: ns, log: &requestLog{}, seen: map[types.UID]string{},
		readiness: results.NewManager(), startup: results.NewManager()}
	writerClient := kubetest.ClientFor(t, e.log.Wrap(kubetest.Config(t)))

	e.informer = cache.NewSharedIndexInformer(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (k8sruntime.Object, error) {
			return kube.CoreV1().Pods(ns).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return kube.CoreV1().Pods(ns).Watch(ctx, o)
		},
	}, &v1.Pod{}, 0, cache.Indexers{"uid": func(obj any) ([]string, error) {
		return []string{string(obj.(*v1.Pod).UID)}, nil
	}})
	lookup := PodLookupFunc(func(uid types.UID) (*v1.Pod, bool) {
		objs, err := e.informer.GetIndexer().ByIndex("uid", string(uid))
		if err != nil || len(objs) == 0 {
			return nil, false
		}
		return objs[0].(*v1.Pod), true
	})
	if opts.Pods == nil {
		opts.Pods = lookup
	}
	opts.Client = writerClient
	opts.Readiness, opts.Startup = e.readiness, e.startup
	w, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	e.writer = w
	if _, err := e.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.PodAdded(&pods.Pod{Pod: obj.(*v1.Pod)}); e.saw(obj) },
		UpdateFunc: func(_, obj any) { w.PodStatusChanged(&pods.Pod{Pod: obj.(*v1.Pod)}); e.saw(obj) },
		DeleteFunc: func(obj any) {
			if p, ok := obj.(*v1.Pod); ok {
				w.PodRemoved(&pods.Pod{Pod: p})
			}
		},
	}); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	fanout := verdicts.New(results.NewManager(), e.readiness, e.startup, w)
	e.done.Go(func() { e.informer.RunWithContext(ctx) })
	e.done.Go(func() { fanout.Run(ctx) })
	e.done.Go(func() {
		if err := w.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	t.Cleanup(e.stop)
	if !cache.WaitForCacheSync(ctx.Done(), e.informer.HasSynced) {
		t.Fatal("informer did not sync")
	}
	return e
}

func (e *gateEnv) stop() {
	e.cancel()
	e.done.Wait()
}

func (e *gateEnv) saw(obj any) {
	p := obj.(*v1.Pod)
	e.mu.Lock()
	e.seen[p.UID] = p.ResourceVersion
	e.mu.Unlock()
}

// waitTold waits until the listener was told of pod at its resourceVersion
// (or a later one: the informer holds it) and the writer has nothing pending:
// whatever that event asked for is done.
func (e *gateEnv) waitTold(want ...*v1.Pod) {
	e.t.Helper()
	eventually(e.t, 30*time.Second, func() error {
		for _, p := range want {
			cur, ok := e.writer.opts.Pods.Pod(p.UID)
			if !ok {
				return fmt.Errorf("pod %s not in the informer", p.Name)
			}
			if rvNewer(p.ResourceVersion, cur.ResourceVersion) {
				return fmt.Errorf("informer holds pod %s at %s, want %s", p.Name, cur.ResourceVersion, p.ResourceVersion)
			}
			e.mu.Lock()
			seen := e.seen[p.UID]
			e.mu.Unlock()
			if seen != cur.ResourceVersion {
				return fmt.Errorf("listener not yet told of pod %s at %s", p.Name, cur.ResourceVersion)
			}
		}
		if n := e.writer.WritesPending(); n > 0 {
			return fmt.Errorf("%d writes pending", n)
		}
		return nil
	})
}

// rvNewer reports whether resourceVersion a is newer than b. The test may
// compare: the server is etcd3-backed, its versions are integers.
func rvNewer(a, b string) bool {
	var x, y uint64
	_, _ = fmt.Sscan(a, &x)
	_, _ = fmt.Sscan(b, &y)
	return x > y
}

// setReadiness sets the readiness result of a container of pod.
func (e *gateEnv) setReadiness(pod *v1.Pod, container string, r results.Result) {
	e.readiness.Set(testContainerID(pod, container), r, pod)
}

// condition reads the pod's conditions from the API server.
func (e *gateEnv) conditions(name string) (types.UID, []v1.PodCondition) {
	e.t.Helper()
	p, err := e.kube.CoreV1().Pods(e.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("get pod %s: %v", name, err)
	}
	return p.UID, p.Status.Conditions
}

// waitCondition waits until the pod's condition of probed's type has the
// status and reason, and returns it.
func (e *gateEnv) waitCondition(name string, status v1.ConditionStatus, reason string) v1.PodCondition {
	e.t.Helper()
	return e.waitConditionMessage(name, status, reason, "")
}

// waitConditionMessage is waitCondition that also waits for the message
// (any message when "").
func (e *gateEnv) waitConditionMessage(name string, status v1.ConditionStatus, reason, message string) v1.PodCondition {
	e.t.Helper()
	var got v1.PodCondition
	eventually(e.t, 30*time.Second, func() error {
		_, conds := e.conditions(name)
		for _, c := range conds {
			if c.Type == e.writer.ConditionType() {
				got = c
				if c.Status == status && c.Reason == reason && (message == "" || c.Message == message) {
					return nil
				}
				return fmt.Errorf("pod %s: condition %s=%s (%s: %q), want %s (%s: %q)", name, c.Type, c.Status, c.Reason, c.Message, status, reason, message)
			}
		}
		return fmt.Errorf("pod %s has no %s condition", name, e.writer.ConditionType())
	})
	return got
}

// eventually polls f every 20 ms until it returns nil or timeout passes.
func eventually(t *testing.T, timeout time.Duration, f func() error) {
	t.Helper()
	eventuallyEvery(t, timeout, 20*time.Millisecond, f)
}

// eventuallyEvery polls f every interval until it returns nil or timeout
// passes.
func eventuallyEvery(t *testing.T, timeout, interval time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %v", timeout, err)
		}
		time.Sleep(interval)
	}
}
