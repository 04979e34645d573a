package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/probed/probed/agent"
	"github.com/probed/probed/internal/version"
	"github.com/probed/probed/manager/customprobe"
	"github.com/probed/probed/runtime/egress"
)

// kubeFlags are the flags of cluster mode (docs/cluster.md), named after
// the kubelet's and kubectl's.
type kubeFlags struct {
	kubeconfig     string
	inCluster      bool
	readinessGate  string
	livenessAction string
	statusQPS      float64
	statusBurst    int
	// allowProbeHost: where probes may connect besides their pod's IPs
	// (runtime/egress).
	allowProbeHost []string

	// What one pod may ask of the node (agent/kube/limits).
	maxProbesPerPod int
	minProbePeriod  time.Duration
	maxProbeRate    float64
	// namespaceProbeRateShare is the most of maxProbeRate one namespace
	// holds.
	namespaceProbeRateShare float64

	livenessActionNamespaces string
	// The cap of a restart's grace period (agent/kube/restart).
	livenessActionMaxGracePeriod time.Duration

	// The container runtime.
	criEndpoint string
	// How exec probes run in their container.
	execMode string
}

func (k *kubeFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&k.kubeconfig, "kubeconfig", "", "cluster mode: kubeconfig file of the API server to watch this node's pods through")
	f.BoolVar(&k.inCluster, "in-cluster", false, "cluster mode: reach the API server with the pod's service account (probed as a DaemonSet)")
	f.StringVar(&k.readinessGate, "readiness-gate", agent.DefaultReadinessGate, "cluster mode: the pod condition probed owns, for pods that list it in spec.readinessGates")
	f.StringVar(&k.livenessAction, "liveness-action", envDefault(EnvLivenessAction, agent.LivenessActionEvent), "cluster mode: what a liveness or startup failure does: event (an Event), evict (one Eviction per container instance, honouring PodDisruptionBudgets) or restart (the container is stopped as by the kubelet's liveness kill, preStop hook first; needs --container-runtime-endpoint); default $"+EnvLivenessAction+", else event")
	f.Float64Var(&k.statusQPS, "status-qps", agent.DefaultStatusQPS, "cluster mode: condition patches per second, all pods together")
	f.IntVar(&k.statusBurst, "status-burst", agent.DefaultStatusBurst, "cluster mode: condition patches allowed in a burst above --status-qps")

	f.IntVar(&k.maxProbesPerPod, "max-probes-per-pod", agent.DefaultMaxProbesPerPod, "cluster mode: most probes one pod's probed.io/probes annotation may declare; a longer list runs none (0: no limit)")
	f.DurationVar(&k.minProbePeriod, "min-probe-period", agent.DefaultMinProbePeriod, "cluster mode: shortest period an annotation probe may have, at least 100ms; a shorter one is refused")
	f.Float64Var(&k.maxProbeRate, "max-probe-rate", agent.DefaultMaxProbeRate, "cluster mode: the node's budget of annotation probe runs per second, all pods together, divided among the namespaces by fair share; a pod that would exceed its namespace's share or the budget runs none of its probes until others leave room (0: no budget)")
	f.Float64Var(&k.namespaceProbeRateShare, "namespace-probe-rate-share", agent.DefaultNamespaceProbeRateShare, "cluster mode: the most of --max-probe-rate one namespace may hold, a fraction (0 or 1: no cap beyond its fair share among the namespaces that ask); a namespace alone on the node leaves the rest to the namespaces that come later")

	f.StringSliceVar(&k.allowProbeHost, "allow-probe-host", nil, "cluster mode: CIDRs probes may connect to besides their pod's IPs (httpGet.host, tcpSocket.host, plugins' targets); none by default: a probe connects only to its pod's IP")

	f.StringVar(&k.livenessActionNamespaces, "liveness-action-namespaces", agent.DefaultLivenessActionNamespaces,
		"cluster mode, --liveness-action=evict or restart: a label selector on namespaces; the action is taken only in the namespaces it selects (kubernetes.io/metadata.name selects all), elsewhere a failure is an Event saying why")
	f.DurationVar(&k.livenessActionMaxGracePeriod, "liveness-action-max-grace-period", agent.DefaultLivenessActionMaxGracePeriod,
		"cluster mode, --liveness-action=restart: the longest grace period (preStop hook and stop together) a restart gives a container, whatever its probe and pod ask; then the container is killed, as the kubelet's stop does after its grace period; at least 2s")

	f.StringVar(&k.execMode, "exec-mode", envDefault(EnvExecMode, agent.ExecModeExecSync), "cluster mode with --container-runtime-endpoint: how exec probes run in their container: execsync (the runtime's ExecSync per run, as the kubelet does) or resident (through one resident helper process per container, started once through the runtime's streaming exec; 0.12–0.24× the node's CPU per run of ExecSync, measured; docs/cluster.md); default $"+EnvExecMode+", else execsync")
	f.StringVar(&k.criEndpoint, "container-runtime-endpoint", os.Getenv(EnvContainerRuntimeEndpoint), "cluster mode: the node's container runtime (CRI), as the kubelet's flag: unix:///run/containerd/containerd.sock; annotation exec probes then run in their container, and --liveness-action=restart is possible. Default $"+EnvContainerRuntimeEndpoint+", else off: the socket is root on the node (docs/cluster.md)")
}

// The environment variables that give three cluster-mode flags their
// defaults (a flag given wins). They are the switches of an installed
// DaemonSet: a container's env merges by name, so `kubectl set env` or a
// strategic-merge patch turns one on without restating the args list, and a
// later `kubectl apply` of the plain manifests (which do not set them) keeps
// them (docs/cluster.md "Install").
const (
	EnvLivenessAction           = "PROBED_LIVENESS_ACTION"
	EnvExecMode                 = "PROBED_EXEC_MODE"
	EnvContainerRuntimeEndpoint = "PROBED_CONTAINER_RUNTIME_ENDPOINT"
)

// envDefault is $name, or def when it is unset or empty.
func envDefault(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// cluster returns the cluster-mode options, or nil without --kubeconfig and
// --in-cluster (manifest mode). Manifest-mode flags are refused with them.
func (k *kubeFlags) cluster(cmd *cobra.Command, node string) (*agent.ClusterOptions, error) {
	if k.kubeconfig == "" && !k.inCluster {
		for _, name := range []string{"readiness-gate", "liveness-action", "status-qps", "status-burst", "allow-probe-host", "max-probes-per-pod", "min-probe-period", "max-probe-rate", "namespace-probe-rate-share", "liveness-action-namespaces", "liveness-action-max-grace-period", "container-runtime-endpoint", "exec-mode"} {
			if cmd.Flags().Changed(name) {
				return nil, fmt.Errorf("--%s needs cluster mode (--kubeconfig or --in-cluster)", name)
			}
		}
		return nil, nil
	}
	if k.kubeconfig != "" && k.inCluster {
		return nil, errors.New("--kubeconfig and --in-cluster exclude each other")
	}
	for _, name := range []string{"manifests", "pod-ip", "allow-host-exec", "on-restart", "state-dir"} {
		if cmd.Flags().Changed(name) {
			return nil, fmt.Errorf("--%s is for manifest mode; in cluster mode the kubelet owns containers and statuses", name)
		}
	}
	if k.maxProbesPerPod < 0 || k.maxProbeRate < 0 {
		return nil, errors.New("--max-probes-per-pod and --max-probe-rate must be 0 (no limit) or more")
	}
	if k.namespaceProbeRateShare < 0 || k.namespaceProbeRateShare > 1 {
		return nil, fmt.Errorf("--namespace-probe-rate-share %v: want a fraction from 0 to 1 (0: no cap)", k.namespaceProbeRateShare)
	}
	if k.livenessActionMaxGracePeriod < 2*time.Second {
		return nil, fmt.Errorf("--liveness-action-max-grace-period %v: must be at least 2s, the least grace period a container is stopped with (the kubelet's)", k.livenessActionMaxGracePeriod)
	}
	if k.minProbePeriod != 0 && k.minProbePeriod < customprobe.MinPeriod {
		return nil, fmt.Errorf("--min-probe-period %v: must be at least %v, the shortest period probed runs", k.minProbePeriod, customprobe.MinPeriod)
	}
	switch k.execMode {
	case agent.ExecModeExecSync:
	case agent.ExecModeResident:
		if k.criEndpoint == "" {
			return nil, errors.New("--exec-mode=resident needs --container-runtime-endpoint (exec probes run in their container through the runtime)")
		}
	default:
		return nil, fmt.Errorf("--exec-mode %q: want execsync or resident", k.execMode)
	}
	allow, err := egress.ParseRule(k.allowProbeHost)
	if err != nil {
		return nil, err
	}
	var cfg *rest.Config
	if k.inCluster {
		cfg, err = rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("--in-cluster: %w", err)
		}
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags("", k.kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig %s: %w", k.kubeconfig, err)
		}
	}
	cfg.UserAgent = "probed/" + version.Get().Version
	return &agent.ClusterOptions{
		Config:         cfg,
		NodeName:       node,
		ReadinessGate:  k.readinessGate,
		LivenessAction: k.livenessAction,
		StatusQPS:      k.statusQPS,
		StatusBurst:    k.statusBurst,
		AllowProbeHost: allow.Allowed(),

		MaxProbesPerPod: k.maxProbesPerPod,
		MinProbePeriod:  k.minProbePeriod,
		MaxProbeRate:    k.maxProbeRate,

		NamespaceProbeRateShare: k.namespaceProbeRateShare,

		LivenessActionNamespaces:     k.livenessActionNamespaces,
		LivenessActionMaxGracePeriod: k.livenessActionMaxGracePeriod,

		ContainerRuntimeEndpoint: k.criEndpoint,
		ExecMode:                 k.execMode,
	}, nil
}
