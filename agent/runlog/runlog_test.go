package runlog_test

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/probed/probed/agent/runlog"
	"github.com/probed/probed/internal/testlog"
	"github.com/probed/probed/manager"
	"github.com/probed/probed/runtime"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreCurrent()) }

var start = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// runner feeds a Log with the runs of one probe, every period from start.
type runner struct {
	log    *runlog.Log
	at     time.Time
	period time.Duration
}

func (r *runner) run(result runtime.Result, err error, msg string) {
	r.log.ProbeRan(manager.RunRecord{PodUID: "uid-1", Namespace: "ns", PodName: "web", ContainerName: "app",
		ProbeType: runtime.Readiness, Kind: "http", Start: r.at, Duration: time.Millisecond, Result: result, Err: err, Message: msg})
	r.at = r.at.Add(r.period)
}

func newRunner(level slog.Level) (*runner, *testlog.Buffer) {
	buf := &testlog.Buffer{}
	l := runlog.New(runlog.Options{Logger: slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: level}))})
	return &runner{log: l, at: start, period: 100 * time.Millisecond}, buf
}

func count(lines []string, substr string) int {
	n := 0
	for _, l := range lines {
		if strings.Contains(l, substr) {
			n++
		}
	}
	return n
}

// A probe failing every 100 ms for 3 minutes writes one
// "probe failed" line, then one summary per minute with the runs since
// (at 1 and 2 minutes), not 1,800 lines; its recovery at 3 minutes is one
// INFO line with the failed runs since the last summary and how long the
// failure lasted.
func TestFailingProbeLogsTransitionsAndSummaries(t *testing.T) {
	r, buf := newRunner(slog.LevelInfo)
	for range 10 {
		r.run(runtime.Success, nil, "")
	}
	if lines := buf.Lines(); len(lines) != 0 {
		t.Fatalf("successful runs logged: %q", lines)
	}
	msg := `Get "http://127.0.0.1:1/healthz": dial tcp 127.0.0.1:1: connect: connection refused`
	for range 1800 { // 3 min
		r.run(runtime.Failure, nil, msg)
	}
	r.run(runtime.Success, nil, "")
	lines := buf.Lines()
	if len(lines) != 4 {
		t.Fatalf("%d lines, want 4 (failed, 2 summaries, succeeded again):\n%s", len(lines), strings.Join(lines, "\n"))
	}
	if !strings.Contains(lines[0], "level=WARN") || !strings.Contains(lines[0], `msg="probe failed"`) || !strings.Contains(lines[0], "connection refused") ||
		!strings.Contains(lines[0], "pod=ns/web") || !strings.Contains(lines[0], "probe=readiness") {
		t.Errorf("first line %q", lines[0])
	}
	for _, l := range lines[1:3] {
		if !strings.Contains(l, `msg="probe still failing"`) || !strings.Contains(l, "failedRuns=600") || !strings.Contains(l, "sinceLastLine=1m0s") {
			t.Errorf("summary %q, want 600 failed runs in the last minute", l)
		}
	}
	if l := lines[3]; !strings.Contains(l, "level=INFO") || !strings.Contains(l, `msg="probe succeeded again"`) || !strings.Contains(l, "after=3m0s") ||
		!strings.Contains(l, "failedRuns=599") {
		t.Errorf("last line %q", l)
	}
}

// A probe whose outcome changes every run writes at most Burst (3) lines
// per minute; what it folded is told in the next line it may write.
func TestFlappingProbeIsRateLimited(t *testing.T) {
	r, buf := newRunner(slog.LevelInfo)
	for i := range 1200 { // 2 min
		if i%2 == 0 {
			r.run(runtime.Failure, nil, "HTTP probe failed with statuscode: 500")
		} else {
			r.run(runtime.Success, nil, "")
		}
	}
	lines := buf.Lines()
	if len(lines) > 2*runlog.DefaultBurst+1 {
		t.Fatalf("%d lines in 2 minutes of flapping, want at most %d:\n%s", len(lines), 2*runlog.DefaultBurst+1, strings.Join(lines, "\n"))
	}
	if count(lines, "changes=") == 0 {
		t.Errorf("no line tells of the folded changes:\n%s", strings.Join(lines, "\n"))
	}
}

// Errored runs are their own outcome; at debug level every run is logged.
func TestErroredRunsAndDebug(t *testing.T) {
	r, buf := newRunner(slog.LevelDebug)
	r.run(runtime.Unknown, errors.New("probe not attempted: EMFILE"), "probe not attempted: EMFILE")
	r.run(runtime.Success, nil, "")
	lines := buf.Lines()
	if count(lines, `msg="probe ran"`) != 2 || count(lines, `msg="probe errored"`) != 1 || count(lines, `msg="probe succeeded again"`) != 1 {
		t.Errorf("lines:\n%s", strings.Join(lines, "\n"))
	}
}

// Forget drops a pod's probes: its next run starts afresh.
func TestForget(t *testing.T) {
	r, buf := newRunner(slog.LevelInfo)
	r.run(runtime.Failure, nil, "down")
	r.log.Forget("uid-1")
	r.run(runtime.Failure, nil, "down")
	if n := count(buf.Lines(), `msg="probe failed"`); n != 2 {
		t.Errorf("%d probe failed lines, want 2 (the pod was forgotten between)", n)
	}
}
