// Package panicthreshold is the readiness panic threshold of cluster mode:
// a pod that opts in with the annotation probed.io/panic-threshold ("50%",
// or a count of pods) is kept ready while its readiness probe fails when
// taking it out would leave a Service it backs with fewer ready endpoints
// than the threshold, as Envoy's panic threshold balances over every host
// once too few are healthy. When every replica fails together (a database,
// a DNS server every replica needs), the kubelet's rule removes every
// endpoint and a partial outage becomes a total one; the threshold keeps
// enough of them in.
//
// The decision lives in one place, Guard.Condition, a decorator of the
// readiness gate's condition (gate.Options.Guard): the condition stays True
// with reason PanicThreshold and a message with the counts, a Warning
// Event (reason PanicThreshold) says so once per hold, and the pod is
// decided again whenever an EndpointSlice that lists it changes, so it
// flips as soon as the Service is above the threshold again.
//
// A pod's Services are found from the EndpointSlices that list it (an
// endpoint's targetRef is the pod); its Service's endpoints are counted
// from all of that Service's slices, across the cluster: total is the
// endpoints that are not terminating, ready those whose ready condition is
// true. The agent counts its own pods by its own decisions (a pod it let go
// is not ready, a pod it holds is, whatever the slices say yet), so one
// agent never goes below the threshold on a stale count; another node's
// pods it sees only through the slices (docs/cluster.md "When a whole
// Service fails": the race between agents and its bound). When the slices
// show the Service below the threshold (agents let go on the same stale
// count), the pods this agent let go are taken back in the order of their
// UIDs, the same order on every node, until the threshold is met; a pod
// that was never ready is never taken.
//
// Only a readiness probe's failure (reason ProbeFailed) is held: a
// container that is not running, or a pod refused by the node's limits,
// flips as before. The EndpointSlices are watched through one informer,
// started when the first pod of the node opts in, trimmed to what the
// count reads (RBAC: discovery.k8s.io endpointslices list, watch).
package panicthreshold

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/probed/probed/agent/guards"
	"github.com/probed/probed/agent/kube/gate"
	"github.com/probed/probed/agent/kube/share"
	"github.com/probed/probed/agent/pods"
	"github.com/probed/probed/runtime"
)

const (
	// Annotation opts a pod in: a count of pods ("3") or a share of the
	// Service's endpoints ("50%", rounded up) kept ready.
	Annotation = "probed.io/panic-threshold"
	// Reason is the condition's reason while a pod is kept ready, and the
	// reason of the Warning Event that says so.
	Reason = "PanicThreshold"
	// ReasonInvalid is the reason of the Warning Event about an annotation
	// that is not a count or a share (the pod is then not held).
	ReasonInvalid = "InvalidPanicThreshold"
)

// Options configure a Guard.
type Options struct {
	// Client watches the EndpointSlices (required).
	Client kubernetes.Interface
	// Recorder takes the Warning Events (required).
	Recorder runtime.Recorder
	// Requeue asks the gate's writer to decide a pod again
	// (gate.Writer.Requeue); set before Run.
	Requeue func(uid types.UID)
	// Registerer takes the metric probed_panic_threshold_held_pods; nil:
	// none registered.
	Registerer prometheus.Registerer
	// Logger; nil: slog.Default().
	Logger *slog.Logger
}

// Guard decides whether a failing pod is kept ready. Create it with New
// and Run it; Condition is its one decision. It is a pods.Listener (it
// forgets removed pods).
type Guard struct {
	opts      Options
	log       *slog.Logger
	factory   informers.SharedInformerFactory
	indexer   cache.Indexer
	synced    cache.InformerSynced
	wanted    chan struct{} // closed by the first pod that opts in
	wantOnce  sync.Once
	listed    chan struct{} // closed once the slices are listed
	listOnce  sync.Once
	heldGauge prometheus.GaugeFunc

	mu sync.Mutex
	// pods: the node's opted-in pods whose readiness probe fails, as the
	// guard last decided them; a pod whose condition is True is not here.
	pods map[types.UID]*state
	// invalid: the value last warned about, by pod.
	invalid map[types.UID]string
}

// state is one failing pod's last decision.
type state struct {
	namespace, name string
	// decided: the guard decided it with the slices listed; held: it
	// keeps it ready, why gives the counts; letGo: it was ready and the
	// guard let it go (it may be taken back).
	decided, held, letGo bool
	why                  string
}

var _ pods.Listener = (*Guard)(nil)

// The informer's indexes.
const (
	byPod     = "pod"     // an endpoint's targetRef pod UID
	byService = "service" // namespace/kubernetes.io/service-name
)

// New returns a Guard; it starts nothing.
func New(opts Options) (*Guard, error) {
	if opts.Client == nil || opts.Recorder == nil {
		return nil, fmt.Errorf("panicthreshold: Options.Client and Recorder are required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	g := &Guard{opts: opts, log: opts.Logger, wanted: make(chan struct{}), listed: make(chan struct{}),
		pods: map[types.UID]*state{}, invalid: map[types.UID]string{}}
	// Only slices that belong to a Service (the EndpointSlice controller's
	// and any other controller's that names one).
	g.factory = informers.NewSharedInformerFactoryWithOptions(opts.Client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = discoveryv1.LabelServiceName
	}))
	inf := g.factory.Discovery().V1().EndpointSlices().Informer()
	if err := inf.SetTransform(trimTransform); err != nil {
		return nil, err
	}
	if err := inf.AddIndexers(cache.Indexers{byPod: podIndex, byService: serviceIndex}); err != nil {
		return nil, err
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { g.sliceChanged(obj, nil) },
		UpdateFunc: func(old, obj any) { g.sliceChanged(obj, old) },
		DeleteFunc: func(obj any) { g.sliceChanged(obj, nil) },
	}); err != nil {
		return nil, err
	}
	g.indexer, g.synced = inf.GetIndexer(), inf.HasSynced
	g.heldGauge = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "probed_panic_threshold_held_pods",
		Help: "Pods of this node whose readiness probe fails and whose readiness-gate condition the panic threshold (" + Annotation + ") keeps True.",
	}, func() float64 { return float64(len(g.Held())) })
	if opts.Registerer != nil {
		if err := opts.Registerer.Register(g.heldGauge); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// Run watches the EndpointSlices, from when the first pod opts in until ctx
// ends. It returns nil.
func (g *Guard) Run(ctx context.Context) error {
	select {
	case <-g.wanted:
	case <-ctx.Done():
		return nil
	}
	g.factory.Start(ctx.Done())
	if cache.WaitForCacheSync(ctx.Done(), g.synced) {
		g.listOnce.Do(func() { close(g.listed) })
		// Pods decided while the slices were not listed kept their
		// condition: decide them now.
		g.mu.Lock()
		uids := make([]types.UID, 0, len(g.pods))
		for uid := range g.pods {
			uids = append(uids, uid)
		}
		g.mu.Unlock()
		for _, uid := range uids {
			g.requeue(uid)
		}
	}
	<-ctx.Done()
	g.factory.Shutdown()
	return nil
}

func (g *Guard) requeue(uid types.UID) {
	if g.opts.Requeue != nil {
		g.opts.Requeue(uid)
	}
}

// sliceChanged decides again the failing pods of this node a slice lists,
// before and after the change.
func (g *Guard) sliceChanged(objs ...any) {
	var uids []types.UID
	g.mu.Lock()
	for _, obj := range objs {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		s, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok {
			continue
		}
		for i := range s.Endpoints {
			if ref := s.Endpoints[i].TargetRef; ref != nil && g.pods[ref.UID] != nil {
				uids = append(uids, ref.UID)
			}
		}
	}
	g.mu.Unlock()
	for _, uid := range uids {
		g.requeue(uid)
	}
}

// Condition is the guard's decision about pod's condition v (gate.Options.Guard):
// v itself, or, for a pod that opted in and whose readiness probe fails,
// True with reason PanicThreshold while taking it out would leave one of
// its Services below the threshold (or while the slices, not listed yet,
// cannot tell: then nothing is known and the condition is kept as it is).
func (g *Guard) Condition(pod *v1.Pod, v gate.Condition) gate.Condition {
	raw, opted := pod.Annotations[Annotation]
	if !opted {
		g.forget(pod.UID)
		return v
	}
	threshold, err := share.Parse(Annotation, raw)
	if err != nil {
		g.warnInvalid(pod, raw, err)
		g.forget(pod.UID)
		return v
	}
	if v.Status != v1.ConditionFalse || v.Reason != gate.ReasonProbeFailed {
		g.forget(pod.UID)
		return v
	}
	g.wantOnce.Do(func() { close(g.wanted) })
	select {
	case <-g.listed:
	default:
		g.mu.Lock()
		if g.pods[pod.UID] == nil {
			g.pods[pod.UID] = &state{namespace: pod.Namespace, name: pod.Name}
		}
		g.mu.Unlock()
		return gate.Condition{} // keep the condition until the slices are listed
	}

	g.mu.Lock()
	st := g.pods[pod.UID]
	if st == nil {
		st = &state{namespace: pod.Namespace, name: pod.Name}
		g.pods[pod.UID] = st
	}
	wasHeld := st.held
	// Ready now: as this agent last decided it, else as the slices say.
	ready := st.held
	if !st.decided {
		ready = g.sliceReady(pod.Namespace, pod.UID)
	}
	why := ""
	for _, svc := range g.servicesOf(pod.Namespace, pod.UID) {
		c := g.count(svc, pod.UID)
		keep := threshold.Of(c.total, true)
		short := keep - c.ready // endpoints missing to the threshold without this pod
		var hold bool
		switch {
		case short <= 0:
		case ready:
			hold = true // taking it out leaves the Service below
		case st.letGo:
			// The Service is below already (agents let go on the same
			// stale count): the pods this guard let go are taken back in
			// the order of their UIDs, the same on every node. A pod that
			// was never ready (a new one, whose first result is a Failure,
			// W1) is never taken.
			hold = c.rank < short
		}
		if hold {
			why = fmt.Sprintf("Service %s has %d of %d endpoints ready without it, %s=%s keeps %d", svc, c.ready, c.total, Annotation, threshold, keep)
			break
		}
	}
	st.letGo = why == "" && (ready || st.letGo)
	st.decided, st.held, st.why = true, why != "", why
	g.mu.Unlock()

	if why == "" {
		if wasHeld {
			g.log.Info("panic threshold: pod let go", "pod", pod.Namespace+"/"+pod.Name)
		}
		return v
	}
	if !wasHeld {
		g.opts.Recorder.Eventf(podRef(pod), v1.EventTypeWarning, Reason, "Readiness probe failed, the pod is kept ready: %s", why)
		g.log.Warn("panic threshold: pod kept ready", "pod", pod.Namespace+"/"+pod.Name, "why", why)
	}
	return gate.Condition{Known: true, Status: v1.ConditionTrue, Reason: Reason, Message: v.Message + "; kept ready: " + why}
}

// Held lists the pods the threshold keeps ready now, by namespace and name
// (the status views).
func (g *Guard) Held() []guards.Held {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []guards.Held
	for _, st := range g.pods {
		if st.held {
			out = append(out, guards.Held{Guard: guards.PanicThreshold, Namespace: st.namespace, Pod: st.name, Why: st.why})
		}
	}
	slices.SortFunc(out, func(a, b guards.Held) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Pod, b.Pod))
	})
	return out
}

// forget drops the pod's decision.
func (g *Guard) forget(uid types.UID) {
	g.mu.Lock()
	delete(g.pods, uid)
	g.mu.Unlock()
}

// warnInvalid records one Warning Event per pod and value.
func (g *Guard) warnInvalid(pod *v1.Pod, raw string, err error) {
	g.mu.Lock()
	said := g.invalid[pod.UID] == raw
	g.invalid[pod.UID] = raw
	g.mu.Unlock()
	if said {
		return
	}
	g.opts.Recorder.Eventf(podRef(pod), v1.EventTypeWarning, ReasonInvalid, "%v; the pod is not kept ready by a panic threshold", err)
	g.log.Warn("panic threshold: invalid annotation", "pod", pod.Namespace+"/"+pod.Name, "field", "metadata.annotations["+Annotation+"]", "err", err)
}

// PodAdded implements pods.Listener: nothing to do.
func (g *Guard) PodAdded(*pods.Pod) {}

// PodStatusChanged implements pods.Listener: nothing to do (the gate
// decides the pod again).
func (g *Guard) PodStatusChanged(*pods.Pod) {}

// PodRemoved implements pods.Listener: the pod's decision is forgotten.
func (g *Guard) PodRemoved(p *pods.Pod) {
	if p == nil || p.Pod == nil {
		return
	}
	g.forget(p.Pod.UID)
	g.mu.Lock()
	delete(g.invalid, p.Pod.UID)
	g.mu.Unlock()
}

func podRef(pod *v1.Pod) *v1.ObjectReference {
	return &v1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}
}
