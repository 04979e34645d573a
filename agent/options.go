package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/probed/probed/agent/logbudget"
	"github.com/probed/probed/manager"
	"github.com/probed/probed/manager/customprobe"
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
