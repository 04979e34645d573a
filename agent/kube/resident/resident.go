// Package resident runs cluster mode's exec probes through a resident
// helper per container (--exec-mode resident; docs/cluster.md
// "The resident exec helper"): one more exec.Runner beside the container
// runtime's ExecSync runner (agent/kube/cri), which it falls back to.
//
// Why: an ExecSync is a `runc exec` — about 90–110 ms of CPU here, runc
// applying the container's user, capabilities, seccomp and AppArmor
// profiles, cgroup and namespaces anew for every run. A process already
// inside the container, with all of that applied once, starts a command
// for the cost of a fork and an exec.
//
// The helper is a POSIX sh script (helper.sh) started once per container,
// on the container's first exec run, through the CRI's streaming Exec (so
// runc applies the container's security context exactly as for ExecSync)
// and driven over that exec's stdin, stdout and stderr. Each command runs
// with ExecSync's verdicts (exec.Runner's contract, spec E2/E3):
//
//   - as a fresh process of a fresh subshell: the exec's environment (what
//     the shell changed in its own is undone: PWD, SHLVL) and working
//     directory, stdin /dev/null, stdout and stderr on pipes of its own;
//     nothing of an earlier run (a cd, a variable) is seen;
//   - found as runc finds it (the exec's PATH; not found or not
//     executable is an errored run, as ExecSync's is);
//   - its output is stdout then stderr, the first 10 KiB kept, the rest
//     read and dropped; the run ends when the command has exited and
//     nothing holds its output any more (ExecSync waits the same way);
//   - its exit status is the verdict (0 Success, else Failure; killed by a
//     signal: 128+signal, as runc reports it);
//   - at its timeout everything it started is SIGKILLed — its process
//     tree, and whatever still holds its output (a child that left with
//     setsid) — and the run is a Failure with the kubelet's text
//     (cri.TimeoutError). ExecSync on containerd 1.6 leaves such a child
//     running and answers only when it closes its output (or the call's
//     bound, 2 minutes later); the verdict is the same.
//
// One command at a time per helper: a run of the container that finds its
// helper busy (two exec probes due together, one hung until its timeout),
// or not ready yet (its first run, a restart in backoff), goes through
// ExecSync at once; a run never waits for a helper. A container that
// cannot host one (no sh or cat in its PATH, /proc/self/environ
// unreadable) runs every exec probe through ExecSync, and says so once: a
// Normal Event ExecHelperUnavailable on the pod, and the reason label of
// probed_exec_runs_total. A read-only or distroless root filesystem does
// not matter: the helper writes no file.
//
// Lifecycle: the helper dies with its container (its exec does); a new
// container ID starts a new helper on its first exec run. A helper whose
// session ends, that breaks the protocol, or that does not answer a kill
// within KillGrace is replaced: the run that found out is errored (never
// a Failure), a helper that stopped answering is killed through ExecSync
// (its shell, its processes, its run's), and the next helper of that
// container starts after a backoff. Close (the agent stopping) closes
// every helper's stdin: it kills what runs and exits; if probed is killed
// (-9), its connection to the runtime's streaming server closes, and the
// runtime closes the helper's stdin the same way. The helper is never the
// container's PID 1.
//
// Trust: a process of the container can read the helper's requests and
// write into its output (same user). It can make its own pod's probes lie —
// which its probe command decides anyway — and nothing else: what the
// helper writes is parsed within bounds, and anything out of turn replaces
// the helper.
package resident

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/lru"

	"github.com/probed/probed/agent/kube/cri"
	probeexec "github.com/probed/probed/plugins/exec"
	"github.com/probed/probed/runtime"
)

// Exec modes: --exec-mode's values and probed_exec_runs_total's mode label.
const (
	ModeResident = "resident"
	ModeExecSync = cri.ModeExecSync
)

// Reasons a run of resident mode goes through ExecSync
// (probed_exec_runs_total's reason label).
const (
	// ReasonUnsupported: the container cannot host a helper (for good).
	ReasonUnsupported = "unsupported"
	// ReasonStarting: its helper is starting (the container's first exec
	// run starts it) or waits out a backoff after a failure.
	ReasonStarting = "starting"
	// ReasonBusy: its helper runs another probe's command.
	ReasonBusy = "busy"
)

// ReasonHelperUnavailable is the reason of the Event saying that a
// container's exec probes run through ExecSync.
const ReasonHelperUnavailable = "ExecHelperUnavailable"

// Defaults of Options.
const (
	DefaultStartTimeout = 30 * time.Second
	DefaultKillGrace    = 5 * time.Second
	DefaultBackoffBase  = time.Second
	DefaultBackoffMax   = 5 * time.Minute
	DefaultRemember     = 4096
)

// Options configure a Runner. Zero values take the defaults above.
type Options struct {
	// Runtime starts helpers and runs ExecSync (*cri.Client). Required.
	Runtime Runtime
	// ExecSync runs what does not go through a helper (the client's
	// cri.Runner, with its verdicts). Required.
	ExecSync probeexec.Runner
	// Recorder receives the ExecHelperUnavailable Event; nil: none.
	Recorder runtime.Recorder
	// Pod finds the pod and container name of a container ID
	// ("containerd://<id>"), for the Event; nil: no Event.
	Pod func(statusID string) (*v1.Pod, string, bool)
	// Registerer receives the probed_exec_* metrics; nil: not registered.
	Registerer prometheus.Registerer
	// Logger receives helper starts, failures and replacements; default
	// slog.Default().
	Logger *slog.Logger
	// StartTimeout bounds a helper's start: the streaming exec and the
	// handshake.
	StartTimeout time.Duration
	// KillGrace is how long a killed run (its timeout passed) may take to
	// report its end before the helper counts as stopped answering.
	KillGrace time.Duration
	// BackoffBase and BackoffMax: after a helper of a container failed to
	// start or was lost, the next waits BackoffBase, doubling up to
	// BackoffMax while they keep failing (its runs use ExecSync meanwhile).
	BackoffBase, BackoffMax time.Duration
	// Remember is how many containers that cannot host a helper are
	// remembered (least recently used out).
	Remember int
}

// Runner is the exec.Runner of --exec-mode resident. Its methods are safe
// for concurrent use.
type Runner struct {
	opts    Options
	ctx     context.Context // helpers' sessions; cancelled by Close
	cancel  context.CancelFunc
	wg      sync.WaitGroup // helpers' goroutines
	metrics *metrics

	mu          sync.Mutex
	closed      bool
	helpers     map[string]*entry // by CRI container ID: starting or running
	unsupported *lru.Cache        // CRI container ID -> why
	backoff     *flowcontrol.Backoff
}

// entry is a container's helper as the runner sees it.
type entry struct {
	h     *helper
	ready bool // its handshake is done
	busy  bool // a run holds it (or it is lost and on its way out)
}

var _ probeexec.ModeRunner = (*Runner)(nil)

// New returns a Runner; helpers start on their containers' first runs.
// Errors: no Runtime or ExecSync, a metric that cannot be registered.
func New(opts Options) (*Runner, error) {
	if opts.Runtime == nil || opts.ExecSync == nil {
		return nil, errors.New("resident: Runtime and ExecSync are required")
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = DefaultStartTimeout
	}
	if opts.KillGrace <= 0 {
		opts.KillGrace = DefaultKillGrace
	}
	if opts.BackoffBase <= 0 {
		opts.BackoffBase = DefaultBackoffBase
	}
	if opts.BackoffMax <= 0 {
		opts.BackoffMax = DefaultBackoffMax
	}
	if opts.Remember <= 0 {
		opts.Remember = DefaultRemember
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	r := &Runner{opts: opts, metrics: m, helpers: map[string]*entry{}, unsupported: lru.New(opts.Remember),
		backoff: flowcontrol.NewBackOff(opts.BackoffBase, opts.BackoffMax)}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	return r, nil
}

// RunInContainer implements exec.Runner (see the package doc for the
// verdicts). A container ID of another runtime, or a container the
// runtime does not confirm as the pod's (Runtime.Resolve), is errored as
// ExecSync's runner errs it: nothing runs.
func (r *Runner) RunInContainer(ctx context.Context, statusID string, cmd []string, timeout time.Duration) ([]byte, error) {
	want, _ := probeexec.ContainerOf(ctx)
	ctr, err := r.opts.Runtime.Resolve(ctx, statusID, want)
	if err != nil {
		return nil, err
	}
	e, reason := r.acquire(ctr)
	if e == nil {
		r.metrics.runs.WithLabelValues(ModeExecSync, reason).Inc()
		return r.opts.ExecSync.RunInContainer(ctx, statusID, cmd, timeout)
	}
	r.metrics.runs.WithLabelValues(ModeResident, "").Inc()
	out, err, l := e.h.run(ctx, statusID, cmd, timeout, r.opts.KillGrace)
	r.release(e, l)
	return out, err
}

// acquire returns the container's helper, ready and now held, or why its
// run goes through ExecSync (starting the helper when there is none).
func (r *Runner) acquire(ctr cri.Container) (*entry, string) {
	id := ctr.ID
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, no := r.unsupported.Get(id); no {
		return nil, ReasonUnsupported
	}
	e := r.helpers[id]
	switch {
	case e == nil:
		if !r.closed && !r.backoff.IsInBackOffSinceUpdate(id, r.backoff.Clock.Now()) {
			r.startLocked(ctr)
		}
		return nil, ReasonStarting
	case !e.ready:
		return nil, ReasonStarting
	case e.busy:
		return nil, ReasonBusy
	}
	e.busy = true
	return e, ""
}

// release gives a helper back after a run, or replaces a lost one.
func (r *Runner) release(e *entry, l *lost) {
	if l == nil {
		r.mu.Lock()
		e.busy = false
		r.backoff.Reset(e.h.id) // it works: a later loss starts the backoff over
		r.mu.Unlock()
		return
	}
	r.metrics.lost.WithLabelValues(l.reason).Inc()
	r.opts.Logger.Warn("exec helper replaced", "container", e.h.id, "reason", l.reason, "detail", l.detail)
	r.mu.Lock()
	r.backoff.Next(e.h.id, r.backoff.Clock.Now())
	r.mu.Unlock()
	r.destroy(e.h, l.reason != LostEnded)
}

// startLocked starts a helper for container ctr (r.mu held).
func (r *Runner) startLocked(ctr cri.Container) {
	r.backoff.GC()
	h := newHelper(ctr)
	var sctx context.Context
	sctx, h.cancel = context.WithCancel(r.ctx)
	e := &entry{h: h}
	r.helpers[ctr.ID] = e
	r.wg.Add(1)
	go r.serve(sctx, e)
}

// serve runs one helper's session: its start, then until it ends.
func (r *Runner) serve(ctx context.Context, e *entry) {
	defer r.wg.Done()
	h := e.h
	var session sync.WaitGroup
	session.Go(func() { h.finish(r.opts.Runtime.Stream(ctx, h.ctr, Command, h.in, h.out, h.errs)) })
	err := h.handshake(r.opts.StartTimeout)
	var unsup *errUnsupported
	switch {
	case err == nil:
		r.metrics.starts.WithLabelValues("ready").Inc()
		r.metrics.helpers.Inc()
		r.mu.Lock()
		e.ready = true
		r.mu.Unlock()
	case errors.As(err, &unsup):
		r.metrics.starts.WithLabelValues(ReasonUnsupported).Inc()
		r.mu.Lock()
		r.unsupported.Add(h.id, unsup.why)
		r.mu.Unlock()
		r.opts.Logger.Info("exec helper unavailable: exec probes of the container run through ExecSync", "container", h.id, "reason", unsup.why)
		r.event(h.statusID, unsup.why)
		// Its session ends now, whether or not the helper exits: one
		// that said "unsupported" and held its stream would keep the
		// session's goroutines and connection for the container's life.
		r.destroy(h, false)
	default:
		r.metrics.starts.WithLabelValues("failed").Inc()
		r.mu.Lock()
		closed := r.closed
		r.backoff.Next(h.id, r.backoff.Clock.Now())
		r.mu.Unlock()
		if !closed {
			r.opts.Logger.Warn("exec helper did not start", "container", h.id, "err", err)
		}
		r.destroy(h, len(h.procs) > 0)
	}
	if err == nil {
		// Until it ends; one that writes out of turn between runs is
		// replaced at once (a run that finds it broken is errored).
		select {
		case <-h.done:
		case <-h.out.broke:
			r.breakBetweenRuns(e)
		case <-h.errs.broke:
			r.breakBetweenRuns(e)
		}
	}
	session.Wait()
	r.mu.Lock()
	if r.helpers[h.id] == e {
		delete(r.helpers, h.id)
	}
	lostNow := e.ready && !e.busy && !r.closed
	r.mu.Unlock()
	if e.ready {
		r.metrics.helpers.Dec()
	}
	if lostNow {
		// Ended between runs: killed from outside, its container stopped.
		r.metrics.lost.WithLabelValues(LostEnded).Inc()
		r.opts.Logger.Info("exec helper ended", "container", h.id, "err", h.end)
		r.mu.Lock()
		r.backoff.Next(h.id, r.backoff.Clock.Now())
		r.mu.Unlock()
	}
}

// breakBetweenRuns replaces a helper that broke the protocol, unless a
// run holds it (that run finds out and replaces it).
func (r *Runner) breakBetweenRuns(e *entry) {
	r.mu.Lock()
	held := e.busy
	e.busy = true
	r.mu.Unlock()
	if !held {
		r.release(e, &lost{reason: LostProtocol, detail: e.h.broken().Error()})
	}
}

// destroy ends a helper's session; kill also ends its processes in the
// container through ExecSync (a helper that stopped answering would not
// read the end of its stdin).
func (r *Runner) destroy(h *helper, kill bool) {
	h.in.close()
	h.cancel()
	if !kill || len(h.procs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), killTimeout)
	defer cancel()
	if _, stderr, err := r.opts.Runtime.ExecSync(ctx, h.ctr, h.killCommand(), killTimeout); err != nil {
		r.opts.Logger.Warn("exec helper: kill through ExecSync failed", "container", h.id, "err", err, "stderr", cut(stderr))
	}
}

// killTimeout bounds the ExecSync that kills a helper.
const killTimeout = 10 * time.Second

// event says once, on the pod, that a container's exec probes run through
// ExecSync.
func (r *Runner) event(statusID, why string) {
	if r.opts.Recorder == nil || r.opts.Pod == nil {
		return
	}
	if pod, container, ok := r.opts.Pod(statusID); ok {
		r.opts.Recorder.Eventf(pod, v1.EventTypeNormal, ReasonHelperUnavailable,
			"Exec probes of container %s run through the container runtime's ExecSync, not a resident helper: %s", container, why)
	}
}

// Mode is how the exec probes of a container (its status ID,
// "containerd://<id>") run now, for `probed status -o wide` and the status
// page: "resident"; "resident (starting)" before its helper is ready;
// "execsync (<why>)" for a container that cannot host one.
func (r *Runner) Mode(statusID string) string {
	id, err := r.opts.Runtime.ContainerID(statusID)
	if err != nil {
		return ModeExecSync
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if why, no := r.unsupported.Get(id); no {
		return ModeExecSync + " (" + why.(string) + ")"
	}
	if e := r.helpers[id]; e != nil && e.ready {
		return ModeResident
	}
	return ModeResident + " (starting)"
}

// Close ends every helper: its session's connection closes, the runtime
// closes the helper's stdin, and the helper kills what runs and exits. It
// returns when the runner's goroutines have ended (client-go's WebSocket
// heartbeat of a session ends at its next beat, within 5 s), or when ctx
// is done. Runs after Close go through ExecSync.
func (r *Runner) Close(ctx context.Context) error {
	r.mu.Lock()
	r.closed = true
	for _, e := range r.helpers {
		e.h.in.close()
	}
	r.mu.Unlock()
	r.cancel()
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
