package agent

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/probed/probed/agent/actuate"
	"github.com/probed/probed/agent/events"
	"github.com/probed/probed/agent/kube/evict"
	"github.com/probed/probed/agent/kube/gate"
	"github.com/probed/probed/agent/kube/kevents"
	"github.com/probed/probed/agent/kube/limits"
	"github.com/probed/probed/agent/kube/podsource"
	"github.com/probed/probed/agent/verdicts"
	"github.com/probed/probed/manager"
	"github.com/probed/probed/manager/customprobe"
	"github.com/probed/probed/runtime"
)

// Cluster mode's defaults (docs/cluster.md).
const (
	// DefaultReadinessGate is the pod condition probed owns by default.
	DefaultReadinessGate = string(gate.DefaultConditionType)
	// LivenessActionEvent and LivenessActionEvict are the values of
	// --liveness-action.
	LivenessActionEvent = string(evict.ActionEvent)
	LivenessActionEvict = string(evict.ActionEvict)
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
)

// ReasonInvalidProbeAnnotation is the reason of the Event about an invalid
// probed.io/probes annotation (and of the condition, when it holds a
// readiness or startup probe back).
const ReasonInvalidProbeAnnotation = limits.ReasonInvalidProbeAnnotation

// ExecUnavailable is why an exec probe of the probed.io/probes annotation is
// rejected in cluster mode.
const ExecUnavailable = "exec probes need the container runtime, which the kubelet owns in cluster mode; use httpGet, tcpSocket, grpc or a plugin"

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
	// LivenessAction is LivenessActionEvent (default) or
	// LivenessActionEvict.
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
	// AllowProbeHost are the ranges probes may connect to besides their
	// pod's IPs (--allow-probe-host; none by default): the egress rule of
	// cluster mode (runtime/egress, docs/cluster.md "Where probes
	// connect").
	AllowProbeHost []netip.Prefix
}

// clusterParts are the rooms of cluster mode.
type clusterParts struct {
	client   kubernetes.Interface
	events   *kevents.Recorder
	source   *podsource.Source
	statuses *podsource.Statuses
	gate     *gate.Writer
	limits   *limits.Room
	actuator *evict.Actuator
}

// stop ends the goroutines the event sink and the actuator start in their
// New, for an agent that New fails to finish (Run never starts them).
func (p *clusterParts) stop(context.Context) error {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if p.events != nil {
		_ = p.events.Run(done)
	}
	if p.actuator != nil {
		_ = p.actuator.Run(done)
	}
	return nil
}

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
	return nil
}

// clusterMode builds the rooms of cluster mode: the node's pods from one
// informer, the kubelet's statuses with probed's Started as the manager's
// status provider, the readiness-gate condition writer, the liveness
// actuator (event or evict). The kubelet runs the spec's probes: the
// manager runs only the probed.io/probes annotation's.
func (a *Agent) clusterMode() (*mode, error) {
	c, parts := a.opts.Cluster, a.cluster
	action, err := evict.ParseAction(c.LivenessAction)
	if err != nil {
		return nil, err
	}
	if parts.source, err = podsource.New(podsource.Options{Client: parts.client, NodeName: c.NodeName, Logger: a.log}); err != nil {
		return nil, err
	}
	parts.statuses = podsource.NewStatuses()
	annotation := customprobe.Options{ExecUnavailable: ExecUnavailable, Egress: a.egress, Limits: customprobe.Limits{
		MaxProbes: c.MaxProbesPerPod, MaxProbesFlag: "--max-probes-per-pod",
		MinPeriod: c.MinProbePeriod, MinPeriodFlag: "--min-probe-period",
	}}
	parts.limits = limits.New(limits.Options{Annotation: annotation, MaxRate: c.MaxProbeRate, MaxRateFlag: "--max-probe-rate",
		Recorder: a.recorder, Logger: a.log})
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
		Probes: func(pod *v1.Pod) []customprobe.Probe {
			probes, _ := parts.limits.Parse(pod)
			return probes
		},
		Refusal:    parts.limits.Refusal,
		Registerer: a.reg,
		Logger:     a.log,
	})
	if err != nil {
		return nil, err
	}
	if parts.actuator, err = evict.New(evict.Options{Action: action, Client: parts.client, Recorder: a.recorder, Log: a.log}); err != nil {
		return nil, err
	}
	return &mode{
		source: parts.source,
		status: parts.statuses,
		pods:   parts.statuses,
		bind:   func(m manager.Manager) { parts.statuses.SetProber(m) },
		managerOptions: func(o *manager.Options) {
			o.SkipSpecProbes = true
			o.Annotation = annotation
			o.Admit = parts.limits.Admit
		},
		// The limits before the gate: a pod's refusal is known when the
		// gate first decides its condition.
		listeners: listeners{parts.statuses, parts.limits, parts.gate},
		consumers: []verdicts.Consumer{parts.statuses, parts.gate, actuate.OnFailure(parts.statuses.Pod, parts.actuator)},
		onSync:    parts.statuses.Resync,
		services: []service{
			// The condition writer and the evictions stop as shutdown
			// begins: nothing is written while the probes drain (issue 10
			// §2.6: SIGTERM writes no False anywhere).
			{name: "condition writer", run: parts.gate.Run, stopFirst: true},
			{name: "liveness actuator", run: parts.actuator.Run, stopFirst: true},
			// Events flush after the drain.
			{name: "event sink", run: parts.events.Run},
		},
	}, nil
}
