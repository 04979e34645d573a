package agent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/probed/probed/agent/actuate"
	"github.com/probed/probed/agent/events"
	"github.com/probed/probed/agent/guards"
	"github.com/probed/probed/agent/history"
	"github.com/probed/probed/agent/kube/cri"
	"github.com/probed/probed/agent/kube/evict"
	"github.com/probed/probed/agent/kube/gate"
	"github.com/probed/probed/agent/kube/kevents"
	"github.com/probed/probed/agent/kube/limits"
	"github.com/probed/probed/agent/kube/nsscope"
	"github.com/probed/probed/agent/kube/panicthreshold"
	"github.com/probed/probed/agent/kube/podsource"
	"github.com/probed/probed/agent/kube/resident"
	"github.com/probed/probed/agent/kube/restart"
	"github.com/probed/probed/agent/source"
	"github.com/probed/probed/agent/statuspage"
	"github.com/probed/probed/agent/verdicts"
	"github.com/probed/probed/manager"
	"github.com/probed/probed/manager/customprobe"
	"github.com/probed/probed/manager/podprobes"
	probeexec "github.com/probed/probed/plugins/exec"
	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/bound"
	"github.com/probed/probed/runtime/egress"
)

// Cluster mode's defaults (docs/cluster.md).
const (
	// DefaultReadinessGate is the pod condition probed owns by default.
	DefaultReadinessGate = string(gate.DefaultConditionType)
	// LivenessActionEvent, LivenessActionEvict and LivenessActionRestart
	// are the values of --liveness-action; restart needs the container
	// runtime (ClusterOptions.ContainerRuntimeEndpoint).
	LivenessActionEvent   = "event"
	LivenessActionEvict   = "evict"
	LivenessActionRestart = "restart"
	// DefaultStatusQPS and DefaultStatusBurst size the condition writer's
	// bucket (patches per second, all pods together).
	DefaultStatusQPS   = gate.DefaultQPS
	DefaultStatusBurst = gate.DefaultBurst
	// The CLI's limits on what one pod may ask of the node
	// (docs/cluster.md "Security model"): at most 32 annotation probes a
	// pod, no period under 1 s, and 1,000 annotation probe runs a second
	// for the whole node.
	DefaultMaxProbesPerPod = 32
	DefaultMinProbePeriod  = time.Second
	DefaultMaxProbeRate    = 1000
	// DefaultNamespaceProbeRateShare: one namespace holds at most a
	// quarter of the node's run budget (250 runs a second by default, 8
	// pods at the per-pod limits), so three that take all they may still
	// leave room for the others.
	DefaultNamespaceProbeRateShare = 0.25
	// DefaultLivenessActionNamespaces selects the namespaces where
	// LivenessActionEvict evicts and LivenessActionRestart restarts
	// (--liveness-action-namespaces).
	DefaultLivenessActionNamespaces = nsscope.DefaultSelector
	// DefaultLivenessActionMaxGracePeriod caps the grace period of a
	// restart (--liveness-action-max-grace-period).
	DefaultLivenessActionMaxGracePeriod = restart.DefaultMaxGracePeriod
	// ExecModeExecSync and ExecModeResident are the values of
	// --exec-mode: each exec run through the runtime's ExecSync (the
	// kubelet's way, the default), or through a resident helper per
	// container (agent/kube/resident).
	ExecModeExecSync = resident.ModeExecSync
	ExecModeResident = resident.ModeResident
)

// ReasonInvalidProbeAnnotation is the reason of the Event about an invalid
// probed.io/probes annotation (and of the condition, when it holds a
// readiness or startup probe back).
const ReasonInvalidProbeAnnotation = limits.ReasonInvalidProbeAnnotation

// ExecUnavailable is why an exec probe of the probed.io/probes annotation is
// refused in cluster mode without the container runtime
// (podprobes.RefuseExec).
const ExecUnavailable = "exec probes need the container runtime, which the kubelet owns in cluster mode (probed reaches it with --container-runtime-endpoint); use httpGet, tcpSocket, grpc or a plugin"

// ClusterAnnotationOptions are the options cluster mode reads a pod's
// probed.io/probes annotation and probed.io/offloaded record with: the
// egress rule and the per-pod limits, named after the flags that set them
// (--max-probes-per-pod, --min-probe-period). The agent and the offload
// webhook (which moves only what the agents run) build them alike.
func ClusterAnnotationOptions(rule *egress.Rule, maxProbesPerPod int, minProbePeriod time.Duration) customprobe.Options {
	return customprobe.Options{Egress: rule, Limits: customprobe.Limits{
		MaxProbes: maxProbesPerPod, MaxProbesFlag: "--max-probes-per-pod",
		MinPeriod: minProbePeriod, MinPeriodFlag: "--min-probe-period",
	}}
}

// ClusterOptions select cluster mode: pods from the API server.
type ClusterOptions struct {
	// Config reaches the API server (required): from --kubeconfig, or the
	// pod's service account with --in-cluster.
	Config *rest.Config
	// NodeName is the node whose pods are probed (required).
	NodeName string
	// ReadinessGate is the pod condition probed owns; default
	// DefaultReadinessGate.
	ReadinessGate string
	// LivenessAction is LivenessActionEvent (default),
	// LivenessActionEvict or LivenessActionRestart.
	LivenessAction string
	// StatusQPS and StatusBurst size the condition writer's bucket;
	// defaults DefaultStatusQPS, DefaultStatusBurst.
	StatusQPS   float64
	StatusBurst int
	// MaxProbesPerPod, MinProbePeriod and MaxProbeRate (runs per second,
	// all pods together) limit what one pod may ask of the node
	// (agent/kube/limits); zero: no limit. The CLI's defaults are
	// DefaultMaxProbesPerPod, DefaultMinProbePeriod, DefaultMaxProbeRate.
	MaxProbesPerPod int
	MinProbePeriod  time.Duration
	MaxProbeRate    float64
	// NamespaceProbeRateShare is the most of MaxProbeRate one namespace may
	// hold, a fraction; zero or 1: no cap beyond its fair share among the
	// namespaces that ask (agent/kube/limits). The CLI's default is
	// DefaultNamespaceProbeRateShare.
	NamespaceProbeRateShare float64
	// AllowProbeHost are the ranges probes may connect to besides their
	// pod's IPs (--allow-probe-host; none by default): the egress rule of
	// cluster mode (runtime/egress, docs/cluster.md "Where probes
	// connect").
	AllowProbeHost []netip.Prefix
	// LivenessActionNamespaces is a label selector on namespaces: with
	// LivenessActionEvict or LivenessActionRestart, the action is taken
	// only in the namespaces it selects (agent/kube/nsscope); default
	// DefaultLivenessActionNamespaces.
	LivenessActionNamespaces string
	// LivenessActionMaxGracePeriod caps the grace period (the preStop
	// hook and the stop together) LivenessActionRestart gives a container,
	// whatever its probe and pod ask; at least 2 s; default
	// DefaultLivenessActionMaxGracePeriod (agent/kube/restart).
	LivenessActionMaxGracePeriod time.Duration
	// ContainerRuntimeEndpoint, when set, is the node's container runtime
	// (the kubelet's --container-runtime-endpoint,
	// unix:///run/containerd/containerd.sock): annotation exec probes run
	// in their container through CRI ExecSync, and LivenessActionRestart
	// stops containers through it (agent/kube/cri, agent/kube/restart).
	ContainerRuntimeEndpoint string
	// ExecMode is how exec probes run in their container with
	// ContainerRuntimeEndpoint: ExecModeExecSync (default) or
	// ExecModeResident (docs/cluster.md "The resident exec helper").
	ExecMode string
}

// clusterRooms are the rooms of cluster mode.
type clusterRooms struct {
	client   kubernetes.Interface
	events   *kevents.Recorder
	recorder runtime.Recorder // the local ring and log, and the API server (events.Tee)
	egress   *egress.Rule
	source   *podsource.Source
	statuses *podsource.Statuses
	gate     *gate.Writer
	guard    *panicthreshold.Guard // the readiness panic threshold
	budget   *actuate.Budget       // with LivenessActionEvict or LivenessActionRestart
	limits   *limits.Admission
	actuator *actuate.Queue
	cri      *cri.Client      // with ContainerRuntimeEndpoint
	resident *resident.Runner // with ExecModeResident
}

// helpersCloseBound bounds the helpers' own end at shutdown (each kills
// what it runs and exits when its stdin closes: milliseconds); then their
// sessions are cut.
const helpersCloseBound = 10 * time.Second

// clusterMode builds the rooms of cluster mode: the API client and the
// event sink (every event goes to the local ring and log and to the API
// server, events.Tee), the container runtime and the exec runner, the
// node's pods from one informer, the kubelet's statuses with probed's
// Started as the manager's status provider, the readiness-gate condition
// writer, the liveness actuator (event, evict or restart). The kubelet
// runs the spec's probes: the manager runs only the probed.io/probes
// annotation's and those the offload webhook moved. Each room that holds
// goroutines or a connection adds its closer to New's undo list as it is
// built.
func clusterMode(d deps) (*mode, error) {
	c := d.opts.Cluster
	if c.Config == nil {
		return nil, fmt.Errorf("cluster mode: no API server configuration")
	}
	if c.NodeName == "" {
		return nil, fmt.Errorf("cluster mode: no node name (--node-name or NODE_NAME)")
	}
	if c.ReadinessGate == "" {
		c.ReadinessGate = DefaultReadinessGate
	}
	if c.LivenessAction == "" {
		c.LivenessAction = LivenessActionEvent
	}
	switch c.ExecMode {
	case "":
		c.ExecMode = ExecModeExecSync
	case ExecModeExecSync:
	case ExecModeResident:
		if c.ContainerRuntimeEndpoint == "" {
			return nil, errors.New("--exec-mode=resident needs the container runtime: --container-runtime-endpoint")
		}
	default:
		return nil, fmt.Errorf("--exec-mode %q: want execsync or resident", c.ExecMode)
	}
	client, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return nil, fmt.Errorf("cluster mode: %w", err)
	}
	kev, err := kevents.New(kevents.Options{Client: client, NodeName: c.NodeName, Logger: d.log})
	if err != nil {
		return nil, fmt.Errorf("cluster mode: %w", err)
	}
	// Events flush after the drain.
	eventSink := &service{name: "event sink", run: kev.Run}
	d.onClose(eventSink.stopUnstarted)
	rooms := &clusterRooms{client: client, events: kev, recorder: events.Tee(d.events, kev),
		// A probe connects only to its pod's IPs and the operator's
		// ranges (runtime/egress; docs/cluster.md "Where probes connect").
		egress: egress.NewRule(c.AllowProbeHost)}
	runner, err := rooms.execRunner(d)
	if err != nil {
		return nil, err
	}
	if rooms.source, err = podsource.New(podsource.Options{Client: rooms.client, NodeName: c.NodeName, ReadinessGate: c.ReadinessGate, Logger: d.log}); err != nil {
		return nil, err
	}
	rooms.statuses = podsource.NewStatuses()
	// Cluster mode's policy, applied once per pod and spec change where
	// pods come in (the reconciler): the kubelet runs the spec's probes;
	// the annotation's and those the offload webhook moved run under the
	// egress rule and the per-pod limits, exec ones only with the
	// container runtime.
	execRefused := ""
	if rooms.cri == nil {
		execRefused = ExecUnavailable
	}
	policy := podprobes.Cluster(ClusterAnnotationOptions(rooms.egress, c.MaxProbesPerPod, c.MinProbePeriod), execRefused)
	rooms.limits = limits.New(limits.Options{MaxRate: c.MaxProbeRate, MaxRateFlag: "--max-probe-rate",
		NamespaceShare: c.NamespaceProbeRateShare, NamespaceShareFlag: "--namespace-probe-rate-share",
		Recorder: rooms.recorder, Logger: d.log})
	if rooms.guard, err = panicthreshold.New(panicthreshold.Options{Client: rooms.client, Recorder: rooms.recorder,
		Requeue: func(uid types.UID) { rooms.gate.Requeue(uid) }, Registerer: d.reg, Logger: d.log}); err != nil {
		return nil, err
	}
	rooms.gate, err = gate.New(gate.Options{
		// The gate judges from the kubelet's own status (a container that
		// survived probed's restart and is started per the kubelet keeps
		// its condition until probed's first verdict), not from the
		// overlay the manager reads.
		Pods:          gate.PodLookupFunc(rooms.statuses.KubeletPod),
		Client:        rooms.client,
		Readiness:     d.results[runtime.Readiness],
		Startup:       d.results[runtime.Startup],
		ConditionType: v1.PodConditionType(c.ReadinessGate),
		QPS:           c.StatusQPS,
		Burst:         c.StatusBurst,
		Probes:        d.podProbes,
		Refusal:       rooms.limits.Refusal,
		Guard:         rooms.guard.Condition,
		Registerer:    d.reg,
		Logger:        d.log,
	})
	if err != nil {
		return nil, err
	}
	if rooms.actuator, err = rooms.livenessActuator(d); err != nil {
		return nil, err
	}
	livenessActuator := &service{name: "liveness actuator", run: rooms.actuator.Run, stopFirst: true}
	d.onClose(livenessActuator.stopUnstarted)
	actuator := actuate.OnFailure(rooms.statuses.Pod, rooms.actuator)
	return &mode{
		source:    rooms.source,
		status:    rooms.statuses,
		pods:      rooms.statuses,
		runner:    runner,
		egress:    rooms.egress,
		recorder:  rooms.recorder,
		runEvents: events.Tee(d.events.Unlogged(), kev),
		probes:    policy,
		bind:      func(m manager.Manager) { rooms.statuses.SetProber(m) },
		managerOptions: func(o *manager.Options) {
			o.AnyRunningSurvives = true // the gate's existing condition is kept until probed's first verdict
			o.Admit = rooms.limits.Admit
		},
		// The limits before the gate: a pod's refusal is known when the
		// gate first decides its condition.
		listeners: listeners{rooms.statuses, rooms.limits, rooms.guard, rooms.gate},
		consumers: []verdicts.Consumer{rooms.statuses, rooms.gate, actuator},
		// The verdict's event says what the actuator decided, before it
		// acts (a refused restart is announced refused).
		consequence: func(rec manager.RunRecord) string {
			what, _ := actuator.Consequence(rec.ProbeType, rec.PodUID, rec.ContainerID)
			return what
		},
		onSync: rooms.statuses.Resync,
		services: []*service{
			// The condition writer and the liveness actions stop as
			// shutdown begins: nothing is written while the probes drain
			// (SIGTERM writes no False anywhere).
			{name: "condition writer", run: rooms.gate.Run, stopFirst: true},
			livenessActuator,
			{name: "panic threshold", run: rooms.guard.Run, stopFirst: true},
			eventSink,
		},
		manifests: func() source.Report { return source.NewReport(source.SourceCluster, "") },
		page: func(o *statuspage.Options) {
			o.Cluster = func() statuspage.Cluster {
				return statuspage.Cluster{Node: c.NodeName, Synced: rooms.source.HasSynced(),
					WritesFailing: rooms.gate.WritesFailing(), WritesPending: rooms.gate.WritesPending(), ConditionType: string(rooms.gate.ConditionType()),
					Held: rooms.guardsHeld()}
			}
		},
		guards:   func() guards.Report { return guards.Report{Held: rooms.guardsHeld()} },
		held:     rooms.budgetHeld,
		startMsg: "probed running in cluster mode",
		startLog: []any{"node", c.NodeName, "readinessGate", c.ReadinessGate, "allowProbeHost", rooms.egress.Allowed(),
			"livenessAction", c.LivenessAction, "containerRuntime", c.ContainerRuntimeEndpoint},
	}, nil
}

// execRunner connects to the container runtime (ContainerRuntimeEndpoint)
// and builds the exec probes' runner: the resident helpers' (ExecModeResident),
// the runtime's ExecSync, or none without the runtime (the annotation
// refuses exec then, ExecUnavailable).
func (p *clusterRooms) execRunner(d deps) (probeexec.ModeRunner, error) {
	c := d.opts.Cluster
	if c.ContainerRuntimeEndpoint == "" {
		return probeexec.DisabledRunner{}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), cri.DefaultRequestTimeout)
	defer cancel()
	var err error
	if p.cri, err = cri.Connect(ctx, cri.Options{Endpoint: c.ContainerRuntimeEndpoint, Registerer: d.reg, Logger: d.log}); err != nil {
		return nil, fmt.Errorf("cluster mode: %w", err)
	}
	// After the drain: exec probes and restarts use it.
	d.onClose(func(context.Context) error { return p.cri.Close() })
	if c.ExecMode != ExecModeResident {
		return p.cri.Runner(), nil
	}
	if p.resident, err = resident.New(resident.Options{
		Runtime:  p.cri,
		ExecSync: p.cri.Runner(),
		Recorder: p.recorder,
		Pod: func(statusID string) (*v1.Pod, string, bool) {
			if p.statuses == nil {
				return nil, "", false
			}
			return p.statuses.ContainerPod(statusID)
		},
		Registerer: d.reg,
		Logger:     d.log,
	}); err != nil {
		return nil, fmt.Errorf("cluster mode: %w", err)
	}
	// Before the runtime's connection closes: the helpers end first.
	d.onClose(func(context.Context) error {
		ctx, cancel := context.WithTimeout(context.Background(), helpersCloseBound)
		defer cancel()
		_ = p.resident.Close(ctx)
		return nil
	})
	return p.resident, nil
}

// budgetHeld lists every probe of the pod's view that the node's probe
// budget holds back (mode.held).
func (p *clusterRooms) budgetHeld(pod *v1.Pod, view *podprobes.View) []history.Refused {
	msg, held := p.limits.BudgetRefusal(pod.UID)
	if !held {
		return nil
	}
	var out []history.Refused
	for i := range view.Probes {
		if pr := &view.Probes[i]; pr.Origin != runtime.OriginSpec {
			out = append(out, history.Refused{Container: pr.Container.Name, Type: pr.Type.Lower(), Origin: pr.Origin.String(),
				Field: pr.Field.String(), Reason: bound.Cut(limits.ReasonProbeBudgetExceeded+": "+msg, bound.MessageBytes)})
		}
	}
	return out
}

// livenessActuator builds the actuator of --liveness-action: the queue of
// agent/actuate around the action's step (event, evict or restart through
// the container runtime), the namespace scope around evict and restart.
func (p *clusterRooms) livenessActuator(d deps) (*actuate.Queue, error) {
	c := d.opts.Cluster
	opts := actuate.Options{Recorder: p.recorder, Logger: d.log}
	var step actuate.Step
	var err error
	switch c.LivenessAction {
	case LivenessActionEvent:
		opts.Step, opts.Texts = actuate.EventStep, actuate.EventTexts
		return actuate.New(opts)
	case LivenessActionEvict:
		opts.Texts = evict.Texts
		step, err = evict.New(evict.Options{Client: p.client, Recorder: p.recorder, Logger: d.log})
	case LivenessActionRestart:
		if p.cri == nil {
			return nil, fmt.Errorf("--liveness-action=restart needs the container runtime: --container-runtime-endpoint")
		}
		opts.Texts, opts.Workers = restart.Texts, restart.DefaultWorkers
		step, err = restart.New(restart.Options{
			Runtime:        p.cri,
			Recorder:       p.recorder,
			MaxGracePeriod: c.LivenessActionMaxGracePeriod,
			// A preStop httpGet hook is the tenant's too: it connects
			// under the pod's egress policy, as its probes do.
			HookContext: func(ctx context.Context, pod *v1.Pod) context.Context {
				return egress.WithPolicy(ctx, p.egress.Policy(podAddrs(pod)...))
			},
			// The probe that failed, for its terminationGracePeriodSeconds
			// (K3).
			Probe: func(pod *v1.Pod, container string, t runtime.ProbeType) *v1.Probe {
				probes, _ := d.podProbes(pod)
				if p := probes.Find(container, t); p != nil {
					return p.Probe
				}
				return nil
			},
			Logger: d.log,
		})
	default:
		return nil, fmt.Errorf("--liveness-action %q: want event, evict or restart", c.LivenessAction)
	}
	if err != nil {
		return nil, err
	}
	scope, err := nsscope.New(p.client, c.LivenessActionNamespaces)
	if err != nil {
		return nil, err
	}
	// The restart budget outermost: a failure the scope refuses takes no
	// room of it.
	if p.budget, err = actuate.RestartBudget(nsscope.Guard(scope, step), actuate.BudgetOptions{Pods: p.statuses.Pods, Registerer: d.reg}); err != nil {
		return nil, err
	}
	opts.Step = p.budget
	opts.Services = []func(context.Context) error{scope.Run}
	return actuate.New(opts)
}

// podAddrs are the pod's IPs (status.podIP and status.podIPs) as addresses.
func podAddrs(pod *v1.Pod) []netip.Addr {
	var out []netip.Addr
	for _, s := range append([]string{pod.Status.PodIP}, podIPStrings(pod.Status.PodIPs)...) {
		if ip, err := netip.ParseAddr(s); err == nil {
			out = append(out, ip)
		}
	}
	return out
}

func podIPStrings(ips []v1.PodIP) []string {
	out := make([]string, len(ips))
	for i, ip := range ips {
		out[i] = ip.IP
	}
	return out
}
