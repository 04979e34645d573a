package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/probed/probed/agent"
	"github.com/probed/probed/agent/kube/offload"
	"github.com/probed/probed/agent/kube/servingcert"
	"github.com/probed/probed/agent/kube/webhook"
	"github.com/probed/probed/internal/version"
	"github.com/probed/probed/manager/customprobe"
	"github.com/probed/probed/manager/podprobes"
	"github.com/probed/probed/runtime/egress"
	"github.com/probed/probed/runtime/redact"
)

// webhookFlags are the flags of `probed webhook`: its own, and the node
// agents' settings that decide what it moves (named as the agents' flags,
// so that the chart passes one value to both).
type webhookFlags struct {
	kubeconfig string
	inCluster  bool
	namespace  string
	listen     string
	namespaces string

	// What the node agents do.
	readinessGate            string
	livenessAction           string
	livenessActionNamespaces string
	agentRuntime             bool
	allowProbeHost           []string
	maxProbesPerPod          int
	minProbePeriod           time.Duration

	// The serving certificate.
	tlsSecret, service, configuration string
	tlsCertFile, tlsKeyFile           string
	tlsDNSNames                       []string
	tlsIPs                            []net.IP
}

// ExecStaysWithKubelet is why the webhook leaves exec probes to the kubelet
// when the node agents have no container runtime.
const ExecStaysWithKubelet = "the node agents run exec probes only with the container runtime (their --container-runtime-endpoint; the webhook's --agent-container-runtime)"

// newWebhookCmd is `probed webhook`: the offload webhook (package
// agent/kube/webhook, docs/cluster.md "Offload a namespace").
func newWebhookCmd(stderr io.Writer) *cobra.Command {
	var w webhookFlags
	var logs logFlags
	cmd := &cobra.Command{
		Use:   "webhook",
		Short: "Serve the offload webhook: move the probes of pods created in opted-in namespaces into probed's care",
		Long: `probed webhook is a mutating admission webhook for pod creations. In the namespaces that
--offload-namespaces selects (label probed.io/offload=enabled), never kube-system nor its own, it
takes each container's readinessProbe, startupProbe and livenessProbe out of the spec (the kubelet
runs none of them), records them unchanged in the pod's probed.io/offloaded annotation (the node
agents run them with the kubelet's semantics) and adds probed's readiness gate. It moves only what
the node agents run: give it their settings (--readiness-gate, --liveness-action,
--liveness-action-namespaces, --allow-probe-host, --max-probes-per-pod, --min-probe-period, and
--agent-container-runtime when they run with --container-runtime-endpoint). What stays with the
kubelet, and why, is in the pod's probed.io/offload annotation. Every pod is admitted: a webhook
that is down or cannot decide leaves the pod's probes to the kubelet.

Its serving certificate is its own (a CA and a certificate in --tls-secret, renewed before they
expire, the CA kept in the caBundle of --webhook-configuration), or another party's
(--tls-cert-file and --tls-private-key-file, e.g. cert-manager's).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logs.logger(stderr)
			if err != nil {
				return err
			}
			klog.SetSlogLogger(slog.New(redact.NewHandler(log.Handler())))
			opts, err := w.options(cmd, log)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return webhook.Run(ctx, *opts)
		},
	}
	logs.add(cmd)
	f := cmd.Flags()
	f.StringVar(&w.kubeconfig, "kubeconfig", "", "kubeconfig file of the API server")
	f.BoolVar(&w.inCluster, "in-cluster", false, "reach the API server with the pod's service account")
	f.StringVar(&w.namespace, "namespace", os.Getenv("POD_NAMESPACE"), "probed's own namespace (never offloaded; holds --tls-secret); default $POD_NAMESPACE")
	f.StringVar(&w.listen, "listen", ":8443", "HTTPS address of the webhook ("+webhook.PathMutate+", "+webhook.PathHealthz+", "+webhook.PathReadyz+", "+webhook.PathMetrics+")")
	f.StringVar(&w.namespaces, "offload-namespaces", offload.DefaultNamespaceSelector, "label selector of the namespaces whose new pods are offloaded (checked besides the configuration's namespaceSelector)")

	f.StringVar(&w.readinessGate, "readiness-gate", agent.DefaultReadinessGate, "the node agents' --readiness-gate: the condition added to the pods whose readiness or startup probes move")
	f.StringVar(&w.livenessAction, "liveness-action", agent.LivenessActionEvent, "the node agents' --liveness-action: liveness and startup probes move only with restart")
	f.StringVar(&w.livenessActionNamespaces, "liveness-action-namespaces", agent.DefaultLivenessActionNamespaces, "the node agents' --liveness-action-namespaces: with --liveness-action=restart, liveness and startup probes move in the namespaces it selects")
	f.BoolVar(&w.agentRuntime, "agent-container-runtime", false, "the node agents run with --container-runtime-endpoint: exec probes move")
	f.StringSliceVar(&w.allowProbeHost, "allow-probe-host", nil, "the node agents' --allow-probe-host: a probe with a host moves only when the agents allow it")
	f.IntVar(&w.maxProbesPerPod, "max-probes-per-pod", agent.DefaultMaxProbesPerPod, "the node agents' --max-probes-per-pod: a pod with more probes keeps them all with the kubelet")
	f.DurationVar(&w.minProbePeriod, "min-probe-period", agent.DefaultMinProbePeriod, "the node agents' --min-probe-period: a probe with a shorter period stays with the kubelet")

	f.StringVar(&w.tlsSecret, "tls-secret", "probed-webhook-tls", "the Secret in --namespace where the webhook keeps its own CA and serving certificate")
	f.StringVar(&w.service, "service", "probed-webhook", "the webhook's Service: its certificate is for <service>.<namespace>.svc")
	f.StringVar(&w.configuration, "webhook-configuration", "probed-offload", "the MutatingWebhookConfiguration whose caBundle the webhook keeps equal to its CA (\"\": none)")
	f.StringSliceVar(&w.tlsDNSNames, "tls-dns-name", nil, "more DNS names of the serving certificate")
	f.IPSliceVar(&w.tlsIPs, "tls-ip", nil, "IP addresses of the serving certificate (a configuration with a url to an IP)")
	f.StringVar(&w.tlsCertFile, "tls-cert-file", "", "serve this certificate (kept by another party, e.g. cert-manager; reread when it changes) instead of the webhook's own")
	f.StringVar(&w.tlsKeyFile, "tls-private-key-file", "", "the key of --tls-cert-file")
	return cmd
}

// options turns the flags into the webhook's options.
func (w *webhookFlags) options(cmd *cobra.Command, log *slog.Logger) (*webhook.Options, error) {
	if w.namespace == "" {
		return nil, errors.New("--namespace (or $POD_NAMESPACE) is required: probed's own namespace is never offloaded")
	}
	if (w.tlsCertFile == "") != (w.tlsKeyFile == "") {
		return nil, errors.New("--tls-cert-file and --tls-private-key-file go together")
	}
	switch w.livenessAction {
	case agent.LivenessActionEvent, agent.LivenessActionEvict:
	case agent.LivenessActionRestart:
		if !w.agentRuntime {
			return nil, errors.New("--liveness-action=restart: the node agents restart containers through the container runtime; give --agent-container-runtime too")
		}
	default:
		return nil, fmt.Errorf("--liveness-action %q: want event, evict or restart", w.livenessAction)
	}
	if w.maxProbesPerPod < 0 {
		return nil, errors.New("--max-probes-per-pod must be 0 (no limit) or more")
	}
	if w.minProbePeriod != 0 && w.minProbePeriod < customprobe.MinPeriod {
		return nil, fmt.Errorf("--min-probe-period %v: must be at least %v", w.minProbePeriod, customprobe.MinPeriod)
	}
	rule, err := egress.ParseRule(w.allowProbeHost)
	if err != nil {
		return nil, err
	}
	var cfg *rest.Config
	switch {
	case w.kubeconfig != "" && w.inCluster:
		return nil, errors.New("--kubeconfig and --in-cluster exclude each other")
	case w.inCluster:
		cfg, err = rest.InClusterConfig()
	case w.kubeconfig != "":
		cfg, err = clientcmd.BuildConfigFromFlags("", w.kubeconfig)
	default:
		return nil, errors.New("the webhook needs the API server: --kubeconfig or --in-cluster")
	}
	if err != nil {
		return nil, err
	}
	cfg.UserAgent = "probed-webhook/" + version.Get().Version
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	execRefused := ""
	if !w.agentRuntime {
		execRefused = ExecStaysWithKubelet
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	opts := &webhook.Options{
		Client: client,
		Offload: offload.Config{
			Policy:        podprobes.Cluster(agent.ClusterAnnotationOptions(rule, w.maxProbesPerPod, w.minProbePeriod), execRefused),
			ReadinessGate: v1.PodConditionType(w.readinessGate),
		},
		LivenessRestarts:         w.livenessAction == agent.LivenessActionRestart,
		LivenessActionNamespaces: w.livenessActionNamespaces,
		Namespaces:               w.namespaces,
		OwnNamespace:             w.namespace,
		Listen:                   w.listen,
		Registerer:               reg,
		Gatherer:                 reg,
		Logger:                   log,
	}
	if w.tlsCertFile != "" {
		for _, name := range []string{"tls-secret", "webhook-configuration", "tls-dns-name", "tls-ip"} {
			if cmd.Flags().Changed(name) {
				return nil, fmt.Errorf("--%s is for the webhook's own certificate; with --tls-cert-file another party keeps it", name)
			}
		}
		if opts.Certificates, err = servingcert.NewFiles(w.tlsCertFile, w.tlsKeyFile, nil); err != nil {
			return nil, err
		}
		return opts, nil
	}
	dns := append([]string{w.service + "." + w.namespace + ".svc", w.service + "." + w.namespace + ".svc.cluster.local"}, w.tlsDNSNames...)
	keeper, err := servingcert.New(servingcert.Options{Client: client, Namespace: w.namespace, Secret: w.tlsSecret,
		DNSNames: dns, IPs: w.tlsIPs, WebhookConfiguration: w.configuration, Logger: log})
	if err != nil {
		return nil, err
	}
	opts.Certificates = keeper
	return opts, nil
}
