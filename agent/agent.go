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
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/probed/probed/agent/actuate"
	"github.com/probed/probed/agent/api"
	"github.com/probed/probed/agent/events"
	"github.com/probed/probed/agent/health"
	"github.com/probed/probed/agent/history"
	"github.com/probed/probed/agent/kube/limits"
	"github.com/probed/probed/agent/logbudget"
	"github.com/probed/probed/agent/manifest"
	"github.com/probed/probed/agent/pods"
	"github.com/probed/probed/agent/reconciler"
	"github.com/probed/probed/agent/runlog"
	"github.com/probed/probed/agent/simulator"
	"github.com/probed/probed/agent/source"
	"github.com/probed/probed/agent/state"
	"github.com/probed/probed/agent/statuspage"
	"github.com/probed/probed/agent/store"
	"github.com/probed/probed/agent/verdicts"
	"github.com/probed/probed/manager"
	"github.com/probed/probed/manager/customprobe"
	"github.com/probed/probed/manager/podprobes"
	"github.com/probed/probed/manager/results"
	probeexec "github.com/probed/probed/plugins/exec"
	"github.com/probed/probed/plugins/handlers"
	probehttp "github.com/probed/probed/plugins/http"
	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/bound"
	"github.com/probed/probed/runtime/egress"
	"github.com/probed/probed/runtime/pluginhost"
	"github.com/probed/probed/runtime/redact"
)

// The CLI's default pool shares (docs/operations.md, "Pool shares"): one
// pod holds at most an eighth of each pool's slots, one namespace a quarter
// (with the default pools: 32 and 64 network slots, 128 and 256 slow, 8 and
// 16 exec), so a pod whose probes hang delays only itself.
const (
	DefaultPodPoolShare       = 0.125
	DefaultNamespacePoolShare = 0.25
)

// The scheduler's coalescing window (Options.SchedulerCoalesce,
// --scheduler-coalesce; docs/benchmarks.md "Coalesced wake-ups"): the CLI's
// default, chosen from the measurements there, and the most allowed, half
// the shortest period an annotation probe may have.
const (
	DefaultSchedulerCoalesce = 20 * time.Millisecond
	MaxSchedulerCoalesce     = 50 * time.Millisecond
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

	// recorder receives every event: the local ring and log, and in
	// cluster mode the API server too.
	recorder runtime.Recorder
	// transitions is the health-event log (GET /events?type=transition).
	transitions *events.Transitions
	// egress is where probes may connect: cluster mode's rule (the pod's
	// IPs and --allow-probe-host), nil in manifest mode (unrestricted, as
	// the kubelet). The runtime and the annotation's validation share it.
	egress *egress.Rule

	source     pods.Source
	pods       podLister
	reconciler *reconciler.Reconciler
	fanout     *verdicts.Fanout
	services   []service
	store      *store.Store         // manifest mode: statuses, kubelet status generation
	simulator  *simulator.Simulator // manifest mode: the container runtime
	cluster    *clusterParts        // cluster mode

	probeReg *prometheus.Registry
	reg      *prometheus.Registry

	ln *api.Listener

	// manifests reports the rejected and skipped manifests (manifest
	// mode); nil in cluster mode.
	manifests func() source.Report

	savedVersion uint64        // store version of the last state write (Run's goroutines only)
	stateWriter  *state.Writer // when StateDir is set
}

// Options configure the agent. Durations are time.Duration values; the CLI
// takes them as Go duration strings.
type Options struct {
	// ManifestDir is the directory of pod manifests, or a single manifest
	// file (required in manifest mode).
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
	// PodPoolShare and NamespacePoolShare bound the slots of each pool that
	// one pod's, and one namespace's, probe runs hold at once, as fractions
	// of the pool (runtime.Options.PodShare, NamespaceShare); zero: no
	// bound. The CLI's defaults are DefaultPodPoolShare and
	// DefaultNamespacePoolShare.
	PodPoolShare, NamespacePoolShare float64
	// SchedulerTick is the resolution of the scheduler's timing wheel
	// (manager.Options.Tick); 0: the scheduler's default, 10 ms. A finer
	// tick spreads the same probe rate over more, smaller batches
	// (docs/benchmarks.md, "Sub-second periods").
	SchedulerTick time.Duration
	// SchedulerCoalesce is the window within which due probe runs start
	// from one wake-up of the scheduler and the pool
	// (manager.Options.Coalesce): a run is at most this much late, never
	// misses a period and keeps its phase. 0: off; at most
	// MaxSchedulerCoalesce. The CLI's default is DefaultSchedulerCoalesce.
	SchedulerCoalesce time.Duration
	// HTTPKeepAlive makes every HTTP probe whose annotation does not say
	// otherwise (httpGet.keepAlive) keep its connection between runs
	// (plugins/http KeepAlive: one idle connection per probe, at most
	// plugins/http's DefaultMaxKeptConnections on the node); off: a new
	// connection per run, the kubelet's way.
	HTTPKeepAlive bool
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
	// Events selects the probe runs that record an event (--events):
	// manager.EventsAll, the kubelet's (the default), or
	// manager.EventsTransitions, one per verdict change.
	Events manager.EventMode
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
	// LogBudget, when set, is the budgeted writer under Logger (package
	// logbudget): its dropped-lines metrics are served on /metrics and its
	// last report is flushed when Run returns.
	LogBudget *logbudget.Writer

	// Cluster, when set, selects cluster mode: pods from the API server,
	// verdicts as readiness-gate conditions and Events (docs/cluster.md).
	// ManifestDir, PodIP, AllowHostExec, OnRestart and StateDir are
	// manifest mode's and unused then.
	Cluster *ClusterOptions
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
	a.recorder = a.events
	// The manager records one event per failed run (K4) into the ring
	// without a log line each: a.runs logs the runs on transitions and in
	// summaries (issue 17 §5).
	runEvents := a.events.Unlogged()
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
		MetricsRegisterer: a.reg, HostVersion: opts.Version, TracerProvider: opts.TracerProvider,
	})
	if err != nil {
		return nil, fmt.Errorf("plugins: %w", err)
	}
	undo = append(undo, a.plugins.Close)
	if opts.Cluster != nil {
		// The API server's event sink first: the manager and the
		// actuator record their events through it.
		if err := a.connectCluster(); err != nil {
			return fail(err)
		}
		undo = append(undo, a.cluster.stop)
		// A probe connects only to its pod's IPs and the operator's
		// ranges (runtime/egress; docs/cluster.md "Where probes connect").
		a.egress = egress.NewRule(opts.Cluster.AllowProbeHost)
		runEvents = events.Tee(runEvents, a.cluster.events)
	}

	if a.rt, err = runtime.New(runtime.Options{PoolSize: opts.PoolSize, SlowPoolSize: opts.SlowPoolSize, ExecPoolSize: opts.ExecPoolSize,
		PodShare: opts.PodPoolShare, NamespaceShare: opts.NamespacePoolShare, Logger: opts.Logger, Egress: a.egress}); err != nil {
		return fail(err)
	}
	undo = append(undo, a.rt.Close)
	var runner manager.ExecRunner = probeexec.DisabledRunner{}
	switch {
	case opts.Cluster != nil:
		runner = a.cluster.execRunner()
	case opts.AllowHostExec:
		runner = &probeexec.LocalRunner{}
	}
	if err := handlers.Register(a.rt, runner, probehttp.KeepAlive(opts.HTTPKeepAlive)); err != nil {
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
	for i := range a.results {
		a.results[i] = results.NewManager()
	}

	var m *mode
	if opts.Cluster != nil {
		m, err = a.clusterMode()
	} else {
		m, err = a.manifestMode()
	}
	if err != nil {
		return fail(err)
	}
	a.source, a.pods, a.services = m.source, m.pods, m.services
	mopts := manager.Options{
		Status:                   m.status,
		Liveness:                 a.results[runtime.Liveness],
		Readiness:                a.results[runtime.Readiness],
		Startup:                  a.results[runtime.Startup],
		Runtime:                  a.rt,
		MetricsRegisterer:        a.probeReg,
		RuntimeMetricsRegisterer: a.reg,
		Logger:                   opts.Logger,
		Recorder:                 runEvents,
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
	undo = append(undo, a.mgr.Close)
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

// setDefaults checks the options and fills in the defaults.
func setDefaults(opts *Options) error {
	if opts.Cluster == nil && opts.ManifestDir == "" {
		return errors.New("no manifest directory (--manifests) and no cluster (--kubeconfig, --in-cluster)")
	}
	if opts.Listen == "" {
		opts.Listen = "127.0.0.1:8089"
	}
	if opts.PodIP == "" {
		opts.PodIP = "127.0.0.1"
	}
	if net.ParseIP(opts.PodIP) == nil {
		return fmt.Errorf("--pod-ip %q is not an IP address", opts.PodIP)
	}
	for _, share := range []struct {
		flag  string
		value float64
	}{{"--pod-pool-share", opts.PodPoolShare}, {"--namespace-pool-share", opts.NamespacePoolShare}} {
		if share.value < 0 || share.value > 1 {
			return fmt.Errorf("%s %v: must be a fraction of each pool between 0 (no bound) and 1", share.flag, share.value)
		}
	}
	if opts.SchedulerTick < 0 || opts.SchedulerTick > customprobe.MinPeriod {
		return fmt.Errorf("--scheduler-tick %v: must be between 0 (the default, 10ms) and %v, the shortest period", opts.SchedulerTick, customprobe.MinPeriod)
	}
	if opts.SchedulerCoalesce < 0 || opts.SchedulerCoalesce > MaxSchedulerCoalesce {
		return fmt.Errorf("--scheduler-coalesce %v: must be between 0 (off) and %v (a run is at most that late)", opts.SchedulerCoalesce, MaxSchedulerCoalesce)
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
	return nil
}

// mode is what differs between manifest and cluster mode: the pod source,
// the status provider, and the consumers of pods and results.
type mode struct {
	source pods.Source
	// status is the manager's StatusProvider; pods serves the API.
	status manager.StatusProvider
	pods   podLister
	// probes is the mode's policy of which of a pod's probes are probed's
	// (podprobes.Policy), applied where pods come in: the reconciler's
	// for pods whose source did not work them out.
	probes podprobes.Policy
	// bind hands the built manager to the rooms that need it (the
	// status providers' UpdatePodStatus).
	bind func(manager.Manager)
	// managerOptions adjusts the manager's options (cluster mode: only the
	// annotation's probes).
	managerOptions func(*manager.Options)
	listeners      listeners
	consumers      []verdicts.Consumer
	// consequence says what a liveness or startup Failure verdict leads
	// to, in its event (manager.Options.Consequence): cluster mode's
	// actuator's decision; nil: the kubelet's restart (the simulator's).
	consequence func(manager.RunRecord) string
	onSync      func()
	// services run beside the probes (Run starts and stops them).
	services []service
}

// service is a room with its own goroutines: Run until ctx is done. stopFirst
// services end when shutdown begins (before the in-flight probes drain: the
// condition writer writes nothing at SIGTERM); the others after the drain (the
// event sink flushes the last events).
type service struct {
	name      string
	run       func(ctx context.Context) error
	stopFirst bool
}

// podLister is what the API and the history read pods from: the store
// (manifest mode) or the informer's statuses (cluster mode).
type podLister interface {
	PodNames() []types.NamespacedName
	PodByName(namespace, name string) (*v1.Pod, bool)
}

// manifestMode builds the rooms of manifest mode: the directory source, the
// status store that plays the kubelet, the container simulator, the state
// directory.
func (a *Agent) manifestMode() (*mode, error) {
	opts := a.opts
	src, err := source.New(source.Options{Path: opts.ManifestDir, Logger: opts.Logger, Rescan: opts.Rescan,
		Manifest: manifest.Options{KnownPluginKind: a.knownProbeKind}, MetricsRegisterer: a.reg})
	if err != nil {
		return nil, err
	}
	a.manifests = src.Report
	a.store = store.New(store.Options{Logger: opts.Logger, PodIP: opts.PodIP})
	a.simulator = simulator.New(simulator.Options{Store: a.store, Recorder: a.recorder, Logger: opts.Logger,
		OnRestart: opts.OnRestart, OnRestartTimeout: opts.OnRestartTimeout})
	if opts.StateDir != "" {
		if err := os.MkdirAll(opts.StateDir, 0o700); err != nil {
			return nil, fmt.Errorf("--state-dir: %w", err)
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
	return &mode{
		source:    src,
		status:    a.store,
		probes:    manifest.ProbesPolicy(a.knownProbeKind),
		pods:      staleMarker{a.store, src},
		bind:      func(m manager.Manager) { a.store.SetProber(m) },
		listeners: listeners{a.store},
		consumers: []verdicts.Consumer{a.store, actuate.OnFailure(a.store.Pod, a.simulator)},
		// Each periodic pod sync also regenerates the statuses: every
		// status generation triggers readiness of not-ready containers
		// (M7c).
		onSync:   a.store.Resync,
		services: []service{{name: "state writer", run: a.saveStateEvery, stopFirst: true}},
	}, nil
}

// staleMarker serves the store's pods with the ConditionManifestStale
// condition on those the source keeps at their last valid version.
type staleMarker struct {
	store *store.Store
	src   *source.Source
}

func (m staleMarker) mark(p *v1.Pod) *v1.Pod {
	if r, ok := m.src.StaleOf(p.UID); ok {
		source.MarkStale(p, r)
	}
	return p
}

func (m staleMarker) PodNames() []types.NamespacedName { return m.store.PodNames() }

func (m staleMarker) PodByName(namespace, name string) (*v1.Pod, bool) {
	p, ok := m.store.PodByName(namespace, name)
	if ok {
		m.mark(p)
	}
	return p, ok
}

// Manifests returns the report of GET /manifests: in manifest mode the
// source's last scan (rejected and skipped documents), in cluster mode an
// empty report of source "cluster".
func (a *Agent) Manifests() source.Report {
	if a.manifests == nil {
		return source.NewReport(source.SourceCluster, "")
	}
	return a.manifests()
}

// Addr is the address the API listens on.
func (a *Agent) Addr() net.Addr { return a.ln.Addr() }

// Handler returns the agent's HTTP API.
func (a *Agent) Handler() http.Handler {
	return api.New(api.Options{
		Pods:         a.pods,
		ProbeMetrics: a.probeReg,
		Metrics:      a.reg,
		Events:       a.events,
		Transitions:  a.transitions,
		Healthy:      health.New(a.source.HasSynced, a.mgr).Check,
		Manifests:    a.Manifests,
		Guards:       a.guardsReport(),
		Debug: func() any {
			st, _ := manager.StatsOf(a.mgr)
			return map[string]any{"scheduler": st, "plugins": a.plugins.Status()}
		},
		History: func(namespace, name string) (history.PodHistory, bool) {
			pod, ok := a.pods.PodByName(namespace, name)
			if !ok {
				return history.PodHistory{}, false
			}
			probes := a.hist.Pod(pod.UID)
			for i := range probes {
				if p := &probes[i]; p.Handler == string(runtime.KindExec) && len(p.Results) > 0 {
					p.ExecMode = a.execMode(p.Results[len(p.Results)-1].ContainerID)
				}
			}
			return history.PodHistory{Namespace: namespace, Name: name, UID: string(pod.UID), Probes: probes, Refused: a.refused(pod)}, true
		},
		Page: a.pageOptions(),
	})
}

// execMode is how the exec probes of a container (its status ID) run:
// the cluster's runner's word, or in manifest mode "host" or "disabled"
// (--allow-host-exec).
func (a *Agent) execMode(statusID string) string {
	switch {
	case a.cluster != nil:
		return a.cluster.execMode(statusID)
	case a.opts.AllowHostExec:
		return "host"
	}
	return "disabled"
}

// pageOptions are the status page's sources beside the API's own: the
// scheduler's figures, the plugins, the pods' probes as the reconciler
// worked them out, and the mode's (cluster mode: the API server connection,
// the condition writer and the node's probe budget).
func (a *Agent) pageOptions() *statuspage.Options {
	opts := &statuspage.Options{
		Scheduler:   func() (manager.Stats, bool) { return manager.StatsOf(a.mgr) },
		Plugins:     a.plugins.Status,
		Declared:    a.podProbes,
		HistorySize: a.hist.Size(),
		Logger:      a.log,
	}
	if a.opts.Cluster == nil {
		opts.Manifests = func() []source.Rejection { return a.Manifests().Rejected }
	}
	if c := a.cluster; c != nil {
		opts.Cluster = func() statuspage.Cluster {
			return statuspage.Cluster{Node: a.opts.Cluster.NodeName, Synced: c.source.HasSynced(),
				WritesFailing: c.gate.WritesFailing(), WritesPending: c.gate.WritesPending(), ConditionType: string(c.gate.ConditionType()),
				Held: c.held()}
		}
	}
	return opts
}

// refused lists the pod's refused probes as the API serves them: its view's
// refusals and, in cluster mode, every probe the node's budget holds back.
func (a *Agent) refused(pod *v1.Pod) []history.Refused {
	view, _ := a.podProbes(pod)
	out := history.RefusedOf(view)
	if a.cluster == nil || view == nil {
		return out
	}
	if msg, held := a.cluster.limits.BudgetRefusal(pod.UID); held {
		for i := range view.Probes {
			if p := &view.Probes[i]; p.Origin != runtime.OriginSpec {
				out = append(out, history.Refused{Container: p.Container.Name, Type: p.Type.Lower(), Origin: p.Origin.String(),
					Field: p.Field.String(), Reason: bound.Cut(limits.ReasonProbeBudgetExceeded+": "+msg, bound.MessageBytes)})
			}
		}
	}
	return out
}

// podProbes returns the probes of the pod as the reconciler worked them out
// for its spec (podprobes.View), false when it does not know the pod.
func (a *Agent) podProbes(pod *v1.Pod) (*podprobes.View, bool) {
	return a.reconciler.Probes(pod.UID)
}

// PodHistory is the body of GET /pods/{namespace}/{name}/probes.
type PodHistory = history.PodHistory

// Run probes until ctx is done, then shuts down gracefully: it stops
// reading pods and serving, lets the probes in flight finish within their
// timeout (manager.Drain) and apply their results, writes the state file,
// and waits for restart commands.
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
	start(&inputWG, inputCtx, "pod source", func(ctx context.Context) error { return a.source.Run(ctx, a.reconciler.Apply) })
	start(&inputWG, inputCtx, "reconciler", func(ctx context.Context) error { a.reconciler.Run(ctx); return nil })
	for _, svc := range a.services {
		if svc.stopFirst {
			start(&inputWG, inputCtx, svc.name, svc.run)
		} else {
			start(&serviceWG, serviceCtx, svc.name, svc.run)
		}
	}
	if a.opts.Cluster != nil {
		a.log.Info("probed running in cluster mode", "node", a.opts.Cluster.NodeName, "readinessGate", a.opts.Cluster.ReadinessGate,
			"allowProbeHost", a.egress.Allowed(),
			"livenessAction", a.opts.Cluster.LivenessAction, "containerRuntime", a.opts.Cluster.ContainerRuntimeEndpoint, "listen", a.ln.Addr().String())
	} else {
		a.log.Info("probed running", "manifests", a.opts.ManifestDir, "listen", a.ln.Addr().String(),
			"allowHostExec", a.opts.AllowHostExec, "stateDir", a.opts.StateDir)
	}

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
	if rerr := a.rt.Close(shutdownCtx); rerr != nil && closeErr == nil {
		closeErr = rerr
	}
	if perr := a.plugins.Close(shutdownCtx); perr != nil && closeErr == nil {
		closeErr = perr
	}
	if a.cluster != nil {
		// After the drain and the services: exec probes and restarts use it.
		if cerr := a.cluster.closeRuntime(); cerr != nil && closeErr == nil {
			closeErr = cerr
		}
	}
	if a.store != nil {
		a.saveState(true)
		a.simulator.Close() // back-off timers, delayed starts, --on-restart commands
	}
	if a.opts.LogBudget != nil {
		a.opts.LogBudget.Flush()
	}
	if err == nil {
		err = closeErr
	}
	return err
}

// saveStateEvery writes the state file every StateInterval while the store
// changed, until ctx is done.
func (a *Agent) saveStateEvery(ctx context.Context) error {
	if a.opts.StateDir == "" {
		return nil
	}
	t := time.NewTicker(a.opts.StateInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			a.saveState(false)
		}
	}
}

// listeners tells each of its pods.Listeners in turn.
type listeners []pods.Listener

func (ls listeners) PodAdded(p *pods.Pod) {
	for _, l := range ls {
		l.PodAdded(p)
	}
}

func (ls listeners) PodStatusChanged(p *pods.Pod) {
	for _, l := range ls {
		l.PodStatusChanged(p)
	}
}

func (ls listeners) PodRemoved(p *pods.Pod) {
	for _, l := range ls {
		l.PodRemoved(p)
	}
}

// historyListener forgets the probe history and run log of removed pods.
type historyListener struct{ a *Agent }

func (historyListener) PodAdded(*pods.Pod)         {}
func (historyListener) PodStatusChanged(*pods.Pod) {}
func (l historyListener) PodRemoved(p *pods.Pod)   { l.a.forget(p.Pod.UID) }

// forget drops what the history and the run log keep of a pod.
func (a *Agent) forget(uid types.UID) {
	a.hist.Forget(uid)
	a.runs.Forget(uid)
}

// observers hands each run record to every observer in turn.
type observers []manager.Observer

func (o observers) ProbeRan(r manager.RunRecord) {
	for _, ob := range o {
		ob.ProbeRan(r)
	}
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
