// Package runlog logs the agent's probe runs at the default level without a
// line per run (the agent logged every failed run, 345,000
// lines in 4 minutes from one pod). For each probe it logs:
//
//   - a transition: the run's outcome (success, warning, failure, errored)
//     differs from the previous run's: "probe failed" (WARN) with the
//     message, "probe succeeded again" (INFO) after failures, ...;
//   - a summary, at most once per Interval while a probe keeps failing or
//     erroring, or when runs went unlogged: "probe still failing" with the
//     runs since the last line (failed, errored, changes of outcome) and the
//     last message.
//
// A probe writes at most Burst lines per Interval (default 3 per minute): a
// probe that flaps every run has its transitions folded into the next
// summary. Every run is logged at debug level. What the lines quote is the
// run's message, redacted and cut by the runtime (runtime/redact,
// runtime/bound); the agent's log budget (package logbudget) bounds the
// bytes of all lines together.
//
// Log implements manager.Observer; times are the runs' own (RunRecord.Start
// plus Duration, on the manager's clock), so nothing here sleeps or ticks.
package runlog

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/probed/probed/manager"
	"github.com/probed/probed/runtime"
)

// Defaults of Options.
const (
	DefaultInterval = time.Minute
	DefaultBurst    = 3
)

// Options configure a Log.
type Options struct {
	// Logger receives the lines (default slog.Default()).
	Logger *slog.Logger
	// Interval is the summary period and the window of Burst (default
	// DefaultInterval).
	Interval time.Duration
	// Burst is the most lines one probe writes per Interval (default
	// DefaultBurst).
	Burst int
}

// Log logs probe runs on transitions and in summaries. Create it with New.
type Log struct {
	opts Options

	mu   sync.Mutex
	pods map[types.UID]map[key]*probe
}

type key struct {
	container string
	typ       runtime.ProbeType
}

// Outcomes of a run.
const (
	success = "success"
	warning = "warning"
	failure = "failure"
	errored = "errored"
)

// probe is what Log keeps of one probe: a few words, forgotten with its pod.
type probe struct {
	outcome string    // of the last run
	since   time.Time // when the last run's outcome began
	message string    // the last non-empty message

	lastLine    time.Time // when a line was last written (zero: never)
	window      time.Time // start of the current Interval of Burst lines
	linesInWin  int
	failed      int // runs since the last line, by outcome
	erroredRuns int
	changes     int // changes of outcome since the last line
}

// New returns a Log.
func New(opts Options) *Log {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Burst <= 0 {
		opts.Burst = DefaultBurst
	}
	return &Log{opts: opts, pods: map[types.UID]map[key]*probe{}}
}

func outcomeOf(r *manager.RunRecord) string {
	switch {
	case r.Err != nil:
		return errored
	case r.Result == runtime.Success:
		return success
	case r.Result == runtime.Warning:
		return warning
	}
	return failure // Failure, Unknown (P5)
}

// ProbeRan implements manager.Observer.
func (l *Log) ProbeRan(r manager.RunRecord) {
	now := r.Start.Add(r.Duration)
	outcome := outcomeOf(&r)
	log := l.opts.Logger
	if log.Enabled(context.Background(), slog.LevelDebug) {
		log.Debug("probe ran", "pod", r.Namespace+"/"+r.PodName, "container", r.ContainerName, "probe", r.ProbeType.Lower(),
			"result", outcome, "message", r.Message, "duration", r.Duration.String())
	}
	k := key{r.ContainerName, r.ProbeType}
	l.mu.Lock()
	probes, ok := l.pods[r.PodUID]
	if !ok {
		probes = map[key]*probe{}
		l.pods[r.PodUID] = probes
	}
	p, seen := probes[k]
	if !seen {
		p = &probe{outcome: success, since: now, window: now}
		probes[k] = p
	}
	changed := outcome != p.outcome
	var lasted time.Duration // of the previous outcome
	if changed {
		lasted = now.Sub(p.since)
		p.changes++
		p.outcome, p.since = outcome, now
	}
	if r.Message != "" {
		p.message = r.Message
	}
	switch outcome {
	case failure:
		p.failed++
	case errored:
		p.erroredRuns++
	}
	unreported := p.failed+p.erroredRuns > 0 || p.changes > 0
	summaryDue := !changed && unreported && (p.outcome != success || p.changes > 0) && now.Sub(p.lastLine) >= l.opts.Interval
	if !changed && !summaryDue {
		l.mu.Unlock()
		return
	}
	if now.Sub(p.window) >= l.opts.Interval {
		p.window, p.linesInWin = now, 0
	}
	if p.linesInWin >= l.opts.Burst {
		l.mu.Unlock() // folded into the next summary
		return
	}
	p.linesInWin++
	line := l.line(p, changed, lasted, now)
	p.lastLine = now
	p.failed, p.erroredRuns, p.changes = 0, 0, 0
	l.mu.Unlock()

	level, msg := slog.LevelWarn, ""
	switch {
	case changed && outcome == success:
		level, msg = slog.LevelInfo, "probe succeeded again"
	case changed && outcome == warning:
		msg = "probe warning"
	case changed && outcome == failure:
		msg = "probe failed"
	case changed:
		msg = "probe errored"
	case outcome == success:
		level, msg = slog.LevelInfo, "probe succeeding; runs since the last line"
	case outcome == warning:
		msg = "probe still warning"
	case outcome == failure:
		msg = "probe still failing"
	default:
		msg = "probe still erroring"
	}
	attrs := append([]any{"pod", r.Namespace + "/" + r.PodName, "container", r.ContainerName, "probe", r.ProbeType.Lower(), "kind", r.Kind,
		"result", outcome}, line...)
	log.Log(context.Background(), level, msg, attrs...)
}

// line is the attributes of a line about p: the message of a run that did
// not succeed, how long the previous outcome lasted (a change) or the
// current one has lasted (a summary), and what happened since the last line
// when some runs went unlogged. Called with l.mu held.
func (l *Log) line(p *probe, changed bool, lasted time.Duration, now time.Time) []any {
	var out []any
	if p.outcome != success && p.message != "" {
		out = append(out, "message", p.message)
	}
	if changed && lasted > 0 {
		out = append(out, "after", lasted.Round(time.Millisecond).String())
	} else if !changed {
		out = append(out, "for", now.Sub(p.since).Round(time.Millisecond).String())
	}
	silent := p.changes
	if changed {
		silent-- // this line tells of the last change
	}
	if !p.lastLine.IsZero() && (p.failed > 1 || p.erroredRuns > 1 || silent > 0 || !changed) {
		out = append(out, "failedRuns", p.failed, "erroredRuns", p.erroredRuns, "changes", silent,
			"sinceLastLine", now.Sub(p.lastLine).Round(time.Millisecond).String())
	}
	return out
}

// Forget drops what the Log keeps of a pod's probes (its workers are gone).
func (l *Log) Forget(uid types.UID) {
	l.mu.Lock()
	delete(l.pods, uid)
	l.mu.Unlock()
}
