// Package pluginhost runs probe plugins: separate binaries that serve
// custom probe kinds (or built-in ones, out of process) over probed's
// plugin contract, probeplugin.v1 on hashicorp/go-plugin with gRPC
// (runtime/pluginproto).
//
// A Host discovers plugins from a directory and a configuration file,
// starts each with automatic mutual TLS (and, when pinned, after checking
// its SHA-256), asks it which kinds it serves (GetInfo), configures it, and
// offers one runtime.Handler per kind (Register puts them on a
// *runtime.Runtime). It routes each probe to its plugin with the probe's
// deadline, caps the probes in flight per plugin, restarts a plugin that
// died with exponential backoff (the first restart at once), and kills every
// plugin on Close.
//
// A plugin that crashed, hangs, is restarting or answers nonsense makes the
// probe errored (a non-nil error from Prober.Probe), which the worker
// discards (spec P5, W5.10): a plugin can never cause a liveness failure,
// and other kinds keep running.
package pluginhost

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/fileread"
)

// Backoff is the restart policy of a plugin that died.
type Backoff struct {
	// Min is the delay before the second consecutive restart attempt; each
	// further attempt doubles it. The first restart after a plugin that had
	// been healthy dies is immediate. Default 250 ms.
	Min time.Duration
	// Max bounds the delay. Default 30 s.
	Max time.Duration
	// ResetAfter: a plugin that stayed up this long counts as healthy again.
	// Default 10 s.
	ResetAfter time.Duration
}

// delay returns the wait before restart attempt n (0-based) of a run of
// consecutive failures.
func (b Backoff) delay(n int) time.Duration {
	if n <= 0 {
		return 0
	}
	d := b.Min
	for i := 1; i < n && d < b.Max; i++ {
		d *= 2
	}
	return min(d, b.Max)
}

// Options configure New.
type Options struct {
	// Dir is the plugin directory (--plugin-dir): every executable regular
	// file in it is started as a plugin named after the file. Optional.
	Dir string
	// ConfigFile is the plugin configuration file (--plugin-config; see
	// Config). Optional.
	ConfigFile string
	// Plugins are configured in addition to ConfigFile's (same names are an
	// error).
	Plugins []PluginConfig
	// RequirePin refuses to start when any plugin has no sha256 pin (the
	// error names each, with its binary's current SHA-256). Without it,
	// unpinned plugins start and one WARN line names them.
	RequirePin bool
	// SocketDir is where the host creates its private directory of plugin
	// sockets, probed-plugins-* (one subdirectory per plugin, handed to the
	// plugin as PLUGIN_UNIX_SOCKET_DIR, emptied before each start so a
	// plugin killed with SIGKILL leaves no socket behind; locked while the
	// host lives; removed by Close, or by the next host when the agent was
	// killed). Default: the system's temporary directory.
	SocketDir string

	// Logger receives the host's logs and the plugins' (their stderr, JSON
	// lines keeping their level); nil: slog.Default(). Plugins log at the
	// lowest level this logger accepts.
	Logger *slog.Logger
	// TracerProvider for the client spans of plugin RPCs (children of the
	// probe's span; the trace context propagates into the plugin). Nil: the
	// global provider.
	TracerProvider trace.TracerProvider
	// Registerer, when set, receives probed_plugin_up,
	// probed_plugin_restarts_total and probed_plugin_in_flight (label
	// plugin); Close unregisters them.
	Registerer prometheus.Registerer

	// NodeName and HostVersion are sent to plugins with Configure.
	NodeName, HostVersion string

	// StartTimeout bounds one start of a plugin: the go-plugin handshake,
	// GetInfo and Configure. Default 10 s.
	StartTimeout time.Duration
	// KillTimeout bounds the stop of one plugin (go-plugin's Kill asks the
	// plugin to exit, waits 2 s, then kills it); past it the process is
	// killed with SIGKILL. Default 5 s.
	KillTimeout time.Duration
	// Restart is the restart policy.
	Restart Backoff
	// DefaultMaxInFlight caps the probes in flight per plugin when neither
	// the configuration nor the plugin sets a cap. Default 64.
	DefaultMaxInFlight int
	// Grace is added to a probe's deadline for the RPC's own deadline, so a
	// verdict the plugin reaches at the probe's deadline (a timeout of the
	// target, a Failure) still arrives. A plugin that has not answered by
	// then makes the attempt errored. Default 50 ms.
	Grace time.Duration
}

func (o *Options) defaults() {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 10 * time.Second
	}
	if o.KillTimeout <= 0 {
		o.KillTimeout = 5 * time.Second
	}
	if o.Restart.Min <= 0 {
		o.Restart.Min = 250 * time.Millisecond
	}
	if o.Restart.Max <= 0 {
		o.Restart.Max = 30 * time.Second
	}
	if o.Restart.ResetAfter <= 0 {
		o.Restart.ResetAfter = 10 * time.Second
	}
	if o.DefaultMaxInFlight <= 0 {
		o.DefaultMaxInFlight = 64
	}
	if o.Grace <= 0 {
		o.Grace = 50 * time.Millisecond
	}
}

// Host runs the plugins. Its methods are safe for concurrent use.
type Host struct {
	opts    Options
	log     *slog.Logger
	plugins []*instance
	kinds   map[string]*kindHandler
	metrics *metrics

	// socketDir holds one directory per plugin for its unix socket
	// (go-plugin's PLUGIN_UNIX_SOCKET_DIR), locked while the host lives;
	// Close removes it.
	socketDir       string
	unlockSocketDir func()

	ctx       context.Context // cancelled by Close
	cancel    context.CancelFunc
	closeOnce sync.Once
	closeErr  error
}

// New starts every plugin of opts (Dir, ConfigFile, Plugins) and waits for
// each to serve: handshake, GetInfo and Configure, bounded by
// StartTimeout and ctx. With no plugin at all it returns an empty Host.
//
// It fails — after stopping the plugins it started — when the configuration
// is invalid or not a regular file, RequirePin is set and a plugin has no
// pin, a binary is missing, a pinned binary's SHA-256 differs or cannot be
// computed (not a regular file, more than MaxBinaryBytes: "refusing to
// start"), a plugin wrote to stdout before the go-plugin
// handshake, speaks another protocol version, does not start in time,
// reports an invalid kind, or two plugins serve the same kind. Every
// plugin's error is included.
func New(ctx context.Context, opts Options) (*Host, error) {
	opts.defaults()
	h := &Host{opts: opts, log: opts.Logger, kinds: map[string]*kindHandler{}}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	configured := append([]PluginConfig(nil), opts.Plugins...)
	baseDir := ""
	if opts.ConfigFile != "" {
		c, err := LoadConfig(opts.ConfigFile)
		if err != nil {
			return nil, err
		}
		configured = append(configured, c.Plugins...)
		baseDir = filepath.Dir(opts.ConfigFile)
	}
	if err := (&Config{Plugins: configured}).Validate(); err != nil {
		return nil, fmt.Errorf("plugins: %w", err)
	}
	cfgs, err := plan(opts.Dir, baseDir, configured)
	if err != nil {
		return nil, err
	}
	if err := checkPinned(cfgs, opts.RequirePin); err != nil {
		return nil, err
	}
	if len(cfgs) > 0 {
		if h.socketDir, h.unlockSocketDir, err = makeSocketDir(opts.SocketDir); err != nil {
			return nil, err
		}
	}
	for i, c := range cfgs {
		in, err := newInstance(h, c, filepath.Join(h.socketDir, strconv.Itoa(i)))
		if err != nil {
			_ = h.removeSocketDir()
			return nil, err
		}
		h.plugins = append(h.plugins, in)
	}
	if h.metrics, err = newMetrics(opts.Registerer, h); err != nil {
		_ = h.removeSocketDir()
		return nil, err
	}
	for _, in := range h.plugins {
		h.metrics.declare(in.cfg.Name)
	}
	// Start all at once; each supervisor reports its first start.
	results := make([]chan error, len(h.plugins))
	for i, in := range h.plugins {
		results[i] = make(chan error, 1)
		go in.supervise(results[i])
	}
	var errs []error
	for i, in := range h.plugins {
		select {
		case err := <-results[i]:
			if err != nil {
				errs = append(errs, err)
			}
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("plugin %q: not started: %w", in.cfg.Name, ctx.Err()))
		}
	}
	if len(errs) == 0 {
		errs = h.indexKinds()
	}
	if len(errs) > 0 {
		closeCtx, cancel := context.WithTimeout(context.Background(), opts.KillTimeout+opts.StartTimeout)
		defer cancel()
		_ = h.Close(closeCtx)
		return nil, errors.Join(errs...)
	}
	var unpinned []string
	for _, in := range h.plugins {
		h.log.Info("plugin started", "plugin", in.cfg.Name, "version", in.version, "path", in.cfg.Path, "kinds", in.kindNames(), "maxInFlight", cap(in.sem), "pinned", len(in.checksum) > 0, "egress", in.egressState())
		if in.checksum == nil {
			unpinned = append(unpinned, in.cfg.Name)
		}
	}
	if len(unpinned) > 0 {
		h.log.Warn("plugins run unpinned: their binaries are not checked before they start (set sha256 in --plugin-config; --require-plugin-pin refuses unpinned plugins)", "plugins", unpinned)
	}
	return h, nil
}

// checkPinned returns, when required, an error naming every plugin without
// a sha256 pin, with its binary's current SHA-256 to pin (or why it cannot
// be computed).
func checkPinned(cfgs []PluginConfig, required bool) error {
	if !required {
		return nil
	}
	var errs []error
	for _, c := range cfgs {
		if c.SHA256 != "" {
			continue
		}
		sum := "cannot be computed"
		if b, err := fileread.SHA256(c.Path, MaxBinaryBytes); err == nil {
			sum = "is " + hex.EncodeToString(b)
		} else {
			sum += ": " + err.Error()
		}
		errs = append(errs, fmt.Errorf("plugin %q (%s) has no sha256 pin and pins are required (RequirePin, --require-plugin-pin); its sha256 %s", c.Name, c.Path, sum))
	}
	return errors.Join(errs...)
}

// indexKinds builds the kind → handler index; two plugins serving one kind
// is an error.
func (h *Host) indexKinds() []error {
	var errs []error
	for _, in := range h.plugins {
		for _, k := range in.kindNames() {
			if other, ok := h.kinds[k]; ok {
				errs = append(errs, fmt.Errorf("probe kind %q is served by two plugins, %q and %q; remove one", k, other.in.cfg.Name, in.cfg.Name))
				continue
			}
			h.kinds[k] = in.kinds[k]
		}
	}
	return errs
}

// Kinds returns the probe kinds the plugins serve, sorted.
func (h *Host) Kinds() []string {
	out := make([]string, 0, len(h.kinds))
	for k := range h.kinds {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// HasKind reports whether a plugin serves kind. (The agent checks the
// probed.io/probes annotation against the runtime, where Register puts
// these kinds next to the in-process handlers.)
func (h *Host) HasKind(kind string) bool {
	_, ok := h.kinds[kind]
	return ok
}

// Handler returns the handler of kind, or nil when no plugin serves it.
func (h *Host) Handler(kind string) runtime.Handler {
	if k, ok := h.kinds[kind]; ok {
		return k
	}
	return nil
}

// Register registers the handler of every kind on rt. A plugin serving a
// built-in kind (http, tcp, exec, grpc) replaces the in-process handler
// registered on rt; probes prepared before keep the old one. It fails when
// a plugin kind is already registered on rt by something else.
func (h *Host) Register(rt *runtime.Runtime) error {
	for _, kind := range h.Kinds() {
		if runtime.IsBuiltinKind(kind) && rt.HasKind(kind) {
			rt.Unregister(kind)
			h.log.Info("plugin replaces the built-in handler", "kind", kind, "plugin", h.kinds[kind].in.cfg.Name)
		}
		if err := rt.Register(kind, h.kinds[kind]); err != nil {
			return fmt.Errorf("plugin %q: %w", h.kinds[kind].in.cfg.Name, err)
		}
	}
	return nil
}

// PluginStatus describes one plugin, for diagnostics (e.g. a debug
// endpoint).
type PluginStatus struct {
	// Name and Path are the configured name and the binary's absolute path.
	Name string `json:"name"`
	Path string `json:"path"`
	// Version is the version the plugin reports.
	Version string `json:"version,omitempty"`
	// Kinds are the probe kinds it serves.
	Kinds []string `json:"kinds"`
	// Running: a process serves now, with process ID PID.
	Running bool `json:"running"`
	PID     int  `json:"pid,omitempty"`
	// Restarts counts restart attempts since New.
	Restarts int64 `json:"restarts"`
	// InFlight probes now, out of at most MaxInFlight.
	InFlight    int `json:"inFlight"`
	MaxInFlight int `json:"maxInFlight"`
	// Pinned: the binary's SHA-256 is checked before every start.
	Pinned bool `json:"pinned"`
	// LastError is the last start failure or exit, cleared by a successful
	// restart, redacted (runtime/redact): the plugin's environment values,
	// its secret-named configuration values and credential-shaped text are
	// replaced with redact.Mask, since a plugin's error may echo them.
	LastError string `json:"lastError,omitempty"`
}

// Status describes every plugin, sorted by name.
func (h *Host) Status() []PluginStatus {
	out := make([]PluginStatus, 0, len(h.plugins))
	for _, in := range h.plugins {
		out = append(out, in.status())
	}
	return out
}

// Close stops restarting plugins and kills every plugin process, each
// bounded by KillTimeout, and waits for them and the host's goroutines,
// bounded by ctx. Probes in flight end errored. Close is idempotent; later
// calls return the first call's result.
func (h *Host) Close(ctx context.Context) error {
	h.closeOnce.Do(func() {
		h.cancel()
		var errs []error
		for _, in := range h.plugins {
			select {
			case <-in.done:
			case <-ctx.Done():
				errs = append(errs, fmt.Errorf("plugin %q: still stopping: %w", in.cfg.Name, ctx.Err()))
			}
			if err := in.stopErr(); err != nil {
				errs = append(errs, err)
			}
		}
		h.metrics.unregister()
		if err := h.removeSocketDir(); err != nil {
			errs = append(errs, fmt.Errorf("plugins: socket directory: %w", err))
		}
		h.closeErr = errors.Join(errs...)
	})
	return h.closeErr
}

// removeSocketDir removes the host's socket directory, if any, and
// releases its lock.
func (h *Host) removeSocketDir() error {
	if h.socketDir == "" {
		return nil
	}
	err := os.RemoveAll(h.socketDir)
	h.unlockSocketDir()
	return err
}
