package logbudget_test

import (
	"bytes"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/probed/probed/agent/logbudget"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreCurrent()) }

// Whatever is logged, the bytes written stay within the
// budget (burst plus rate × time); what is dropped is counted in the
// metrics, and one line in the log's own format says so every ReportEvery
// while dropping, and at Flush.
func TestBudgetBoundsTheBytesWritten(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	var out bytes.Buffer
	textHandler := func(w io.Writer) slog.Handler { return slog.NewTextHandler(w, nil) }
	w := logbudget.New(&out, logbudget.Options{BytesPerSecond: 1000, Burst: 2000, Clock: clk,
		Report: func(w io.Writer, lines, bytes int64, since time.Duration) {
			slog.New(textHandler(w)).Warn("log lines dropped", "lines", lines, "bytes", bytes, "in", since.String())
		}})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(w)
	log := slog.New(textHandler(w))
	line := strings.Repeat("x", 100)
	written := 0
	for s := range 30 { // 30 s, 100 lines of ~150 bytes a second
		for range 100 {
			log.Warn(line)
		}
		written = out.Len()
		if budget := 2000 + 1000*s + 300*(s/10+1); written > budget { // the budget plus the report lines
			t.Fatalf("after %d s: %d bytes written, more than the budget %d", s, written, budget)
		}
		clk.Step(time.Second)
	}
	w.Flush()
	text := out.String()
	if n := strings.Count(text, `msg="log lines dropped"`); n != 3 {
		t.Errorf("%d dropped lines reported, want 3 (every 10 s, the last at Flush):\n%s", n, text[max(0, len(text)-2000):])
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]float64{}
	for _, f := range families {
		values[f.GetName()] = f.GetMetric()[0].GetCounter().GetValue()
	}
	// 3,000 lines of ~150 bytes offered; about 2,000 + 29 × 1,000 bytes fit.
	if l, b := values["probed_log_lines_dropped_total"], values["probed_log_bytes_dropped_total"]; l < 2700 || b < l*100 {
		t.Errorf("dropped: %v lines, %v bytes", l, b)
	}
}
