package pluginhost

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	goruntime "runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-plugin"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"

	"github.com/probed/probed/runtime/fileread"
	"github.com/probed/probed/runtime/pluginproto"
	pb "github.com/probed/probed/runtime/pluginproto/probeplugin/v1"
	"github.com/probed/probed/runtime/redact"
)

// instance is one configured plugin across its restarts.
type instance struct {
	h        *Host
	cfg      PluginConfig
	checksum []byte
	log      *slog.Logger
	// socketDir holds the unix socket of the plugin's process: its own
	// directory under the host's, emptied before each start.
	socketDir string

	// Fixed by the first start, read only once ready is set.
	ready   atomic.Bool
	sem     chan struct{} // in-flight slots
	kinds   map[string]*kindHandler
	version string

	live     atomic.Pointer[proc] // nil while down
	restarts atomic.Int64
	// announcesEgress: at its last start the plugin announced
	// pluginproto.APIVersionEgress (it enforces the egress policy).
	announcesEgress atomic.Bool

	// secrets are the plugin's environment values and secret-named
	// configuration values, hidden from the status it reports.
	secrets redact.Secrets

	mu      sync.Mutex
	lastErr error // last start or exit error
	killErr error // error of the final stop

	done chan struct{} // closed when the supervisor has returned
}

// proc is one running plugin process.
type proc struct {
	client  *plugin.Client
	conn    *pluginproto.Conn
	pid     int
	started time.Time
	info    *pb.GetInfoResponse
}

func newInstance(h *Host, c PluginConfig, socketDir string) (*instance, error) {
	in := &instance{h: h, cfg: c, log: h.log.With("plugin", c.Name), done: make(chan struct{}), socketDir: socketDir}
	in.secrets = redact.ForContainer(&v1.Container{Env: envVars(c.Env)}, c.Config)
	if c.SHA256 != "" {
		sum, err := parseChecksum(c.SHA256)
		if err != nil {
			return nil, fmt.Errorf("plugin %q: sha256: %w", c.Name, err)
		}
		in.checksum = sum
	}
	return in, nil
}

// envVars lists a plugin's environment as container variables, the shape
// redact.ForContainer reads.
func envVars(env map[string]string) []v1.EnvVar {
	out := make([]v1.EnvVar, 0, len(env))
	for k, v := range env {
		out = append(out, v1.EnvVar{Name: k, Value: v})
	}
	return out
}

func (in *instance) kindNames() []string {
	out := make([]string, 0, len(in.kinds))
	for k := range in.kinds {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (in *instance) setErr(err error) {
	in.mu.Lock()
	in.lastErr = err
	in.mu.Unlock()
}

func (in *instance) stopErr() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.killErr
}

func (in *instance) closing() bool {
	return in.h.ctx.Err() != nil
}

// supervise owns the plugin's processes: it starts the first one (its
// result goes to first), restarts the plugin whenever it dies, and kills
// it when the host closes.
//
// The goroutine keeps its OS thread locked while it runs, so the plugin
// processes are all started from that one thread; on Linux they get
// SIGKILL (Pdeathsig) when that thread ends (golang/go#27505). It unlocks
// the thread when it returns, after killing its plugin, instead of letting
// Go destroy the thread: that would also signal unrelated children started
// from the same thread earlier. So the thread ends only with the agent.
func (in *instance) supervise(first chan<- error) {
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	defer close(in.done)
	p, err := in.start(true)
	if err != nil {
		in.setErr(err)
		first <- err
		return
	}
	in.ready.Store(true)
	in.live.Store(p)
	first <- nil
	failures := 0
	for {
		select {
		case <-p.conn.Done:
		case <-in.h.ctx.Done():
			in.live.Store(nil)
			in.stop(p)
			return
		}
		in.live.Store(nil)
		up := time.Since(p.started)
		in.setErr(fmt.Errorf("plugin process %d exited after %s", p.pid, up.Round(time.Millisecond)))
		in.log.Warn("plugin exited; restarting it", "pid", p.pid, "uptime", up.Round(time.Millisecond).String())
		in.stop(p)
		if up >= in.h.opts.Restart.ResetAfter {
			failures = 0
		}
		for {
			d := in.h.opts.Restart.delay(failures)
			failures++
			if d > 0 {
				t := time.NewTimer(d)
				select {
				case <-t.C:
				case <-in.h.ctx.Done():
					t.Stop()
					return
				}
			}
			if in.closing() {
				return
			}
			in.restarts.Add(1)
			in.h.metrics.restarted(in.cfg.Name)
			p, err = in.start(false)
			if err == nil {
				break
			}
			in.setErr(err)
			if in.closing() {
				return
			}
			in.log.Error("plugin restart failed", "attempt", failures, "next", in.h.opts.Restart.delay(failures).String(), "err", in.secrets.Error(err))
		}
		in.live.Store(p)
		in.setErr(nil)
		in.log.Info("plugin restarted", "pid", p.pid, "restarts", in.restarts.Load())
	}
}

// start starts one plugin process and checks it serves: handshake,
// GetInfo, Configure. The first start fixes the kinds and the in-flight
// cap; later starts must serve the same kinds.
func (in *instance) start(first bool) (*proc, error) {
	opts := &in.h.opts
	cmd := exec.Command(in.cfg.Path, in.cfg.Args...)
	// The agent's environment, then ours (later entries win; go-plugin
	// adds its handshake variables last).
	cmd.Env = append(os.Environ(), pluginproto.EnvLogLevel+"="+logLevel(in.log))
	for k, v := range in.cfg.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Env = append(cmd.Env, plugin.EnvUnixSocketDir+"="+in.socketDir) // last: ours wins
	setParentDeathSignal(cmd)
	if err := in.checkPin(); err != nil {
		return nil, err
	}
	if err := checkTrusted(fmt.Sprintf("plugin %q: binary", in.cfg.Name), in.cfg.Path); err != nil {
		return nil, err
	}
	// The socket of a previous process killed with SIGKILL is still there.
	if err := in.resetSocketDir(); err != nil {
		return nil, err
	}
	tp := opts.TracerProvider
	var traceOpts []otelgrpc.Option
	if tp != nil {
		traceOpts = append(traceOpts, otelgrpc.WithTracerProvider(tp))
	}
	traceOpts = append(traceOpts, otelgrpc.WithFilter(pluginproto.TraceFilter()), otelgrpc.WithPropagators(pluginproto.Propagator()))
	hl := newHCLog(in.log, "")
	stderrTail := &tailBuffer{max: 2048}
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  pluginproto.Handshake,
		VersionedPlugins: pluginproto.VersionedPlugins(nil),
		Cmd:              cmd,
		AutoMTLS:         true,
		SkipHostEnv:      true, // cmd.Env has it already
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		Logger:           hl,
		StartTimeout:     opts.StartTimeout,
		GRPCDialOptions:  []grpc.DialOption{grpc.WithStatsHandler(otelgrpc.NewClientHandler(traceOpts...))},
		// After the handshake, what the plugin writes to its os.Stdout and
		// os.Stderr arrives through go-plugin's stdio stream.
		SyncStdout: &lineWriter{log: func(l string) { in.log.Debug("plugin stdout", "line", l) }},
		SyncStderr: &lineWriter{log: func(l string) { in.log.Debug("plugin stderr", "line", l) }},
		Stderr:     stderrTail,
	})
	fail := func(err error) (*proc, error) {
		in.kill(client, 0)
		return nil, err
	}
	rpc, err := client.Client()
	if err != nil {
		// Kill first: it waits until go-plugin has read all of the
		// plugin's stderr, whose tail goes into the error.
		in.kill(client, 0)
		return nil, in.explainStart(err, stderrTail.String())
	}
	raw, err := rpc.Dispense(pluginproto.PluginKey)
	if err != nil {
		return fail(fmt.Errorf("plugin %q: %w", in.cfg.Name, err))
	}
	conn, ok := raw.(*pluginproto.Conn)
	if !ok {
		return fail(fmt.Errorf("plugin %q: unexpected client type %T", in.cfg.Name, raw))
	}
	p := &proc{client: client, conn: conn, started: time.Now()}
	if rc := client.ReattachConfig(); rc != nil {
		p.pid = rc.Pid
	}
	// A Close during the RPCs below cuts them short.
	ctx, cancel := context.WithTimeout(in.h.ctx, opts.StartTimeout)
	defer cancel()
	if p.info, err = conn.GetInfo(ctx, &pb.GetInfoRequest{}); err != nil {
		return fail(fmt.Errorf("plugin %q: GetInfo: %w", in.cfg.Name, err))
	}
	if err := in.adopt(p.info, first); err != nil {
		return fail(err)
	}
	if _, err := conn.Configure(ctx, &pb.ConfigureRequest{NodeName: opts.NodeName, HostVersion: opts.HostVersion, Config: in.cfg.Config}); err != nil {
		return fail(fmt.Errorf("plugin %q: Configure: %w", in.cfg.Name, err))
	}
	in.log.Debug("plugin process started", "pid", p.pid, "version", p.info.GetPluginVersion())
	return p, nil
}

// explainStart turns go-plugin's start errors into ones that say what to
// do.
func (in *instance) explainStart(err error, stderr string) error {
	name, path := in.cfg.Name, in.cfg.Path
	msg := err.Error()
	said := ""
	if stderr = strings.TrimSpace(stderr); stderr != "" {
		said = "; its stderr ends with: " + stderr
	}
	switch {
	case strings.Contains(msg, "Failed to read any lines from plugin's stdout"),
		strings.Contains(msg, "plugin exited before we could connect"):
		return fmt.Errorf("plugin %q (%s) exited before the go-plugin handshake%s", name, path, said)
	case strings.Contains(msg, "Unrecognized remote plugin message"):
		line := strings.TrimSpace(strings.SplitN(strings.TrimPrefix(msg, "Unrecognized remote plugin message: "), "\n", 2)[0])
		return fmt.Errorf("plugin %q (%s) wrote %q to stdout before the go-plugin handshake: a plugin must print nothing to stdout before sdk.Serve (not even in init); log to stderr instead", name, path, line)
	case strings.Contains(msg, "Incompatible API version"), strings.Contains(msg, "incompatible"):
		return fmt.Errorf("plugin %q (%s) speaks another protocol version than probeplugin.v%d: rebuild it with this probed's plugins/sdk: %w", name, path, pluginproto.ProtocolVersion, err)
	case strings.Contains(msg, "timeout while waiting for plugin to start"):
		return fmt.Errorf("plugin %q (%s) did not complete the go-plugin handshake within %s (is it a probed plugin built with plugins/sdk?)%s", name, path, in.h.opts.StartTimeout, said)
	}
	return fmt.Errorf("plugin %q (%s): %w%s", name, path, err, said)
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if len(b.buf) > b.max {
		b.buf = append(b.buf[:0], b.buf[len(b.buf)-b.max:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// checkPin refuses to start a pinned plugin whose binary's SHA-256
// differs from the pin, or that cannot be hashed: not a regular file, more
// than MaxBinaryBytes (hashed streaming through runtime/fileread, so a FIFO
// or /dev/zero behind the path neither hangs nor runs without end). It runs
// before every start. (go-plugin's SecureConfig would do the same check,
// but its unbounded, blocking read is what this replaces.)
func (in *instance) checkPin() error {
	if in.checksum == nil {
		return nil
	}
	name, path := in.cfg.Name, in.cfg.Path
	sum, err := fileread.SHA256(path, MaxBinaryBytes)
	if err != nil {
		return fmt.Errorf("plugin %q: refusing to start %s: cannot verify its sha256: %w", name, path, err)
	}
	if !bytes.Equal(sum, in.checksum) {
		return fmt.Errorf("plugin %q: refusing to start %s: its sha256 is %s but the configuration pins %s (rebuild or re-pin the plugin)",
			name, path, hex.EncodeToString(sum), hex.EncodeToString(in.checksum))
	}
	return nil
}

// resetSocketDir empties the instance's socket directory (PLUGIN_UNIX_SOCKET_DIR
// of its processes; see Host): a process killed with SIGKILL leaves its
// socket behind, and the next start removes it.
func (in *instance) resetSocketDir() error {
	if err := os.RemoveAll(in.socketDir); err != nil {
		return fmt.Errorf("plugin %q: socket directory: %w", in.cfg.Name, err)
	}
	if err := os.Mkdir(in.socketDir, 0o700); err != nil {
		return fmt.Errorf("plugin %q: socket directory: %w", in.cfg.Name, err)
	}
	return nil
}

// adopt checks GetInfo's answer. On the first start it fixes the kinds and
// the cap; later, a plugin that no longer serves a kind it served is an
// error (new kinds are ignored until the agent restarts).
func (in *instance) adopt(info *pb.GetInfoResponse, first bool) error {
	if len(info.GetKinds()) == 0 {
		return fmt.Errorf("plugin %q serves no probe kind", in.cfg.Name)
	}
	served := map[string]*pb.KindInfo{}
	for _, k := range info.GetKinds() {
		if !validKind(k.GetName()) {
			return fmt.Errorf("plugin %q reports an invalid kind name %q", in.cfg.Name, k.GetName())
		}
		if served[k.GetName()] != nil {
			return fmt.Errorf("plugin %q reports kind %q twice", in.cfg.Name, k.GetName())
		}
		served[k.GetName()] = k
	}
	in.announcesEgress.Store(slices.Contains(info.GetApiVersions(), pluginproto.APIVersionEgress))
	if !first {
		var missing []string
		for k := range in.kinds {
			if served[k] == nil {
				missing = append(missing, k)
			}
		}
		if len(missing) > 0 {
			sort.Strings(missing)
			return fmt.Errorf("plugin %q no longer serves kind(s) %s", in.cfg.Name, strings.Join(missing, ", "))
		}
		return nil
	}
	for name := range in.cfg.Params {
		if served[name] == nil {
			return fmt.Errorf("plugin %q: the configuration gives params for kind %q, which the plugin does not serve", in.cfg.Name, name)
		}
	}
	limit := in.cfg.MaxInFlight
	if limit == 0 {
		limit = int(info.GetMaxConcurrency())
	}
	if limit <= 0 {
		limit = in.h.opts.DefaultMaxInFlight
	}
	in.sem = make(chan struct{}, limit)
	in.version = info.GetPluginVersion()
	in.kinds = map[string]*kindHandler{}
	for name, k := range served {
		kh, err := newKindHandler(in, k, in.cfg.Params[name])
		if err != nil {
			return err
		}
		in.kinds[name] = kh
	}
	return nil
}

// egressOK reports whether the plugin may run probes under an egress
// policy (cluster mode): it enforces the policy, or its configuration
// trusts it (TrustEgress).
func (in *instance) egressOK() bool { return in.announcesEgress.Load() || in.cfg.TrustEgress }

// egressState describes the plugin's side of the egress policy for logs.
func (in *instance) egressState() string {
	switch {
	case in.announcesEgress.Load():
		return "enforced"
	case in.cfg.TrustEgress:
		return "trusted (trustEgress)"
	}
	return "not enforced: its probes are errored in cluster mode"
}

// stop kills p (bounded) and records a failure to stop.
func (in *instance) stop(p *proc) {
	if err := in.kill(p.client, p.pid); err != nil {
		in.mu.Lock()
		in.killErr = err
		in.mu.Unlock()
	}
}

// kill ends a plugin client and its process. go-plugin's Kill asks the
// plugin to exit, waits 2 s, then kills it, but can hang on the connection
// (terraform#38939): past KillTimeout the process gets SIGKILL, and kill
// waits another KillTimeout for go-plugin to notice.
func (in *instance) kill(c *plugin.Client, pid int) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Kill()
	}()
	timeout := in.h.opts.KillTimeout
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
	}
	if pid == 0 {
		if rc := c.ReattachConfig(); rc != nil {
			pid = rc.Pid
		}
	}
	in.log.Warn("plugin did not stop in time; sending SIGKILL", "pid", pid, "timeout", timeout.String())
	if pid > 0 {
		if p, err := os.FindProcess(pid); err == nil {
			_ = p.Kill()
			_ = p.Release()
		}
	}
	t.Reset(timeout)
	select {
	case <-done:
		return nil
	case <-t.C:
		return fmt.Errorf("plugin %q: process %d did not stop within %s", in.cfg.Name, pid, 2*timeout)
	}
}

func (in *instance) status() PluginStatus {
	s := PluginStatus{
		Name:     in.cfg.Name,
		Path:     in.cfg.Path,
		Restarts: in.restarts.Load(),
		Pinned:   in.checksum != nil,
	}
	if in.ready.Load() {
		s.Version, s.Kinds, s.InFlight, s.MaxInFlight = in.version, in.kindNames(), len(in.sem), cap(in.sem)
	}
	if p := in.live.Load(); p != nil {
		s.Running, s.PID = true, p.pid
	}
	in.mu.Lock()
	if in.lastErr != nil {
		s.LastError = in.secrets.Text(in.lastErr.Error()) // a plugin's error may echo its configuration
	}
	in.mu.Unlock()
	return s
}

// logLevel names the lowest level l accepts, for the plugin's logger.
func logLevel(l *slog.Logger) string {
	ctx := context.Background()
	switch {
	case l.Enabled(ctx, slogLevelTrace):
		return "trace"
	case l.Enabled(ctx, slog.LevelDebug):
		return "debug"
	case l.Enabled(ctx, slog.LevelInfo):
		return "info"
	case l.Enabled(ctx, slog.LevelWarn):
		return "warn"
	}
	return "error"
}
