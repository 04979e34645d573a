package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/probed/probed/agent"
	"github.com/probed/probed/internal/version"
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

	livenessActionNamespaces string
}

func (k *kubeFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&k.kubeconfig, "kubeconfig", "", "cluster mode: kubeconfig file of the API server to watch this node's pods through")
	f.BoolVar(&k.inCluster, "in-cluster", false, "cluster mode: reach the API server with the pod's service account (probed as a DaemonSet)")
	f.StringVar(&k.readinessGate, "readiness-gate", agent.DefaultReadinessGate, "cluster mode: the pod condition probed owns, for pods that list it in spec.readinessGates")
	f.StringVar(&k.livenessAction, "liveness-action", agent.LivenessActionEvent, "cluster mode: what a liveness or startup failure does: event (an Event; the kubelet's restart is not probed's to do) or evict (one Eviction per container instance, honouring PodDisruptionBudgets)")
	f.Float64Var(&k.statusQPS, "status-qps", agent.DefaultStatusQPS, "cluster mode: condition patches per second, all pods together")
	f.IntVar(&k.statusBurst, "status-burst", agent.DefaultStatusBurst, "cluster mode: condition patches allowed in a burst above --status-qps")

	f.StringVar(&k.livenessActionNamespaces, "liveness-action-namespaces", agent.DefaultLivenessActionNamespaces,
		"cluster mode, --liveness-action=evict: a label selector on namespaces; pods are evicted only in the namespaces it selects (kubernetes.io/metadata.name selects all), elsewhere a failure is an Event saying why")
}

// cluster returns the cluster-mode options, or nil without --kubeconfig and
// --in-cluster (manifest mode). Manifest-mode flags are refused with them.
func (k *kubeFlags) cluster(cmd *cobra.Command, node string) (*agent.ClusterOptions, error) {
	if k.kubeconfig == "" && !k.inCluster {
		for _, name := range []string{"readiness-gate", "liveness-action", "status-qps", "status-burst", "liveness-action-namespaces"} {
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
	var cfg *rest.Config
	var err error
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

		LivenessActionNamespaces: k.livenessActionNamespaces,
	}, nil
}
