// Package agent is the probed node agent: it reads pods from a manifest
// directory (package source), keeps their statuses (package store), probes
// them with the manager, and serves the HTTP API (package api).
//
// Data flow: source → Agent.sync → manager.AddPod / RemovePod and store.Put
// / Delete; the manager's workers read statuses from the store and write
// results managers; the store consumes their updates, restarts containers on
// liveness/startup failures and regenerates statuses with UpdatePodStatus;
// the API reads the store.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/trace"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/probed/probed/agent/api"
	"github.com/probed/probed/agent/events"
	"github.com/probed/probed/agent/history"
	"github.com/probed/probed/agent/manifest"
	"github.com/probed/probed/agent/source"
	"github.com/probed/probed/agent/state"
	"github.com/probed/probed/agent/store"
	"github.com/probed/probed/manager"
	"github.com/probed/probed/manager/customprobe"
	"github.com/probed/probed/manager/results"
	probeexec "github.com/probed/probed/plugins/exec"
	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/pluginhost"
)

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
	// Version is probed's version, told to plugins.
	Version string
	// Logger; nil: slog.Default().
	Logger *slog.Logger
}

// Agent runs probes for the pods of a manifest directory.
type Agent struct {
	opts    Options
	log     *slog.Logger
	events  *events.Recorder
	hist    *history.History
	rt      *runtime.Runtime
	mgr     manager.Manager
	store   *store.Store
	src     *source.Source
	plugins *pluginhost.Host
	res     [3]results.Manager

	probeReg *prometheus.Registry
	reg      *prometheus.Registry

	ln net.Listener

	mu      sync.Mutex
	current map[types.UID]*source.Pod // pods applied to the manager
	// stopping holds the UIDs whose workers were stopped (pod removed or
	// replaced) and may still exist, until when: workers exit
	// asynchronously (M6) and AddPod skips a key whose worker still exists
	// (M2), so while a UID is here a current pod with it gets AddPod again
	// every readdInterval.
	stopping map[types.UID]time.Time
	restart  sync.WaitGroup // OnRestart commands in flight

	savedVersion uint64 // store version of the last state write (Run's goroutines only)
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
	a := &Agent{opts: opts, log: opts.Logger, current: map[types.UID]*source.Pod{}, stopping: map[types.UID]time.Time{}}
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
		Dir: opts.PluginDir, ConfigFile: opts.PluginConfig, Logger: opts.Logger,
		MetricsRegisterer: a.reg, HostVersion: opts.Version, TracerProvider: opts.TracerProvider,
	})
	if err != nil {
		return nil, fmt.Errorf("plugins: %w", err)
	}
	undo = append(undo, a.plugins.Close)
	if a.src, err = source.New(source.Options{Dir: opts.ManifestDir, Logger: opts.Logger, Rescan: opts.Rescan,
		Manifest: manifest.Options{KnownPluginKind: a.plugins.HasKind}}); err != nil {
		return fail(err)
	}

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
	for i := range a.res {
		a.res[i] = results.NewManager()
	}
	a.store = store.New(store.Options{Logger: opts.Logger, PodIP: opts.PodIP, OnRestart: a.onRestart})
	a.mgr, err = manager.New(manager.Options{
		Status:                   a.store,
		Liveness:                 a.res[runtime.Liveness],
		Readiness:                a.res[runtime.Readiness],
		Startup:                  a.res[runtime.Startup],
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
	if opts.StateDir != "" {
		if err := os.MkdirAll(opts.StateDir, 0o700); err != nil {
			return fail(fmt.Errorf("--state-dir: %w", err))
		}
		saved, err := state.Load(opts.StateDir)
		if err != nil {
			a.log.Error("state not restored", "err", err)
		} else if len(saved) > 0 {
			a.store.Restore(saved)
			a.log.Info("state restored", "dir", opts.StateDir, "pods", len(saved))
		}
	}
	if a.ln, err = net.Listen("tcp", opts.Listen); err != nil {
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
// reading the directory and serving, lets the probes in flight finish
// within their timeout (manager.Drain) and apply their results, writes the
// state file, and waits for restart commands.
func (a *Agent) Run(ctx context.Context) error {
	srv := &http.Server{Handler: a.Handler(), ReadHeaderTimeout: 10 * time.Second}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(a.ln) }()

	// storeCtx ends after the manager has drained: the store consumes
	// results until the last run has applied its own (R4).
	storeCtx, stopStore := context.WithCancel(context.Background())
	var storeWG sync.WaitGroup
	storeWG.Add(1)
	go func() {
		defer storeWG.Done()
		a.store.Run(storeCtx, a.res[runtime.Liveness], a.res[runtime.Readiness], a.res[runtime.Startup])
	}()

	snap := a.src.Scan()
	a.sync(snap)
	a.log.Info("probed running", "manifests", a.opts.ManifestDir, "files", snap.Files, "pods", len(snap.Pods),
		"errors", len(snap.Errors), "listen", a.ln.Addr().String(), "allowHostExec", a.opts.AllowHostExec,
		"stateDir", a.opts.StateDir)

	// inputCtx ends first at shutdown: no pod is added or resynced while
	// the manager drains.
	inputCtx, stopInput := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		_ = a.src.Watch(inputCtx, a.sync)
	}()
	go func() {
		defer wg.Done()
		t := time.NewTicker(a.opts.SyncFrequency)
		defer t.Stop()
		readd := time.NewTicker(readdInterval)
		defer readd.Stop()
		var save <-chan time.Time
		if a.opts.StateDir != "" {
			st := time.NewTicker(a.opts.StateInterval)
			defer st.Stop()
			save = st.C
		}
		for {
			select {
			case <-inputCtx.Done():
				return
			case <-t.C:
				// The kubelet's periodic pod sync: AddPod again for every
				// pod (it is idempotent, and recreates workers that ended,
				// W5.2, W8), then regenerate the statuses.
				a.addAll()
				a.store.Resync()
			case <-readd.C:
				a.readdPending()
			case <-save:
				a.saveState(false)
			}
		}
	}()

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
	drainCtx, cancelDrain := context.WithTimeout(shutdownCtx, a.drainTimeout())
	closeErr := manager.Drain(drainCtx, a.mgr)
	cancelDrain()
	stopStore()
	storeWG.Wait()
	if rerr := a.rt.Close(shutdownCtx); rerr != nil && closeErr == nil {
		closeErr = rerr
	}
	if perr := a.plugins.Close(shutdownCtx); perr != nil && closeErr == nil {
		closeErr = perr
	}
	a.saveState(true)
	a.restart.Wait()
	if err == nil {
		err = closeErr
	}
	return err
}

// drainTimeout bounds the wait for in-flight probes at shutdown (see
// drainBound).
func (a *Agent) drainTimeout() time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	return drainBound(a.current)
}

// drainBound is the longest timeoutSeconds of the pods' probes — spec
// probes of containers and init containers and the custom probes of the
// probed.io/probes annotation — plus one second; at least two seconds. A
// run still retrying a handler error past it (P2) is abandoned: its
// attempts errored, so its result would have been discarded (W5.10).
func drainBound(pods map[types.UID]*source.Pod) time.Duration {
	longest := int32(1)
	consider := func(pr *v1.Probe) {
		if pr != nil && pr.TimeoutSeconds > longest {
			longest = pr.TimeoutSeconds
		}
	}
	for _, p := range pods {
		for _, cs := range [][]v1.Container{p.Pod.Spec.Containers, p.Pod.Spec.InitContainers} {
			for i := range cs {
				consider(cs[i].LivenessProbe)
				consider(cs[i].ReadinessProbe)
				consider(cs[i].StartupProbe)
			}
		}
		custom, _ := customprobe.Parse(p.Pod, nil)
		for i := range custom {
			consider(&custom[i].Probe)
		}
	}
	return time.Duration(longest)*time.Second + time.Second
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
	if err := state.Save(a.opts.StateDir, pods, time.Now()); err != nil {
		a.log.Error("saving state", "dir", a.opts.StateDir, "err", err)
		return
	}
	a.savedVersion = version
}

// sync applies a snapshot of the directory: new pods are added, removed
// pods are stopped (StopLivenessAndStartup, RemovePod: the kubelet's
// termination sequence, K5); a pod whose spec changed under the same UID
// (metadata.uid set in its file) is stopped and added anew, since workers
// keep the spec they were created with (M2); a pod whose manifest status
// changed gets that status.
func (a *Agent) sync(snap source.Snapshot) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ctx := context.Background()
	for uid, cur := range a.current {
		if _, ok := snap.Pods[uid]; ok {
			continue
		}
		a.stopLocked(cur.Pod)
		a.store.Delete(uid)
		a.hist.Forget(uid)
		delete(a.current, uid)
		a.log.Info("pod removed", "pod", cur.Pod.Namespace+"/"+cur.Pod.Name, "podUID", string(uid), "file", cur.Source)
	}
	for uid, p := range snap.Pods {
		cur, ok := a.current[uid]
		switch {
		case !ok:
			a.current[uid] = p
			// Workers first, so the first status generation already knows
			// the pod's probes (and triggers readiness at once, M7c).
			a.mgr.AddPod(ctx, p.Pod)
			pod := a.store.Put(p.Pod)
			a.log.Info("pod added", "pod", pod.Namespace+"/"+pod.Name, "podUID", string(uid), "file", p.Source)
		case cur.SpecHash != p.SpecHash:
			a.stopLocked(cur.Pod)
			a.current[uid] = p
			pod := a.store.Put(p.Pod)
			a.mgr.AddPod(ctx, p.Pod) // (again every readdInterval while the old workers exit)
			a.log.Info("pod replaced from its manifest", "pod", pod.Namespace+"/"+pod.Name, "podUID", string(uid), "file", p.Source)
		case cur.StatusHash != p.StatusHash:
			a.current[uid] = p
			pod := a.store.Put(p.Pod)
			a.mgr.AddPod(ctx, p.Pod) // recreates workers that ended (W5.2, W8)
			a.log.Info("pod status replaced from its manifest", "pod", pod.Namespace+"/"+pod.Name, "podUID", string(uid), "file", p.Source)
		default:
			a.current[uid] = p // same pod; keep the latest file/document
		}
	}
	desired := make(map[types.UID]sets.Empty, len(a.current))
	for uid := range a.current {
		desired[uid] = sets.Empty{}
	}
	a.mgr.CleanupPods(desired)
}

// readdInterval is how often AddPod is repeated for a pod whose UID has
// workers still stopping.
const readdInterval = 100 * time.Millisecond

// stopLocked stops the pod's workers (the kubelet's termination sequence,
// K5) and remembers its UID until they have surely exited: their in-flight
// run (up to 3 attempts of the probe timeout, P2) plus slack. Caller holds
// mu.
func (a *Agent) stopLocked(pod *v1.Pod) {
	a.mgr.StopLivenessAndStartup(pod)
	a.mgr.RemovePod(pod)
	maxTimeout := int32(1)
	for _, cs := range [][]v1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for i := range cs {
			for _, pr := range []*v1.Probe{cs[i].LivenessProbe, cs[i].ReadinessProbe, cs[i].StartupProbe} {
				if pr != nil && pr.TimeoutSeconds > maxTimeout {
					maxTimeout = pr.TimeoutSeconds
				}
			}
		}
	}
	a.stopping[pod.UID] = time.Now().Add(2*time.Second + 3*time.Duration(maxTimeout)*time.Second)
}

// readdPending calls AddPod again for current pods whose UID has workers
// stopping, so that their new workers are created as soon as the old ones
// have exited.
func (a *Agent) readdPending() {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	for uid, until := range a.stopping {
		if p, ok := a.current[uid]; ok {
			a.mgr.AddPod(context.Background(), p.Pod)
		}
		if now.After(until) {
			delete(a.stopping, uid)
			if _, ok := a.current[uid]; !ok {
				// A run in flight when the pod was removed may have
				// recorded after the removal's Forget.
				a.hist.Forget(uid)
			}
		}
	}
}

// addAll calls AddPod for every pod, as each kubelet pod sync does (M2).
func (a *Agent) addAll() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, p := range a.current {
		a.mgr.AddPod(context.Background(), p.Pod)
	}
}

// onRestart records the kubelet's Killing event (K2) and runs the
// --on-restart command.
func (a *Agent) onRestart(r store.Restart) {
	a.events.Eventf(runtime.ContainerRef(r.Pod, r.Container), v1.EventTypeNormal, "Killing", "%s", r.Message)
	if a.opts.OnRestart == "" {
		return
	}
	a.restart.Add(1)
	go func() {
		defer a.restart.Done()
		ctx, cancel := context.WithTimeout(context.Background(), a.opts.OnRestartTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, "/bin/sh", "-c", a.opts.OnRestart)
		cmd.Env = append(os.Environ(),
			"PROBED_POD_NAME="+r.Pod.Name,
			"PROBED_POD_NAMESPACE="+r.Pod.Namespace,
			"PROBED_POD_UID="+string(r.Pod.UID),
			"PROBED_CONTAINER_NAME="+r.Container,
			"PROBED_CONTAINER_ID="+r.NewContainerID,
			"PROBED_OLD_CONTAINER_ID="+r.OldContainerID,
			"PROBED_RESTART_COUNT="+strconv.Itoa(int(r.RestartCount)),
			"PROBED_REASON="+r.Reason,
			"PROBED_RESTARTED="+strconv.FormatBool(r.Restarted),
			"PROBED_GRACE_PERIOD_SECONDS="+strconv.FormatInt(r.GracePeriodSeconds, 10),
		)
		cmd.WaitDelay = time.Second
		out, err := cmd.CombinedOutput()
		if err != nil {
			a.log.Error("on-restart command failed", "pod", r.Pod.Namespace+"/"+r.Pod.Name, "container", r.Container, "err", err, "output", truncate(string(out), 1024))
			return
		}
		a.log.Info("on-restart command done", "pod", r.Pod.Namespace+"/"+r.Pod.Name, "container", r.Container)
	}()
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
