// Package webhook is the offload webhook, `probed webhook`: a mutating
// admission webhook for pod creations that moves the probes of pods in the
// namespaces that opted in (label probed.io/offload=enabled) into probed's
// care (package agent/kube/offload), served over HTTPS with a certificate
// nobody keeps by hand (package agent/kube/servingcert). For pod updates it
// only takes out of the spec again the moved probes an update puts back
// (`kubectl apply` of a bare pod's manifest), so that re-applying the
// manifest of a moved pod changes nothing.
//
// Every answer allows the pod: a pod the webhook cannot decide about (the
// namespaces not read yet, a pod it cannot decode) comes through as it was
// sent, its probes the kubelet's, and so does every pod when the webhook is
// down (its configuration's failurePolicy is Ignore). kube-system and
// probed's own namespace are never touched, whatever the configuration's
// namespaceSelector says. The webhook has no side effects (sideEffects:
// None): a dry run is answered as any request, and an answer depends only
// on the pod and the namespaces' labels, so a reinvocation gives the same
// pod (offload.Move undoes an earlier move first).
package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/kubernetes"

	"github.com/probed/probed/agent/kube/nsscope"
	"github.com/probed/probed/agent/kube/offload"
)

// Paths of the webhook's HTTPS listener.
const (
	// PathMutate is the admission endpoint (the configuration's
	// clientConfig.service.path).
	PathMutate  = "/mutate-pods"
	PathHealthz = "/healthz"
	// PathReadyz answers 200 once a certificate is served and the
	// namespaces are read: the Service sends reviews to ready replicas
	// only.
	PathReadyz  = "/readyz"
	PathMetrics = "/metrics"
)

// NamespacesFlag names the setting of the selected namespaces in messages.
const NamespacesFlag = "--offload-namespaces"

// KubeSystem is never offloaded: its pods are the cluster's own.
const KubeSystem = "kube-system"

// Certificates serve the listener's certificate: a servingcert.Keeper or
// servingcert.Files.
type Certificates interface {
	GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error)
	Ready() bool
}

// Options configure the webhook.
type Options struct {
	// Client reaches the API server (required): namespaces list and
	// watch, and what the certificates need.
	Client kubernetes.Interface
	// Offload is what the node agents do: their policy and readiness
	// gate (Restarts is set by Run from the two fields below).
	Offload offload.Config
	// LivenessRestarts: the agents run --liveness-action=restart, so
	// liveness and startup probes move in the namespaces
	// LivenessActionNamespaces selects (default
	// nsscope.DefaultSelector).
	LivenessRestarts         bool
	LivenessActionNamespaces string
	// Namespaces selects the namespaces whose pods are offloaded;
	// default offload.DefaultNamespaceSelector.
	Namespaces string
	// OwnNamespace is probed's namespace, never offloaded (required).
	OwnNamespace string
	// Listen is the HTTPS address (":8443").
	Listen string
	// Certificates serve the listener (required). Run runs it too when
	// it has a Run method (a servingcert.Keeper).
	Certificates Certificates
	// Registerer gets the webhook's metrics; nil: none.
	Registerer prometheus.Registerer
	// Gatherer serves /metrics; nil: prometheus.DefaultGatherer.
	Gatherer prometheus.Gatherer
	// Logger; nil: slog.Default().
	Logger *slog.Logger
	// Ready, when set, is told the listener's address once it listens
	// (tests use port 0).
	Ready func(addr net.Addr)
}

// runner is a Certificates that must run (servingcert.Keeper).
type runner interface {
	Run(ctx context.Context) error
}

// Run serves the webhook until ctx ends, then shuts the listener down
// (in-flight reviews finish) and stops what it started. It returns an
// error when it cannot start.
func Run(ctx context.Context, opts Options) error {
	if opts.Client == nil || opts.Certificates == nil || opts.OwnNamespace == "" {
		return errors.New("webhook: a client, certificates and probed's own namespace are required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Namespaces == "" {
		opts.Namespaces = offload.DefaultNamespaceSelector
	}
	if opts.Gatherer == nil {
		opts.Gatherer = prometheus.DefaultGatherer
	}
	selected, err := nsscope.NewNamed(opts.Client, opts.Namespaces, NamespacesFlag)
	if err != nil {
		return err
	}
	scopes := []*nsscope.Scope{selected}
	cfg := opts.Offload
	cfg.Restarts = func(string) string {
		return "the node agents do not restart containers (their --liveness-action is not restart), so liveness and startup probes stay with the kubelet"
	}
	if opts.LivenessRestarts {
		restarts, err := nsscope.New(opts.Client, opts.LivenessActionNamespaces)
		if err != nil {
			return err
		}
		scopes = append(scopes, restarts)
		cfg.Restarts = func(namespace string) string {
			why, known := restarts.Known(namespace)
			if !known {
				return "the namespaces where the node agents restart containers are not read yet"
			}
			if why != "" {
				return why + "; the node agents restart no container there, so liveness and startup probes stay with the kubelet"
			}
			return ""
		}
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return err
	}
	adm := &Admission{Config: cfg, Selected: selected.Selects, Excluded: []string{KubeSystem, opts.OwnNamespace}, Logger: opts.Logger, metrics: m}

	ready := func() bool {
		for _, s := range scopes {
			if !s.HasSynced() {
				return false
			}
		}
		return opts.Certificates.Ready()
	}
	mux := http.NewServeMux()
	mux.Handle(PathMutate, adm)
	mux.HandleFunc(PathHealthz, func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc(PathReadyz, func(w http.ResponseWriter, _ *http.Request) {
		if !ready() {
			http.Error(w, "not ready: the certificate or the namespaces are not there yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.Handle(PathMetrics, promhttp.HandlerFor(opts.Gatherer, promhttp.HandlerOpts{}))
	listen := opts.Listen
	if listen == "" {
		listen = ":8443"
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	srv := &http.Server{
		Handler:           mux,
		TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: opts.Certificates.GetCertificate},
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       90 * time.Second,
		ErrorLog:          slog.NewLogLogger(opts.Logger.Handler(), slog.LevelDebug),
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, s := range scopes {
		wg.Go(func() { _ = s.Run(ctx) })
	}
	if r, ok := opts.Certificates.(runner); ok {
		wg.Go(func() {
			if err := r.Run(ctx); err != nil {
				opts.Logger.Error("webhook: serving certificate", "err", err)
			}
		})
	}
	served := make(chan error, 1)
	go func() { served <- srv.ServeTLS(ln, "", "") }()
	opts.Logger.Info("offload webhook serving", "addr", ln.Addr().String(), "namespaces", opts.Namespaces, "livenessRestarts", opts.LivenessRestarts)
	if opts.Ready != nil {
		opts.Ready(ln.Addr())
	}
	select {
	case err := <-served:
		return fmt.Errorf("webhook: %w", err)
	case <-ctx.Done():
	}
	shutdown, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	_ = srv.Shutdown(shutdown)
	<-served
	return nil
}
