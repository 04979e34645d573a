package statuspage

import (
	"fmt"

	"github.com/probed/probed/agent/history"
)

// Sparkline geometry, in SVG user units (CSS pixels at scale 1).
const (
	sparkBarWidth = 6
	sparkGap      = 2
	sparkHeight   = 24
	sparkMinBar   = 3 // a bar stays visible however fast its run was
)

// sparkline draws the last results of a probe: one bar per run, oldest on
// the left, its colour the result (class r-success, r-warning, r-failure,
// r-unknown, r-errored), its height the run's duration relative to the
// slowest run shown. Each bar's title tells the time, result and duration.
type sparkline struct {
	Width, Height int
	Bars          []sparkBar
	Label         string // the SVG's accessible name
}

type sparkBar struct {
	X, Y, W, H int
	Class      string
	Title      string
}

// resultClasses maps the history's results to CSS classes: only these
// words ever reach the class attribute.
var resultClasses = map[string]string{
	"success": "r-success", "warning": "r-warning", "failure": "r-failure", "unknown": "r-unknown", "errored": "r-errored",
}

func newSparkline(recs []history.Record) sparkline {
	s := sparkline{Height: sparkHeight, Width: len(recs)*(sparkBarWidth+sparkGap) - sparkGap}
	if len(recs) == 0 {
		return s
	}
	slowest := 0.0
	failures := 0
	for _, r := range recs {
		slowest = max(slowest, r.DurationMS)
		if !succeeded(r.Result) {
			failures++
		}
	}
	for i, r := range recs {
		h := sparkHeight
		if slowest > 0 {
			h = max(sparkMinBar, int(r.DurationMS/slowest*sparkHeight+0.5))
		}
		class, ok := resultClasses[r.Result]
		if !ok {
			class = "r-unknown"
		}
		s.Bars = append(s.Bars, sparkBar{
			X: i * (sparkBarWidth + sparkGap), Y: sparkHeight - h, W: sparkBarWidth, H: h, Class: class,
			Title: fmt.Sprintf("%s %s %s", stamp(r.Time), r.Result, formatMS(r.DurationMS)),
		})
	}
	s.Label = fmt.Sprintf("last %d results: %d not successful; slowest %s", len(recs), failures, formatMS(slowest))
	return s
}
