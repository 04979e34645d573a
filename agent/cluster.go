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
	"github.com/probed/probed/agent/verdicts"
	"github.com/probed/probed/manager"
	"github.com/probed/probed/manager/customprobe"
	"github.com/probed/probed/manager/podprobes"
	probeexec "github.com/probed/probed/plugins/exec"
	"github.com/probed/probed/runtime"
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
	// The CLI's limits on what one pod may ask of the node (issue 17 §2,
	// docs/cluster.md "Security model"): at most 32 annotation probes a
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

// clusterParts are the rooms of cluster mode.
type clusterParts struct {
	client   kubernetes.Interface
	events   *kevents.Recorder
	source   *podsource.Source
	statuses *podsource.Statuses
	gate     *gate.Writer
	guard    *panicthreshold.Guard // the readiness panic threshold
	budget   *actuate.Budget       // with LivenessActionEvict or LivenessActionRestart
	limits   *limits.Room
	actuator *actuate.Queue
	cri      *cri.Client      // with ContainerRuntimeEndpoint
	resident *resident.Runner // with ExecModeResident
}

// stop ends the goroutines the event sink and the actuator start in their
// New, for an agent that New fails to finish (Run never starts them), and
// closes the connection to the container runtime (New's undo, and the
// end of Run).
func (p *clusterParts) stop(context.Context) error {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if p.events != nil {
		_ = p.events.Run(done)
	}
	if p.actuator != nil {
		_ = p.actuator.Run(done)
	}
	return p.closeRuntime()
}

// closeRuntime ends the resident exec helpers and closes the container
// runtime's connection, once.
func (p *clusterParts) closeRuntime() error {
	if p.resident != nil {
		ctx, cancel := context.WithTimeout(context.Background(), helpersCloseBound)
		_ = p.resident.Close(ctx)
		cancel()
		p.resident = nil
	}
	if p.cri == nil {
		return nil
	}
	c := p.cri
	p.cri = nil
	return c.Close()
}

// helpersCloseBound bounds the helpers' own end at shutdown (each kills
// what it runs and exits when its stdin closes: milliseconds); then their
// sessions are cut.
const helpersCloseBound = 10 * time.Second

// connectCluster builds the API client and the event sink: every event
// goes to the local ring and log and to the API server (events.Tee).
func (a *Agent) connectCluster() error {
	c := a.opts.Cluster
	if c.Config == nil {
		return fmt.Errorf("cluster mode: no API server configuration")
	}
	if c.NodeName == "" {
		return fmt.Errorf("cluster mode: no node name (--node-name or NODE_NAME)")
	}
	if c.ReadinessGate == "" {
		c.ReadinessGate = DefaultReadinessGate
	}
	if c.LivenessAction == "" {
		c.LivenessAction = LivenessActionEvent
	}
	client, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return fmt.Errorf("cluster mode: %w", err)
	}
	kev, err := kevents.New(kevents.Options{Client: client, NodeName: c.NodeName, Log: a.log})
	if err != nil {
		return fmt.Errorf("cluster mode: %w", err)
	}
	a.cluster = &clusterParts{client: client, events: kev}
	a.recorder = events.Tee(a.events, kev)
	switch c.ExecMode {
	case "":
		c.ExecMode = ExecModeExecSync
	case ExecModeExecSync:
	case ExecModeResident:
		if c.ContainerRuntimeEndpoint == "" {
			_ = a.cluster.stop(context.Background())
			return errors.New("--exec-mode=resident needs the container runtime: --container-runtime-endpoint")
		}
	default:
		_ = a.cluster.stop(context.Background())
		return fmt.Errorf("--exec-mode %q: want execsync or resident", c.ExecMode)
	}
	if c.ContainerRuntimeEndpoint != "" {
		ctx, cancel := context.WithTimeout(context.Background(), cri.DefaultRequestTimeout)
		defer cancel()
		if a.cluster.cri, err = cri.Connect(ctx, cri.Options{Endpoint: c.ContainerRuntimeEndpoint, Registerer: a.reg, Log: a.log}); err != nil {
			_ = a.cluster.stop(context.Background())
			return fmt.Errorf("cluster mode: %w", err)
		}
	}
	if c.ExecMode == ExecModeResident {
		parts := a.cluster
		if parts.resident, err = resident.New(resident.Options{
			Runtime:  parts.cri,
			ExecSync: parts.cri.Runner(),
			Recorder: a.recorder,
			Pod: func(statusID string) (*v1.Pod, string, bool) {
				if parts.statuses == nil {
					return nil, "", false
				}
				return parts.statuses.ContainerPod(statusID)
			},
			Registerer: a.reg,
			Log:        a.log,
		}); err != nil {
			_ = a.cluster.stop(context.Background())
			return fmt.Errorf("cluster mode: %w", err)
		}
	}
	return nil
}

// execRunner is the exec probes' runner in cluster mode: the resident
// helpers', the container runtime's ExecSync, or none (the annotation
// refuses exec then, ExecUnavailable).
func (p *clusterParts) execRunner() probeexec.Runner {
	switch {
	case p.resident != nil:
		return p.resident
	case p.cri == nil:
		return probeexec.DisabledRunner{}
	}
	return p.cri.Runner()
}

// execMode is how the exec probes of a container (its status ID) run, for
// the status views: "execsync", or the resident runner's Mode.
func (p *clusterParts) execMode(statusID string) string {
	switch {
	case p.resident != nil:
		return p.resident.Mode(statusID)
	case p.cri != nil:
		return ExecModeExecSync
	}
	return ""
}

// clusterMode builds the rooms of cluster mode: the node's pods from one
// informer, the kubelet's statuses with probed's Started as the manager's
// status provider, the readiness-gate condition writer, the liveness
// actuator (event or evict). The kubelet runs the spec's probes: the
// manager runs only the probed.io/probes annotation's.
func (a *Agent) clusterMode() (*mode, error) {
	c, parts := a.opts.Cluster, a.cluster
	var err error
	if parts.source, err = podsource.New(podsource.Options{Client: parts.client, NodeName: c.NodeName, ReadinessGate: c.ReadinessGate, Logger: a.log}); err != nil {
		return nil, err
	}
	parts.statuses = podsource.NewStatuses()
	// Cluster mode's policy, applied once per pod and spec change where
	// pods come in (the reconciler): the kubelet runs the spec's probes;
	// the annotation's and those the offload webhook moved run under the
	// egress rule and the per-pod limits, exec ones only with the
	// container runtime.
	execRefused := ""
	if parts.cri == nil {
		execRefused = ExecUnavailable
	}
	policy := podprobes.Cluster(ClusterAnnotationOptions(a.egress, c.MaxProbesPerPod, c.MinProbePeriod), execRefused)
	parts.limits = limits.New(limits.Options{MaxRate: c.MaxProbeRate, MaxRateFlag: "--max-probe-rate",
		NamespaceShare: c.NamespaceProbeRateShare, NamespaceShareFlag: "--namespace-probe-rate-share",
		Recorder: a.recorder, Logger: a.log})
	if parts.guard, err = panicthreshold.New(panicthreshold.Options{Client: parts.client, Recorder: a.recorder,
		Requeue: func(uid types.UID) { parts.gate.Requeue(uid) }, Registerer: a.reg, Log: a.log}); err != nil {
		return nil, err
	}
	parts.gate, err = gate.New(gate.Options{
		// The gate judges from the kubelet's own status (a container that
		// survived probed's restart and is started per the kubelet keeps
		// its condition until probed's first verdict), not from the
		// overlay the manager reads.
		Pods:          gate.PodLookupFunc(parts.statuses.KubeletPod),
		Client:        parts.client,
		Readiness:     a.results[runtime.Readiness],
		Startup:       a.results[runtime.Startup],
		ConditionType: v1.PodConditionType(c.ReadinessGate),
		QPS:           c.StatusQPS,
		Burst:         c.StatusBurst,
		Probes:        a.podProbes,
		Refusal:       parts.limits.Refusal,
		Guard:         parts.guard.Verdict,
		Registerer:    a.reg,
		Logger:        a.log,
	})
	if err != nil {
		return nil, err
	}
	if parts.actuator, err = a.livenessActuator(); err != nil {
		return nil, err
	}
	actuator := actuate.OnFailure(parts.statuses.Pod, parts.actuator)
	return &mode{
		source: parts.source,
		status: parts.statuses,
		pods:   parts.statuses,
		probes: policy,
		bind:   func(m manager.Manager) { parts.statuses.SetProber(m) },
		managerOptions: func(o *manager.Options) {
			o.AnyRunningSurvives = true // the gate's existing condition is kept until probed's first verdict
			o.Admit = parts.limits.Admit
		},
		// The limits before the gate: a pod's refusal is known when the
		// gate first decides its condition.
		listeners: listeners{parts.statuses, parts.limits, parts.guard, parts.gate},
		consumers: []verdicts.Consumer{parts.statuses, parts.gate, actuator},
		// The verdict's event says what the actuator decided, before it
		// acts (a refused restart is announced refused).
		consequence: func(rec manager.RunRecord) string {
			what, _ := actuator.Consequence(rec.ProbeType, rec.PodUID, rec.ContainerID)
			return what
		},
		onSync: parts.statuses.Resync,
		services: []service{
			// The condition writer and the evictions stop as shutdown
			// begins: nothing is written while the probes drain (issue 10
			// §2.6: SIGTERM writes no False anywhere).
			{name: "condition writer", run: parts.gate.Run, stopFirst: true},
			{name: "liveness actuator", run: parts.actuator.Run, stopFirst: true},
			{name: "panic threshold", run: parts.guard.Run, stopFirst: true},
			// Events flush after the drain.
			{name: "event sink", run: parts.events.Run},
		},
	}, nil
}

// livenessActuator builds the actuator of --liveness-action: the queue of
// agent/actuate around the action's step (event, evict or restart through
// the container runtime), the namespace scope around evict and restart,
// and the restart budget around both.
func (a *Agent) livenessActuator() (*actuate.Queue, error) {
	c, parts := a.opts.Cluster, a.cluster
	opts := actuate.Options{Recorder: a.recorder, Log: a.log}
	var step actuate.Step
	var err error
	switch c.LivenessAction {
	case LivenessActionEvent:
		opts.Step, opts.Texts = actuate.EventStep, actuate.EventTexts
		return actuate.New(opts)
	case LivenessActionEvict:
		opts.Texts = evict.Texts
		step, err = evict.New(evict.Options{Client: parts.client, Recorder: a.recorder, Log: a.log})
	case LivenessActionRestart:
		if parts.cri == nil {
			return nil, fmt.Errorf("--liveness-action=restart needs the container runtime: --container-runtime-endpoint")
		}
		opts.Texts, opts.Workers = restart.Texts, restart.DefaultWorkers
		step, err = restart.New(restart.Options{
			Runtime:        parts.cri,
			Recorder:       a.recorder,
			MaxGracePeriod: c.LivenessActionMaxGracePeriod,
			// A preStop httpGet hook is the tenant's too: it connects
			// under the pod's egress policy, as its probes do.
			HookContext: func(ctx context.Context, pod *v1.Pod) context.Context {
				if a.egress == nil {
					return ctx
				}
				return egress.WithPolicy(ctx, a.egress.Policy(podAddrs(pod)...))
			},
			// The probe that failed, for its terminationGracePeriodSeconds
			// (K3).
			Probe: func(pod *v1.Pod, container string, t runtime.ProbeType) *v1.Probe {
				probes, _ := a.podProbes(pod)
				if p := probes.Find(container, t); p != nil {
					return p.Probe
				}
				return nil
			},
			Log: a.log,
		})
	default:
		return nil, fmt.Errorf("--liveness-action %q: want event, evict or restart", c.LivenessAction)
	}
	if err != nil {
		return nil, err
	}
	scope, err := nsscope.New(parts.client, c.LivenessActionNamespaces)
	if err != nil {
		return nil, err
	}
	// The restart budget outermost: a failure the scope refuses takes no
	// room of it.
	if parts.budget, err = actuate.RestartBudget(nsscope.Guard(scope, step), actuate.BudgetOptions{Pods: parts.statuses.Pods, Registerer: a.reg}); err != nil {
		return nil, err
	}
	opts.Step = parts.budget
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
