// Package logbudget bounds the bytes of log the agent writes per second,
// whatever its pods and targets do (one pod wrote 74 MiB of
// agent log in 30 s). Writer sits between the agent's slog handler and its
// output: each record arrives as one Write (log/slog's text and JSON
// handlers write a record at once), and a line passes while a token bucket
// of bytes (BytesPerSecond, Burst) holds its length; beyond that it is
// dropped whole and counted (probed_log_lines_dropped_total,
// probed_log_bytes_dropped_total). Every ReportEvery while lines are being
// dropped, and at Flush, one line says how many: "log lines dropped: the
// log budget is spent", written outside the budget.
//
// This is the backstop behind the agent's own restraint (probe runs are
// logged on transitions and in summaries, package runlog; every logged
// string is cut, runtime/bound): it holds whatever the lines are.
package logbudget

import (
	"bytes"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"
)

// Defaults of Options.
const (
	DefaultBytesPerSecond = 64 << 10
	DefaultReportEvery    = 10 * time.Second
)

// Options configure a Writer.
type Options struct {
	// BytesPerSecond is the sustained budget; 0: DefaultBytesPerSecond.
	BytesPerSecond int
	// Burst is the bucket's size in bytes; 0: four seconds of the budget.
	// A line longer than Burst is always dropped.
	Burst int
	// ReportEvery is the shortest time between two "dropped" lines;
	// 0: DefaultReportEvery.
	ReportEvery time.Duration
	// Report writes the "dropped" line to w in the log's own format (the
	// caller's slog handler over w); nil: a plain text line.
	Report func(w io.Writer, lines, bytes int64, since time.Duration)
	// Clock; nil: the real clock.
	Clock clock.PassiveClock
}

// Writer is a budgeted io.Writer of log lines. It is safe for concurrent use.
type Writer struct {
	out  io.Writer
	opts Options
	rate float64 // bytes per second

	mu           sync.Mutex
	tokens       float64
	last         time.Time // of the last refill
	lines, bytes int64     // dropped since the last report
	firstDrop    time.Time // of the lines counted

	droppedLines, droppedBytes prometheus.Counter
}

// New returns a Writer writing to out within opts' budget.
func New(out io.Writer, opts Options) *Writer {
	if opts.BytesPerSecond <= 0 {
		opts.BytesPerSecond = DefaultBytesPerSecond
	}
	if opts.Burst <= 0 {
		opts.Burst = 4 * opts.BytesPerSecond
	}
	if opts.ReportEvery <= 0 {
		opts.ReportEvery = DefaultReportEvery
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Report == nil {
		opts.Report = func(w io.Writer, lines, bytes int64, since time.Duration) {
			fmt.Fprintf(w, "log lines dropped: the log budget is spent: %d lines (%d bytes) in %s\n", lines, bytes, since)
		}
	}
	return &Writer{out: out, opts: opts, rate: float64(opts.BytesPerSecond), tokens: float64(opts.Burst), last: opts.Clock.Now(),
		droppedLines: prometheus.NewCounter(prometheus.CounterOpts{Name: "probed_log_lines_dropped_total",
			Help: "Log lines the agent dropped because its log budget (--log-budget bytes per second) was spent."}),
		droppedBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "probed_log_bytes_dropped_total",
			Help: "Bytes of the log lines the agent dropped because its log budget was spent."}),
	}
}

// Write writes p, one log line, when the budget holds it, else drops it
// and counts it; either way it reports success, so the logger goes on.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.opts.Clock.Now()
	w.tokens = min(float64(w.opts.Burst), w.tokens+now.Sub(w.last).Seconds()*w.rate)
	w.last = now
	if w.lines > 0 && now.Sub(w.firstDrop) >= w.opts.ReportEvery {
		w.reportLocked(now)
	}
	if float64(len(p)) > w.tokens {
		if w.lines == 0 {
			w.firstDrop = now
		}
		w.lines++
		w.bytes += int64(len(p))
		w.droppedLines.Inc()
		w.droppedBytes.Add(float64(len(p)))
		return len(p), nil
	}
	w.tokens -= float64(len(p))
	if _, err := w.out.Write(p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// reportLocked writes the "dropped" line outside the budget and starts a
// new count.
func (w *Writer) reportLocked(now time.Time) {
	var b bytes.Buffer
	w.opts.Report(&b, w.lines, w.bytes, now.Sub(w.firstDrop).Round(time.Millisecond))
	_, _ = w.out.Write(b.Bytes())
	w.lines, w.bytes = 0, 0
}

// Flush writes the "dropped" line of lines dropped since the last one, if
// any (at exit).
func (w *Writer) Flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.lines > 0 {
		w.reportLocked(w.opts.Clock.Now())
	}
}

// BytesPerSecond is the budget.
func (w *Writer) BytesPerSecond() int { return w.opts.BytesPerSecond }

// Describe implements prometheus.Collector.
func (w *Writer) Describe(ch chan<- *prometheus.Desc) {
	w.droppedLines.Describe(ch)
	w.droppedBytes.Describe(ch)
}

// Collect implements prometheus.Collector.
func (w *Writer) Collect(ch chan<- prometheus.Metric) {
	w.droppedLines.Collect(ch)
	w.droppedBytes.Collect(ch)
}
