package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/probed/probed/agent"
	"github.com/probed/probed/agent/check"
	"github.com/probed/probed/agent/logbudget"
	"github.com/probed/probed/agent/output"
	"github.com/probed/probed/agent/statusview"
	"github.com/probed/probed/agent/telemetry"
	"github.com/probed/probed/examples"
	"github.com/probed/probed/internal/version"
	"github.com/probed/probed/manager"
	probeexec "github.com/probed/probed/plugins/exec"
	"github.com/probed/probed/runtime/redact"
)

// exitError carries an exit code out of a command.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

func execute(args []string, stdout, stderr io.Writer) int {
	root := newRoot(stdout, stderr)
	root.SetArgs(args)
	err := root.Execute()
	var ee exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	default:
		fmt.Fprintln(stderr, "probed:", err)
		return 2
	}
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "probed",
		Short:         "probed runs Kubernetes liveness, readiness and startup probes with the kubelet's semantics",
		Version:       version.Get().String(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	// `probed --version` prints the line `probed version` prints. The
	// flag is declared here so that cobra does not give it the shorthand
	// -v: kubectl's -v is log verbosity, not the version.
	root.SetVersionTemplate("probed {{.Version}}\n")
	root.Flags().Bool("version", false, "print the version, the commit and the Go version (as probed version does)")
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(newRunCmd(stderr), newCheckCmd(stdout, stderr), newStatusCmd(stdout), newEventsCmd(stdout), newPluginCmd(stdout, stderr), newReleaseCmd(stdout), newOffloadCmd(stdout), newWebhookCmd(stderr), newVersionCmd(stdout))
	return root
}

// newVersionCmd is `probed version`: the build's version, commit and Go
// toolchain (package version), as one line or, with -o json|yaml, as a
// version.Info document.
func newVersionCmd(stdout io.Writer) *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version, the commit and the Go version probed was built with",
		Args:  cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error {
			f, err := output.Parse(format)
			if err != nil {
				return err
			}
			info := version.Get()
			if f.Document() {
				return output.Write(stdout, f, info)
			}
			_, err = fmt.Fprintln(stdout, "probed", info)
			return err
		},
	}
	cmd.Flags().StringVarP(&format, "output", "o", "", "output format: table (one line; the default), json or yaml")
	return cmd
}

type logFlags struct {
	format, level string
	budget        int // bytes per second; probed run only
}

func (l *logFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&l.format, "log-format", "text", "log format: text or json")
	cmd.Flags().StringVar(&l.level, "log-level", "info", "log level: debug, info, warn or error")
}

func (l *logFlags) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(l.level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", l.level)
	}
	o := &slog.HandlerOptions{Level: level}
	switch l.format {
	case "text":
		return slog.New(slog.NewTextHandler(w, o)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, o)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", l.format)
}

func newRunCmd(stderr io.Writer) *cobra.Command {
	var opts agent.Options
	var logs logFlags
	var tel telemetry.Options
	var runFor time.Duration
	var kube kubeFlags
	var eventMode string
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Probe the pods of a manifest directory (default: the bundled examples)",
		Long: `Run reads Pod manifests (and the pod templates of Deployments, StatefulSets,
DaemonSets, ReplicaSets, ReplicationControllers, Jobs and CronJobs) from
--manifests, probes them with the kubelet's semantics, watches the directory
for changes, and serves the pods' statuses on --listen (GET /pods,
/pods/{namespace}/{name}/probes, /healthz, /metrics/probes, /metrics, /events,
/debug/scheduler). Without --manifests it runs the bundled examples.

With --kubeconfig or --in-cluster it runs in cluster mode instead: it watches
the pods bound to --node-name through the API server, runs the probes of their
probed.io/probes annotation (the kubelet keeps running the spec's probes), and
writes its verdicts as the --readiness-gate condition of the pods that list
that gate, and as Events (docs/cluster.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := stderr
			if logs.budget > 0 {
				opts.LogBudget = logbudget.New(stderr, logbudget.Options{BytesPerSecond: logs.budget,
					Report: func(w io.Writer, lines, bytes int64, since time.Duration) {
						if l, err := logs.logger(w); err == nil {
							l.Warn("log lines dropped: the log budget is spent (--log-budget)", "lines", lines, "bytes", bytes,
								"in", since.String(), "budgetBytesPerSecond", logs.budget)
						}
					}})
				out = opts.LogBudget
			}
			log, err := logs.logger(out)
			if err != nil {
				return err
			}
			opts.Logger = log
			if opts.Events, err = manager.ParseEventMode(eventMode); err != nil {
				return err
			}
			// client-go logs through klog: its lines go through the same
			// handler, redacted, cut and within the log budget.
			klog.SetSlogLogger(slog.New(redact.NewHandler(log.Handler())))
			if _, err := applyMemoryLimit(log); err != nil {
				return err
			}
			if opts.Cluster, err = kube.cluster(cmd, tel.NodeName); err != nil {
				return err
			}
			if opts.Cluster == nil && opts.ManifestDir == "" {
				dir, err := writeExamples()
				if err != nil {
					return err
				}
				defer os.RemoveAll(dir)
				log.Info("no --manifests given: running the bundled examples", "dir", dir)
				opts.ManifestDir = dir
			}
			tel.ServiceVersion = version.Get().Version
			tp, err := telemetry.Setup(cmd.Context(), tel)
			if err != nil {
				return err
			}
			defer func() {
				// Flush the spans of the last probes on exit.
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				if err := tp.Shutdown(ctx); err != nil {
					log.Warn("flushing traces", "err", err)
				}
			}()
			opts.TracerProvider = tp
			opts.Version = version.Get().Version
			a, err := agent.New(opts)
			if err != nil {
				return err
			}
			if opts.AllowHostExec {
				logTreeKill(log)
			}
			// SIGHUP (the terminal or session went away) stops probed
			// like SIGTERM: in-flight probes drain, the state is written.
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
			defer stop()
			if runFor > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, runFor)
				defer cancel()
			}
			return a.Run(ctx)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.ManifestDir, "manifests", "", "directory of pod manifests (*.yaml, *.yml, *.json), or one manifest file (as the kubelet's --pod-manifest-path); default: the bundled examples")
	f.StringVar(&opts.Listen, "listen", "127.0.0.1:8089", "address of the HTTP API (loopback by default)")
	f.StringVar(&opts.PodIP, "pod-ip", "127.0.0.1", "pod IP of pods whose manifest has no status.podIP")
	f.BoolVar(&opts.AllowHostExec, "allow-host-exec", false, "run exec probes' commands on this host (off: exec probes are reported as not run)")
	f.StringVar(&opts.OnRestart, "on-restart", "", "shell command run after each probe-triggered container restart, with PROBED_POD_NAME, PROBED_POD_NAMESPACE, PROBED_POD_UID, PROBED_CONTAINER_NAME, PROBED_CONTAINER_ID, PROBED_OLD_CONTAINER_ID, PROBED_RESTART_COUNT, PROBED_REASON, PROBED_RESTARTED, PROBED_GRACE_PERIOD_SECONDS")
	f.DurationVar(&opts.OnRestartTimeout, "on-restart-timeout", time.Minute, "time limit of each --on-restart command")
	f.IntVar(&opts.PoolSize, "pool-size", 256, "most network and plugin probes running at once (healthy probes take milliseconds: probe rate × latency, with a margin)")
	f.IntVar(&opts.SlowPoolSize, "slow-pool-size", 1024, "most slow network probes running at once: probes whose last run took half their timeout or more (size it by their rate × timeout)")
	f.IntVar(&opts.ExecPoolSize, "exec-pool-size", 64, "most exec probes running at once")
	f.Float64Var(&opts.PodPoolShare, "pod-pool-share", agent.DefaultPodPoolShare, "most of each pool one pod's probe runs hold at once, as a fraction of the pool (at least one slot; 0: no bound): a pod whose probes hang delays only itself")
	f.Float64Var(&opts.NamespacePoolShare, "namespace-pool-share", agent.DefaultNamespacePoolShare, "most of each pool one namespace's probe runs hold at once, as a fraction of the pool (at least one slot; 0: no bound)")
	f.DurationVar(&opts.SchedulerTick, "scheduler-tick", 10*time.Millisecond, "resolution of the scheduler's timing wheel: periods are rounded up to whole ticks (1ms-2ms spreads sub-second probes over smaller batches, docs/probes.md)")
	f.DurationVar(&opts.SchedulerCoalesce, "scheduler-coalesce", agent.DefaultSchedulerCoalesce, "probe runs due within this window start from one wake-up of the scheduler and the pool: a run is at most this late, never misses a period and keeps its phase (0: off; at most 50ms; docs/benchmarks.md)")
	f.BoolVar(&opts.HTTPKeepAlive, "http-keep-alive", false, "HTTP probes keep their connection between runs unless their annotation says httpGet.keepAlive: false (one idle connection per probe; off: a new connection per run, as the kubelet; docs/probes.md)")
	f.DurationVar(&opts.SyncFrequency, "sync-frequency", time.Minute, "interval of full pod status regenerations (as the kubelet's --sync-frequency)")
	f.DurationVar(&opts.Rescan, "rescan-interval", 30*time.Second, "interval of full manifest-directory rescans (besides file events)")
	f.DurationVar(&runFor, "for", 0, "stop after this long (0: run until SIGINT, SIGTERM or SIGHUP)")
	f.StringVar(&opts.PluginDir, "plugin-dir", "", "directory of probe plugins: every executable file in it is started as a plugin (docs/plugins.md)")
	f.StringVar(&opts.PluginConfig, "plugin-config", "", "probe plugin configuration file, YAML or JSON: paths, sha256 pins, in-flight caps, parameter schemas (docs/plugins.md)")
	f.BoolVar(&opts.RequirePluginPin, "require-plugin-pin", false, "refuse to start when any plugin has no sha256 pin in --plugin-config (the error gives each binary's sha256); without it, unpinned plugins are named in one warning")
	f.StringVar(&opts.StateDir, "state-dir", "", "directory for the pods' last statuses, read back at start (off when empty)")
	f.DurationVar(&opts.StateInterval, "state-interval", time.Second, "how often changed statuses are written to --state-dir")
	f.BoolVar(&opts.NoPerPodLabels, "no-per-pod-metric-labels", false, "leave the container, pod, namespace and pod_uid labels of prober_probe_* empty: one series per probe type and result, for very dense nodes")
	f.IntVar(&opts.History, "history", 10, "results kept per probe for GET /pods/{namespace}/{name}/probes")
	f.StringVar(&eventMode, "events", "all", "which probe runs record an Event: all (every failed run, the kubelet's) or transitions (one per verdict change, and one when a probe starts erroring)")
	f.StringVar(&tel.Exporter, "otel-traces-exporter", "", "traces exporter: none, console or otlp (default: $OTEL_TRACES_EXPORTER, else none)")
	f.StringVar(&tel.Endpoint, "otel-endpoint", "", "OTLP endpoint, host:port (plaintext) or URL (default: $OTEL_EXPORTER_OTLP_ENDPOINT)")
	f.StringVar(&tel.Protocol, "otel-protocol", "", "OTLP protocol: grpc or http/protobuf (default: $OTEL_EXPORTER_OTLP_PROTOCOL, else grpc)")
	f.StringVar(&tel.Sampler, "otel-sampler", "", "traces sampler (default: $OTEL_TRACES_SAMPLER, else probed_default: every failed, errored or changed probe and a ratio of the rest)")
	f.StringVar(&tel.SamplerArg, "otel-sampler-arg", "", "sampler ratio (default: $OTEL_TRACES_SAMPLER_ARG, else 0.01 for probed_default)")
	f.StringVar(&tel.NodeName, "node-name", nodeName(), "this node's name: in cluster mode, whose pods are probed; also the k8s.node.name resource attribute (default: $NODE_NAME, else the host name)")
	kube.add(cmd)
	logs.add(cmd)
	f.IntVar(&logs.budget, "log-budget", logbudget.DefaultBytesPerSecond,
		"bytes of log written per second at most, whatever the pods do (a burst of 4 s of it); lines beyond are dropped and counted (probed_log_lines_dropped_total), and one line says so every 10 s; 0: no budget")
	return cmd
}

// logTreeKill says at start how exec probe commands' process trees are
// killed on this host (docs/operations.md, "What exec may do").
func logTreeKill(log *slog.Logger) {
	tk := probeexec.HostTreeKill()
	if tk.Mode == probeexec.TreeKillCgroup {
		log.Info("exec probes: process trees killed through cgroup v2 leaves", "treeKill", tk.Mode,
			"cgroup", tk.Cgroup, "leftoversKilled", tk.LeftoversKilled)
		return
	}
	log.Warn("exec probes: cgroup v2 tree kill not available, falling back to process-group kill (a descendant whose parent exited, e.g. a daemon, can escape)",
		"treeKill", tk.Mode, "reason", tk.Reason)
}

// nodeName is --node-name's default: $NODE_NAME (the downward API's
// spec.nodeName in the DaemonSet), else the host name.
func nodeName() string {
	if n := os.Getenv("NODE_NAME"); n != "" {
		return n
	}
	h, _ := os.Hostname()
	return h
}

func newStatusCmd(stdout io.Writer) *cobra.Command {
	var server, format, namespace string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Print the pods of a running probed like kubectl get pods (READY, STARTED, RESTARTS, last failure), and its rejected manifests",
		Long: `Status reads a running probed's API (--server) and prints its pods like
kubectl get pods: READY, STARTED, RESTARTS, STATUS, AGE and each pod's last
probe failure; -o wide adds the pod IP and every probe's last result. Below
the pods it lists the manifest documents the agent rejected (file, document,
line, pod, since when, whether the pod's last valid version is still probed,
the error) and those it skipped (no pod in them), when the agent serves
GET /manifests. -o json and -o yaml print the same as a ProbedStatus document
(docs/operations.md, "probed status").`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := output.Parse(format)
			if err != nil {
				return err
			}
			base, err := statusview.ParseServer(server)
			if err != nil {
				return err
			}
			return statusview.Print(cmd.Context(), statusview.Options{Server: base, Namespace: namespace, Output: f}, stdout)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&server, "server", "s", "http://127.0.0.1:8089", "the agent's API: host:port (http) or an http:// or https:// URL")
	f.StringVarP(&format, "output", "o", "", "output format: table (the default), wide, json or yaml")
	f.StringVarP(&namespace, "namespace", "n", "", "only pods of this namespace (default: all)")
	return cmd
}

// newEventsCmd is `probed events`: the health-event log of a running
// agent (GET /events?type=transition), one JSON object per line.
func newEventsCmd(stdout io.Writer) *cobra.Command {
	var server string
	var opts statusview.WatchOptions
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Print the health-event log of a running probed: every verdict change of its probes, one JSON object per line",
		Long: `Events reads a running probed's health-event log (--server, GET
/events?type=transition) and prints each entry as one JSON object per line,
oldest first: the probe (pod, container, type, handler), the verdict before
and after (UNKNOWN before a container's first), the run that decided it (its
time, latency, result, attempts and message), whether it was the container's
first check, and on a container's first Success its time from the
container's start (docs/operations.md, "The health-event log"). With
--watch it keeps printing new entries as they come until interrupted.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			base, err := statusview.ParseServer(server)
			if err != nil {
				return err
			}
			opts.Server = base
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return statusview.Transitions(ctx, opts, stdout)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&server, "server", "s", "http://127.0.0.1:8089", "the agent's API: host:port (http) or an http:// or https:// URL")
	f.BoolVarP(&opts.Watch, "watch", "w", false, "keep printing new entries until interrupted")
	f.DurationVar(&opts.Interval, "interval", time.Second, "how often --watch asks the agent for new entries")
	return cmd
}

// writeExamples copies the bundled example manifests into a new temporary
// directory.
func writeExamples() (string, error) {
	dir, err := os.MkdirTemp("", "probed-examples-")
	if err != nil {
		return "", err
	}
	err = fs.WalkDir(examples.Manifests, "manifests", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := examples.Manifests.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, filepath.Base(path)), data, 0o644)
	})
	if err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

func newCheckCmd(stdout, stderr io.Writer) *cobra.Command {
	var opts check.Options
	var format string
	cmd := &cobra.Command{
		Use:   "check -f FILE|DIR|-",
		Short: "Run every probe of a manifest once, now, and print the results (exit 0: all succeed, 1: any fails, 2: bad input or no probe to run)",
		Long: `Check reads the manifest -f names — a file, every manifest file (*.yaml,
*.yml, *.json) of a directory as probed run reads --manifests, or - for
standard input — runs each selected probe once, now, and prints one row per
probe: POD CONTAINER PROBE HANDLER RESULT DURATION MESSAGE (-o wide adds the
pod IP and prints whole messages). -o json and -o yaml print a CheckReport
document instead, written even on bad input so that a pipeline sees the
errors (docs/operations.md, "probed check").`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.File == "" {
				return errors.New("-f FILE is required (a manifest file, a directory of them, or - for stdin)")
			}
			f, err := output.Parse(format)
			if err != nil {
				return err
			}
			opts.Output = f
			opts.Stdin = cmd.InOrStdin()
			if opts.ProbeType != "" {
				opts.ProbeType = strings.ToLower(opts.ProbeType)
			}
			code := check.Run(cmd.Context(), opts, stdout, stderr)
			if code != 0 {
				return exitError{code}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&opts.File, "file", "f", "", "manifest file (Pods or workloads with pod templates), a directory of them, or - for stdin")
	f.StringVarP(&format, "output", "o", "", "output format: table (the default), wide, json or yaml")
	f.StringVarP(&opts.Namespace, "namespace", "n", "", "only probes of pods in this namespace (default: all)")
	f.StringVar(&opts.Pod, "pod", "", "only probes of this pod (name or namespace/name; a workload's pod is named after it)")
	f.StringVar(&opts.Container, "container", "", "only probes of this container")
	f.StringVar(&opts.ProbeType, "probe", "", "only this probe type: liveness, readiness or startup")
	f.StringVar(&opts.PodIP, "pod-ip", "127.0.0.1", "pod IP of pods whose manifest has no status.podIP")
	f.BoolVar(&opts.AllowHostExec, "allow-host-exec", false, "run exec probes' commands on this host (off: reported as not run)")
	f.IntVar(&opts.Parallel, "parallel", 16, "most probes running at once")
	return cmd
}
