// Package agent is the probed node agent: it wires a pod source, the
// reconciler, the prober manager and the consumers of its results, and
// serves the HTTP API. One probe's way: source (package source: a manifest
// directory; cluster mode: the API server) → reconciler (AddPod, RemovePod,
// CleanupPods) → manager (workers, scheduler, pool, handlers) → results
// managers → verdicts.Fanout → consumers: in manifest mode the status store
// (package store, which generates the kubelet's status) and the container
// simulator (package simulator, behind actuate.Actuator); the API reads the
// store. docs/architecture.md draws both modes.
//
// The files: agent.go the wiring (New, Run) over a mode; manifest.go and
// cluster.go the two modes, each one function over deps that hands back
// everything mode-specific (mode); options.go the options; handler.go the
// HTTP API; state.go manifest mode's state directory; fanout.go the
// adapters that tell several listeners and observers in turn.
package agent

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/probed/probed/agent/api"
	"github.com/probed/probed/agent/events"
	"github.com/probed/probed/agent/guards"
	"github.com/probed/probed/agent/history"
	"github.com/probed/probed/agent/pods"
	"github.com/probed/probed/agent/reconciler"
	"github.com/probed/probed/agent/runlog"
	"github.com/probed/probed/agent/source"
	"github.com/probed/probed/agent/statuspage"
	"github.com/probed/probed/agent/verdicts"
	"github.com/probed/probed/manager"
	"github.com/probed/probed/manager/podprobes"
	"github.com/probed/probed/manager/results"
	probeexec "github.com/probed/probed/plugins/exec"
	"github.com/probed/probed/plugins/handlers"
	probehttp "github.com/probed/probed/plugins/http"
	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/egress"
	"github.com/probed/probed/runtime/pluginhost"
	"github.com/probed/probed/runtime/redact"
)

// Agent runs probes for the pods of a source.
type Agent struct {
	opts    Options
	log     *slog.Logger
	events  *events.Recorder
	hist    *history.History
	runs    *runlog.Log // the log lines of probe runs
	rt      *runtime.Runtime
	mgr     manager.Manager
	plugins *pluginhost.Host
	results [3]results.Manager // by runtime.ProbeType

	// transitions is the health-event log (GET /events?type=transition).
	transitions *events.Transitions

	// mode is everything that differs between manifest and cluster mode.
	mode       *mode
	reconciler *reconciler.Reconciler
	fanout     *verdicts.Fanout

	probeReg *prometheus.Registry
	reg      *prometheus.Registry

	ln *api.Listener

	// closers release what New built, last first: New's undo when a later
	// step fails, and the end of Run after the drain.
	closers []func(context.Context) error
}

// deps are what a mode is built over: the agent's shared rooms, two
// lookups into rooms New builds after the mode (called only once Run has
// started), and New's undo list.
type deps struct {
	opts Options
	log  *slog.Logger
	// reg is the agent's registry (/metrics).
	reg *prometheus.Registry
	// events is the local event ring and log.
	events *events.Recorder
	// results are the results managers, by runtime.ProbeType.
	results [3]results.Manager
	// knownProbeKind reports whether the runtime has a handler for a kind,
	// in process or served by a plugin (pluginhost.Host.Register puts the
	// plugins' kinds there): a pod whose probed.io/probes annotation names
	// a kind nothing serves is a load error naming the pod, the container
	// and the kind.
	knownProbeKind func(kind string) bool
	// podProbes is the reconciler's view of a pod's probes.
	podProbes func(*v1.Pod) (*podprobes.View, bool)
	// onClose adds a closer to New's undo list, which also ends Run.
	onClose func(func(context.Context) error)
}

// mode is what differs between manifest and cluster mode: the pod source,
// the status provider, the exec runner, where probes may connect, where
// events go, the consumers of pods and results, the services, and what the
// API, the status page and the start log say of the mode.
type mode struct {
	source pods.Source
	// status is the manager's StatusProvider; pods serves the API.
	status manager.StatusProvider
	pods   podLister
	// runner runs the exec probes and says how (the API's execMode).
	runner probeexec.ModeRunner
	// egress is where probes may connect (the runtime's and the
	// annotation's rule): cluster mode's rule (the pod's IPs and
	// --allow-probe-host), nil in manifest mode (unrestricted, as the
	// kubelet).
	egress *egress.Rule
	// recorder receives the agent's events: the local ring and log, and in
	// cluster mode the API server too; runEvents the manager's one event
	// per failed run (K4), into the ring without a log line each (the run
	// log logs the runs on transitions and in summaries).
	recorder, runEvents runtime.Recorder
	// probes is the mode's policy of which of a pod's probes are probed's
	// (podprobes.Policy), applied where pods come in: the reconciler's
	// for pods whose source did not work them out.
	probes podprobes.Policy
	// bind hands the built manager to the rooms that need it (the
	// status providers' UpdatePodStatus).
	bind func(manager.Manager)
	// managerOptions adjusts the manager's options (cluster mode: only the
	// annotation's probes); nil: none.
	managerOptions func(*manager.Options)
	listeners      listeners
	consumers      []verdicts.Consumer
	// consequence says what a liveness or startup Failure verdict leads
	// to, in its event (manager.Options.Consequence): cluster mode's
	// actuator's decision; nil: the kubelet's restart (the simulator's).
	consequence func(manager.RunRecord) string
	onSync      func()
	// services run beside the probes (Run starts and stops them).
	services []*service
	// manifests is GET /manifests' report.
	manifests func() source.Report
	// page adds the mode's sources to the status page's options.
	page func(*statuspage.Options)
	// held lists the probes of a pod's view the mode holds back beyond the
	// view's own refusals (cluster mode: the node's probe budget).
	held func(*v1.Pod, *podprobes.View) []history.Refused
	// guards is GET /guards' report (cluster mode: what the panic
	// threshold and the restart budget hold back); nil: none.
	guards func() guards.Report
	// startMsg and startLog are the start log line and its fields (Run
	// adds the listen address).
	startMsg string
	startLog []any
}

// service is a room with its own goroutines: Run until ctx is done. stopFirst
// services end when shutdown begins (before the in-flight probes drain: the
// condition writer writes nothing at SIGTERM); the others after the drain (the
// event sink flushes the last events).
type service struct {
	name      string
	run       func(ctx context.Context) error
	stopFirst bool
	started   atomic.Bool
}

// stopUnstarted is the closer of a service whose room starts goroutines in
// its New (the mode adds it to New's undo list): for an agent New fails to
// finish (Run never starts the service), run on a done context ends them;
// after Run it does nothing.
func (s *service) stopUnstarted(context.Context) error {
	if s.started.Swap(true) {
		return nil
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	return s.run(done)
}

// podLister is what the API and the history read pods from: the store
// (manifest mode) or the informer's statuses (cluster mode).
type podLister interface {
	PodNames() []types.NamespacedName
	PodByName(namespace, name string) (*v1.Pod, bool)
}

// modeOf is the mode Options select: cluster mode with Options.Cluster,
// manifest mode otherwise.
func modeOf(opts Options) func(deps) (*mode, error) {
	if opts.Cluster != nil {
		return clusterMode
	}
	return manifestMode
}

// New builds an agent: it checks the options, opens the listener and builds
// the runtime, the manager and the rooms of the mode (manifest directory, or
// cluster mode with Options.Cluster). Nothing runs until Run.
func New(opts Options) (*Agent, error) {
	if err := setDefaults(&opts); err != nil {
		return nil, err
	}
	opts.Logger = slog.New(redact.NewHandler(opts.Logger.Handler())) // no log line shows what the API hides
	a := &Agent{opts: opts, log: opts.Logger}
	fail := func(err error) (*Agent, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = a.close(ctx)
		return nil, err
	}
	onClose := func(c func(context.Context) error) { a.closers = append(a.closers, c) }
	a.events = events.New(1000, opts.Logger, nil)
	a.hist = history.New(opts.History)
	a.transitions = events.NewTransitions(0)
	a.runs = runlog.New(runlog.Options{Logger: opts.Logger})
	a.probeReg = prometheus.NewRegistry()
	a.probeReg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	a.reg = prometheus.NewRegistry()
	a.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if opts.LogBudget != nil {
		a.reg.MustRegister(opts.LogBudget)
	}

	// Plugins first: the manifests' custom probe kinds are validated
	// against the kinds they serve. Without --plugin-dir/--plugin-config
	// the host is empty and every custom kind is a load error.
	var err error
	a.plugins, err = pluginhost.New(context.Background(), pluginhost.Options{
		Dir: opts.PluginDir, ConfigFile: opts.PluginConfig, RequirePin: opts.RequirePluginPin, Logger: opts.Logger,
		Registerer: a.reg, HostVersion: opts.Version, TracerProvider: opts.TracerProvider,
	})
	if err != nil {
		return nil, fmt.Errorf("plugins: %w", err)
	}
	onClose(a.plugins.Close)
	for i := range a.results {
		a.results[i] = results.NewManager()
	}

	// The mode before the runtime: in cluster mode the API server's event
	// sink records the manager's and the actuator's events, and the egress
	// rule bounds every probe.
	m, err := modeOf(opts)(deps{opts: opts, log: opts.Logger, reg: a.reg, events: a.events, results: a.results,
		knownProbeKind: a.knownProbeKind, podProbes: a.podProbes, onClose: onClose})
	if err != nil {
		return fail(err)
	}
	a.mode = m

	if a.rt, err = runtime.New(runtime.Options{PoolSize: opts.PoolSize, SlowPoolSize: opts.SlowPoolSize, ExecPoolSize: opts.ExecPoolSize,
		PodShare: opts.PodPoolShare, NamespaceShare: opts.NamespacePoolShare, Logger: opts.Logger, Egress: m.egress}); err != nil {
		return fail(err)
	}
	onClose(a.rt.Close)
	if err := handlers.Register(a.rt, m.runner, probehttp.KeepAlive(opts.HTTPKeepAlive)); err != nil {
		return fail(err)
	}
	a.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "probed_http_kept_connections",
		Help: "Connections of HTTP probes that keep theirs between runs (httpGet.keepAlive, --http-keep-alive), open now.",
	}, func() float64 { return float64(probehttp.KeptConnections()) }))
	// After the built-ins: a plugin that serves a built-in kind replaces it.
	if err := a.plugins.Register(a.rt); err != nil {
		return fail(fmt.Errorf("plugins: %w", err))
	}

	mopts := manager.Options{
		Status:                   m.status,
		Liveness:                 a.results[runtime.Liveness],
		Readiness:                a.results[runtime.Readiness],
		Startup:                  a.results[runtime.Startup],
		Runtime:                  a.rt,
		MetricsRegisterer:        a.probeReg,
		RuntimeMetricsRegisterer: a.reg,
		Logger:                   opts.Logger,
		Recorder:                 m.runEvents,
		Events:                   opts.Events,
		Consequence:              m.consequence,
		Observer:                 observers{a.hist, a.runs, a.transitions},
		NoPerPodLabels:           opts.NoPerPodLabels,
		TracerProvider:           opts.TracerProvider,
		Tick:                     opts.SchedulerTick,
		Coalesce:                 opts.SchedulerCoalesce,
	}
	// AddPod without a view (a library-style call) works the probes out
	// under the mode's policy too.
	mopts.Probes = m.probes
	if m.managerOptions != nil {
		m.managerOptions(&mopts)
	}
	if a.mgr, err = manager.New(mopts); err != nil {
		return fail(err)
	}
	onClose(a.mgr.Close)
	m.bind(a.mgr)
	a.reconciler = reconciler.New(reconciler.Options{
		Manager:       a.mgr,
		Listener:      append(m.listeners, historyListener{a}),
		Probes:        m.probes,
		SyncFrequency: opts.SyncFrequency,
		OnSync:        m.onSync,
		OnWorkersGone: a.forget,
		Logger:        opts.Logger,
	})
	a.fanout = verdicts.New(a.results[runtime.Liveness], a.results[runtime.Readiness], a.results[runtime.Startup], m.consumers...)
	if a.ln, err = api.Listen(opts.Listen, api.ServerConfig{}, a.log); err != nil {
		return fail(fmt.Errorf("--listen %s: %w", opts.Listen, err))
	}
	return a, nil
}

// knownProbeKind is deps.knownProbeKind: the runtime's kinds. The source
// calls it only while Run scans, after New has built the runtime.
func (a *Agent) knownProbeKind(kind string) bool { return a.rt != nil && a.rt.HasKind(kind) }

// close runs the closers, last first, and returns the first error.
func (a *Agent) close(ctx context.Context) error {
	var first error
	for i := len(a.closers) - 1; i >= 0; i-- {
		if err := a.closers[i](ctx); err != nil && first == nil {
			first = err
		}
	}
	a.closers = nil
	return first
}

// Run probes until ctx is done, then shuts down gracefully: it stops
// reading pods and serving, lets the probes in flight finish within their
// timeout (manager.Drain) and apply their results, stops the services, and
// runs the closers (the runtime, the mode's rooms: manifest mode writes its
// state file and waits for restart commands).
func (a *Agent) Run(ctx context.Context) error {
	srv := api.NewServer(a.Handler(), api.ServerConfig{})
	serveErr := make(chan error, 1)
	go func() { serveErr <- a.ln.Serve(srv) }()

	// resultsCtx ends after the manager has drained: the consumers take
	// results until the last run has applied its own (R4).
	resultsCtx, stopResults := context.WithCancel(context.Background())
	var resultsWG sync.WaitGroup
	resultsWG.Add(1)
	go func() {
		defer resultsWG.Done()
		a.fanout.Run(resultsCtx)
	}()

	// inputCtx ends first at shutdown: no pod is added or resynced while
	// the manager drains, and the stopFirst services end (the condition
	// writer sends nothing after SIGTERM).
	inputCtx, stopInput := context.WithCancel(context.Background())
	// serviceCtx ends after the drain.
	serviceCtx, stopServices := context.WithCancel(context.Background())
	var inputWG, serviceWG sync.WaitGroup
	start := func(wg *sync.WaitGroup, ctx context.Context, name string, run func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := run(ctx); err != nil {
				a.log.Error(name+" stopped", "err", err)
			}
		}()
	}
	start(&inputWG, inputCtx, "pod source", func(ctx context.Context) error { return a.mode.source.Run(ctx, a.reconciler.Apply) })
	start(&inputWG, inputCtx, "reconciler", func(ctx context.Context) error { a.reconciler.Run(ctx); return nil })
	for _, svc := range a.mode.services {
		svc.started.Store(true)
		if svc.stopFirst {
			start(&inputWG, inputCtx, svc.name, svc.run)
		} else {
			start(&serviceWG, serviceCtx, svc.name, svc.run)
		}
	}
	a.log.Info(a.mode.startMsg, append(a.mode.startLog, "listen", a.ln.Addr().String())...)

	var err error
	select {
	case <-ctx.Done():
	case err = <-serveErr:
		err = fmt.Errorf("API server: %w", err)
	}
	a.log.Info("probed shutting down: letting in-flight probes finish")
	stopInput()
	inputWG.Wait()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdownCtx)
	drainCtx, cancelDrain := context.WithTimeout(shutdownCtx, a.reconciler.DrainBound())
	closeErr := manager.Drain(drainCtx, a.mgr)
	cancelDrain()
	stopResults()
	resultsWG.Wait()
	stopServices()
	serviceWG.Wait()
	// After the drain and the services: exec probes and restarts use the
	// container runtime's connection, the last results the state file.
	if cerr := a.close(shutdownCtx); cerr != nil && closeErr == nil {
		closeErr = cerr
	}
	if a.opts.LogBudget != nil {
		a.opts.LogBudget.Flush()
	}
	if err == nil {
		err = closeErr
	}
	return err
}
