// Package agent is the probed node agent: it wires a pod source, the
// reconciler, the prober manager and the consumers of its results, and
// serves the HTTP API. One probe's way: source (package source: a manifest
// directory; cluster mode: the API server) → reconciler (AddPod, RemovePod,
// CleanupPods) → manager (workers, scheduler, pool, handlers) → results
// managers → verdicts.Fanout → consumers: in manifest mode the status store
// (package store, which generates the kubelet's status) and the container
// simulator (package simulator, behind actuate.Actuator); the API reads the
// store. docs/architecture.md draws both modes.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/trace"

	"github.com/probed/probed/agent/actuate"
	"github.com/probed/probed/agent/api"
	"github.com/probed/probed/agent/events"
	"github.com/probed/probed/agent/health"
	"github.com/probed/probed/agent/history"
	"github.com/probed/probed/agent/manifest"
	"github.com/probed/probed/agent/pods"
	"github.com/probed/probed/agent/reconciler"
	"github.com/probed/probed/agent/simulator"
	"github.com/probed/probed/agent/source"
	"github.com/probed/probed/agent/state"
	"github.com/probed/probed/agent/store"
	"github.com/probed/probed/agent/verdicts"
	"github.com/probed/probed/manager"
	"github.com/probed/probed/manager/results"
	probeexec "github.com/probed/probed/plugins/exec"
	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/pluginhost"
	"github.com/probed/probed/runtime/redact"
)

// Agent runs probes for the pods of a source.
type Agent struct {
	opts    Options
	log     *slog.Logger
	events  *events.Recorder
	hist    *history.History
	rt      *runtime.Runtime
	mgr     manager.Manager
	plugins *pluginhost.Host
	results [3]results.Manager // by runtime.ProbeType

	source     pods.Source
	reconciler *reconciler.Reconciler
	fanout     *verdicts.Fanout
	store      *store.Store         // manifest mode: statuses, kubelet status generation
	simulator  *simulator.Simulator // manifest mode: the container runtime

	probeReg *prometheus.Registry
	reg      *prometheus.Registry

	ln net.Listener

	savedVersion uint64        // store version of the last state write (Run's goroutines only)
	stateWriter  *state.Writer // when StateDir is set
}

// Options configure the agent. Durations are time.Duration values; the CLI
// takes them as Go duration strings.
type Options struct {
	// ManifestDir is the directory of pod manifests (required).
	ManifestDir string
	// Listen is the HTTP API's address; default 127.0.0.1:8089.
	Listen string
	// PodIP is the IP of pods whose manifest has no status.podIP; default
	// 127.0.0.1.
	PodIP string
	// AllowHostExec lets exec probes run their command on this host.
	// Without it every exec probe is reported as not run (errored, with the
	// reason) and never changes a result.
	AllowHostExec bool
	// OnRestart is a shell command (sh -c) run after each probe-triggered
	// restart, with PROBED_* variables naming the pod and container.
	OnRestart string
	// OnRestartTimeout bounds each OnRestart command; default 1 min.
	OnRestartTimeout time.Duration
	// PoolSize, SlowPoolSize and ExecPoolSize size the probe pools
	// (defaults 256, 1024, 64; see runtime.Options).
	PoolSize, SlowPoolSize, ExecPoolSize int
	// SyncFrequency is the interval of full status regenerations (the
	// kubelet's --sync-frequency); default 1 min.
	SyncFrequency time.Duration
	// Rescan is the interval of full manifest-directory rescans; default 30 s.
	Rescan time.Duration
	// StateDir, when set, holds the pods' last statuses (written every
	// StateInterval when they changed, and at shutdown) and is read back at
	// start: container IDs, start times, restart counts, Started/Ready and
	// conditions survive a restart of probed (M8, M9).
	StateDir string
	// StateInterval is the state write interval; default 1 s. A kill -9
	// loses at most the changes of one interval.
	StateInterval time.Duration
	// NoPerPodLabels aggregates the prober metrics over pods (see
	// manager.Options.NoPerPodLabels).
	NoPerPodLabels bool
	// History is the number of results kept per probe for
	// GET /pods/{namespace}/{name}/probes; default 10.
	History int
	// TracerProvider receives one span per executed probe; nil: the
	// global provider (a no-op unless one was set, see agent/telemetry).
	TracerProvider trace.TracerProvider
	// PluginDir and PluginConfig select the probe plugins to start
	// (docs/plugins.md); both empty: no plugins.
	PluginDir, PluginConfig string
	// RequirePluginPin refuses plugins without a sha256 pin
	// (pluginhost.Options.RequirePin).
	RequirePluginPin bool
	// Version is probed's version, told to plugins.
	Version string
	// Logger; nil: slog.Default().
	Logger *slog.Logger
}

// New builds an agent: it checks the options, opens the listener and builds
// the runtime, manager and store. Nothing runs until Run.
func New(opts Options) (*Agent, error) {
	if opts.ManifestDir == "" {
		return nil, errors.New("no manifest directory (--manifests)")
	}
	if opts.Listen == "" {
		opts.Listen = "127.0.0.1:8089"
	}
	if opts.PodIP == "" {
		opts.PodIP = "127.0.0.1"
	}
	if net.ParseIP(opts.PodIP) == nil {
		return nil, fmt.Errorf("--pod-ip %q is not an IP address", opts.PodIP)
	}
	if opts.SyncFrequency <= 0 {
		opts.SyncFrequency = time.Minute
	}
	if opts.StateInterval <= 0 {
		opts.StateInterval = time.Second
	}
	if opts.OnRestartTimeout <= 0 {
		opts.OnRestartTimeout = time.Minute
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	opts.Logger = slog.New(redact.NewHandler(opts.Logger.Handler())) // no log line shows what the API hides
	a := &Agent{opts: opts, log: opts.Logger}
	// undo releases what New built so far when a later step fails.
	var undo []func(context.Context) error
	fail := func(err error) (*Agent, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for i := len(undo) - 1; i >= 0; i-- {
			_ = undo[i](ctx)
		}
		return nil, err
	}
	a.events = events.New(1000, opts.Logger, nil)
	a.hist = history.New(opts.History)
	a.probeReg = prometheus.NewRegistry()
	a.probeReg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	a.reg = prometheus.NewRegistry()
	a.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	// Plugins first: the manifests' custom probe kinds are validated
	// against the kinds they serve. Without --plugin-dir/--plugin-config
	// the host is empty and every custom kind is a load error.
	var err error
	a.plugins, err = pluginhost.New(context.Background(), pluginhost.Options{
		Dir: opts.PluginDir, ConfigFile: opts.PluginConfig, RequirePin: opts.RequirePluginPin, Logger: opts.Logger,
		MetricsRegisterer: a.reg, HostVersion: opts.Version, TracerProvider: opts.TracerProvider,
	})
	if err != nil {
		return nil, fmt.Errorf("plugins: %w", err)
	}
	undo = append(undo, a.plugins.Close)
	src, err := source.New(source.Options{Dir: opts.ManifestDir, Logger: opts.Logger, Rescan: opts.Rescan,
		Manifest: manifest.Options{KnownPluginKind: a.plugins.HasKind}})
	if err != nil {
		return fail(err)
	}
	a.source = src

	if a.rt, err = runtime.New(runtime.Options{PoolSize: opts.PoolSize, SlowPoolSize: opts.SlowPoolSize, ExecPoolSize: opts.ExecPoolSize, Recorder: a.events, Logger: opts.Logger}); err != nil {
		return fail(err)
	}
	undo = append(undo, a.rt.Close)
	var runner manager.ExecRunner = probeexec.DisabledRunner{}
	if opts.AllowHostExec {
		runner = &probeexec.LocalRunner{}
	}
	if err := manager.RegisterBuiltins(a.rt, runner); err != nil {
		return fail(err)
	}
	// After the built-ins: a plugin that serves a built-in kind replaces it.
	if err := a.plugins.Register(a.rt); err != nil {
		return fail(fmt.Errorf("plugins: %w", err))
	}
	for i := range a.results {
		a.results[i] = results.NewManager()
	}
	a.store = store.New(store.Options{Logger: opts.Logger, PodIP: opts.PodIP})
	a.simulator = simulator.New(simulator.Options{Store: a.store, Recorder: a.events, Logger: opts.Logger,
		OnRestart: opts.OnRestart, OnRestartTimeout: opts.OnRestartTimeout})
	a.mgr, err = manager.New(manager.Options{
		Status:                   a.store,
		Liveness:                 a.results[runtime.Liveness],
		Readiness:                a.results[runtime.Readiness],
		Startup:                  a.results[runtime.Startup],
		Runtime:                  a.rt,
		MetricsRegisterer:        a.probeReg,
		RuntimeMetricsRegisterer: a.reg,
		Logger:                   opts.Logger,
		Observer:                 a.hist,
		NoPerPodLabels:           opts.NoPerPodLabels,
		TracerProvider:           opts.TracerProvider,
	})
	if err != nil {
		return fail(err)
	}
	undo = append(undo, a.mgr.Close)
	a.store.SetProber(a.mgr)
	a.reconciler = reconciler.New(reconciler.Options{
		Manager:       a.mgr,
		Listener:      manifestListener{store: a.store, hist: a.hist},
		SyncFrequency: opts.SyncFrequency,
		// Each periodic pod sync also regenerates the statuses: every
		// status generation triggers readiness of not-ready containers
		// (M7c).
		OnSync:        a.store.Resync,
		OnWorkersGone: a.hist.Forget,
		Logger:        opts.Logger,
	})
	a.fanout = verdicts.New(a.results[runtime.Liveness], a.results[runtime.Readiness], a.results[runtime.Startup],
		a.store, actuate.OnFailure(a.store.Pod, a.simulator))
	if opts.StateDir != "" {
		if err := os.MkdirAll(opts.StateDir, 0o700); err != nil {
			return fail(fmt.Errorf("--state-dir: %w", err))
		}
		a.stateWriter = state.NewWriter(opts.StateDir, state.WriterOptions{Logger: opts.Logger})
		saved, err := state.Load(opts.StateDir)
		if err != nil {
			a.log.Error("state not restored", "err", err)
		} else if len(saved) > 0 {
			a.store.Restore(saved)
			a.log.Info("state restored", "dir", opts.StateDir, "pods", len(saved))
		}
	}
	if a.ln, err = api.Listen(opts.Listen, api.ServerConfig{}, a.log); err != nil {
		return fail(fmt.Errorf("--listen %s: %w", opts.Listen, err))
	}
	return a, nil
}

// Addr is the address the API listens on.
func (a *Agent) Addr() net.Addr { return a.ln.Addr() }

// Handler returns the agent's HTTP API.
func (a *Agent) Handler() http.Handler {
	return api.New(api.Options{
		Pods:         a.store,
		ProbeMetrics: a.probeReg,
		Metrics:      a.reg,
		Events:       a.events,
		Healthy:      health.New(a.source.HasSynced, a.mgr).Check,
		Debug: func() any {
			st, _ := manager.StatsOf(a.mgr)
			return map[string]any{"scheduler": st, "plugins": a.plugins.Status()}
		},
		History: func(namespace, name string) (any, bool) {
			pod, ok := a.store.PodByName(namespace, name)
			if !ok {
				return nil, false
			}
			return PodHistory{Namespace: namespace, Name: name, UID: string(pod.UID), Probes: a.hist.Pod(pod.UID)}, true
		},
	})
}

// PodHistory is the body of GET /pods/{namespace}/{name}/probes.
type PodHistory struct {
	Namespace string          `json:"namespace"`
	Name      string          `json:"name"`
	UID       string          `json:"uid"`
	Probes    []history.Probe `json:"probes"`
}

// Run probes until ctx is done, then shuts down gracefully: it stops
// reading pods and serving, lets the probes in flight finish within their
// timeout (manager.Drain) and apply their results, writes the state file,
// and waits for restart commands.
func (a *Agent) Run(ctx context.Context) error {
	srv := api.NewServer(a.Handler(), api.ServerConfig{})
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(a.ln) }()

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
	// the manager drains.
	inputCtx, stopInput := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(3)
	go func() {
		defer wg.Done()
		if err := a.source.Run(inputCtx, a.reconciler.Apply); err != nil {
			a.log.Error("pod source stopped", "err", err)
		}
	}()
	go func() {
		defer wg.Done()
		a.reconciler.Run(inputCtx)
	}()
	go func() {
		defer wg.Done()
		a.saveStateEvery(inputCtx)
	}()
	a.log.Info("probed running", "manifests", a.opts.ManifestDir, "listen", a.ln.Addr().String(),
		"allowHostExec", a.opts.AllowHostExec, "stateDir", a.opts.StateDir)

	var err error
	select {
	case <-ctx.Done():
	case err = <-serveErr:
		err = fmt.Errorf("API server: %w", err)
	}
	a.log.Info("probed shutting down: letting in-flight probes finish")
	stopInput()
	wg.Wait()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdownCtx)
	drainCtx, cancelDrain := context.WithTimeout(shutdownCtx, a.reconciler.DrainBound())
	closeErr := manager.Drain(drainCtx, a.mgr)
	cancelDrain()
	stopResults()
	resultsWG.Wait()
	if rerr := a.rt.Close(shutdownCtx); rerr != nil && closeErr == nil {
		closeErr = rerr
	}
	if perr := a.plugins.Close(shutdownCtx); perr != nil && closeErr == nil {
		closeErr = perr
	}
	a.saveState(true)
	a.simulator.Close() // back-off timers, delayed starts, --on-restart commands
	if err == nil {
		err = closeErr
	}
	return err
}

// saveStateEvery writes the state file every StateInterval while the store
// changed, until ctx is done.
func (a *Agent) saveStateEvery(ctx context.Context) {
	if a.opts.StateDir == "" {
		return
	}
	t := time.NewTicker(a.opts.StateInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			a.saveState(false)
		}
	}
}

// manifestListener is manifest mode's pods.Listener: the store, and the
// probe history forgets removed pods.
type manifestListener struct {
	store *store.Store
	hist  *history.History
}

func (l manifestListener) PodAdded(p *pods.Pod)         { l.store.PodAdded(p) }
func (l manifestListener) PodStatusChanged(p *pods.Pod) { l.store.PodStatusChanged(p) }
func (l manifestListener) PodRemoved(p *pods.Pod) {
	l.store.PodRemoved(p)
	l.hist.Forget(p.Pod.UID)
}

// saveState writes the state file when the store changed since the last
// write (or always, when final).
func (a *Agent) saveState(final bool) {
	if a.opts.StateDir == "" {
		return
	}
	pods, version := a.store.Export()
	if !final && version == a.savedVersion {
		return
	}
	if !a.stateWriter.Save(pods, final) { // logs failures, backing off
		return
	}
	a.savedVersion = version
}
