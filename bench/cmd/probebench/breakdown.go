package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/google/pprof/profile"
)

// A cost centre of the CPU breakdown: a sample belongs to the first centre
// one of whose patterns occurs in a frame's function name, frames read
// from the leaf to the root. Allocation frames (mallocgc and below) match
// nothing, so the cost of allocating lands on the code that allocates;
// GC assists and the background collector are their own centre. A sample
// no frame of which matches is the Go runtime's own (goroutine scheduling
// on the g0 stack, timers, sysmon) when its root is in package runtime.
type centre struct {
	name     string
	patterns []string
}

// centres are checked in this order for each frame.
var centres = []centre{
	{"GC (assists, background mark and sweep)", []string{"runtime.gcAssistAlloc", "runtime.gcBgMarkWorker", "runtime.bgsweep", "runtime.bgscavenge", "runtime.gcDrain", "runtime.markroot", "runtime.gcStart", "runtime.gcMarkDone", "runtime.gcMarkTermination"}},
	{"harness: recording probe starts (both implementations)", []string{"bench/internal/lateness.", "main.instantRunner", "main.probedRunner", "main.kubeletRunner"}},
	{"harness: pod status lookup (the kubelet status manager both read)", []string{"main.statusAdapter", "kubelet/status.(*manager).GetPodStatus"}},
	{centreDeadline, []string{"probed/runtime.newAttemptDeadline", "probed/runtime.newLazyDeadline", "probed/runtime.(*lazyDeadline)", "probed/runtime.attemptDeadline.end", "probed/runtime.WithTimeout", "context.WithTimeout", "context.WithDeadline", "context.(*timerCtx)", "context.(*cancelCtx).cancel", "context.removeChild"}},
	{centreNetwork, []string{"net/http.", "net.", "internal/poll.", "crypto/tls.", "bufio.", "probed/plugins/http.", "probed/plugins/tcp.", "probed/plugins/internal/dialer.", "main.newGetLoop", "main.newDialLoop", "main.readInto", "main.lingerZero", "main.(*floorLoop)"}},
	{"metrics (prober_probe_*, lag)", []string{"manager.(*proberMetrics)", "manager.(*runtimeMetrics)", "prometheus/client_golang", "component-base/metrics"}},
	{"results managers", []string{"probed/manager/results.", "kubelet/prober/results."}},
	{"tracing (off)", []string{"manager.(*manager).startSpan", "manager.(*manager).endSpan", "manager.(*probeSpan)", "go.opentelemetry.io/"}},
	{"handler (instant exec)", []string{"probed/plugins/exec.", "kubelet/prober.(*prober).newExecInContainer", "pkg/probe/exec."}},
	{"runtime.Run: retries, redaction, events", []string{"probed/runtime.(*Runtime).Run", "probed/runtime.cleanReport", "probed/runtime.(*Runtime).recordEvent", "probed/runtime.ClassifyAttempt", "probed/runtime.NextLane"}},
	{"worker state machine (doProbe, thresholds)", []string{"probed/manager.(*worker)", "probed/manager.findStatus", "kubelet/prober.(*worker).doProbe", "kubelet/prober.(*prober)", "kubelet/prober.(*manager)"}},
	{"pool hand-off (dispatch, ants)", []string{"panjf2000/ants", "probed/runtime.(*Runtime).Submit", "probed/runtime.New.func", "probed/manager.(*manager).dispatch"}},
	{"scheduler: feeders, Done, lane moves", []string{"scheduler.(*shard[", "scheduler.(*Scheduler[go.shape.*uint8]).Done", "scheduler.(*Scheduler[go.shape.*uint8]).SetLane"}},
	{"scheduler: wheel tick", []string{"scheduler.(*Scheduler[go.shape.*uint8]).runTicker", "scheduler.(*Scheduler[go.shape.*uint8]).runWheel", "scheduler.(*Scheduler[go.shape.*uint8]).armTimer", "scheduler.(*Scheduler[go.shape.*uint8]).publishWake"}},
	{"kubelet: per-worker goroutine and ticker loop", []string{"kubelet/prober.(*worker).run"}},
	{"profiler", []string{"runtime/pprof."}},
}

// wheel-tick functions of the shard: the shard's methods are shared by the
// feeder and the wheel goroutine, so they are told apart by what called
// them (runTicker is the wheel goroutine of profiles taken before it slept
// between due slots).
var tickFuncs = []string{").advance", ").sweep", ").fire", ").linkWheel", ").nextDue"}

const (
	centreDeadline  = "attempt deadline (runtime.WithTimeout per attempt)"
	centreNetwork   = "network I/O: the GET or dial itself (net/http, sockets, the handler's own code)"
	centreGoRuntime = "Go runtime (goroutine scheduling, timers, sysmon)"
	centreOther     = "other"
)

// breakdownRow is one cost centre of one profile.
type breakdownRow struct {
	Centre       string  `json:"centre"`
	Seconds      float64 `json:"profile_seconds"`
	Percent      float64 `json:"percent"`
	MicrosPerRun float64 `json:"us_per_probe"` // share × rusage CPU / probes executed
}

func classify(s *profile.Sample) string {
	// Frames leaf first; inlined functions come first within a location.
	var frames []string
	for _, loc := range s.Location {
		for _, line := range loc.Line {
			if line.Function != nil {
				frames = append(frames, line.Function.Name)
			}
		}
	}
	for i, fn := range frames {
		{
			if strings.Contains(fn, "probed/scheduler.(*shard[") {
				for _, t := range tickFuncs {
					if strings.Contains(fn, t) {
						return "scheduler: wheel tick"
					}
				}
			}
			for _, c := range centres {
				for _, p := range c.patterns {
					if strings.Contains(fn, p) {
						if c.name == centreDeadline && strings.HasPrefix(p, "context.") {
							// The context package's deadline code:
							// the attempt's (the lazy deadline arming
							// it) or net/http's own.
							return deadlineOwner(frames[i+1:])
						}
						return c.name
					}
				}
			}
		}
	}
	if n := len(s.Location); n > 0 && len(s.Location[n-1].Line) > 0 {
		if f := s.Location[n-1].Line[0].Function; f != nil && strings.HasPrefix(f.Name, "runtime.") {
			return centreGoRuntime
		}
	}
	return centreOther
}

// cpuBreakdown splits a CPU profile into the cost centres, scaled to the
// run's rusage CPU seconds and probes executed (0: no µs/probe).
func cpuBreakdown(r io.Reader, cpuSeconds float64, probes int64) ([]breakdownRow, float64, error) {
	p, err := profile.Parse(r)
	if err != nil {
		return nil, 0, err
	}
	vi := len(p.SampleType) - 1 // cpu nanoseconds
	for i, st := range p.SampleType {
		if st.Type == "cpu" {
			vi = i
		}
	}
	by := map[string]int64{}
	var total int64
	for _, s := range p.Sample {
		v := s.Value[vi]
		by[classify(s)] += v
		total += v
	}
	var rows []breakdownRow
	for name, v := range by {
		row := breakdownRow{Centre: name, Seconds: float64(v) / 1e9, Percent: 100 * float64(v) / float64(max(total, 1))}
		if probes > 0 {
			row.MicrosPerRun = row.Percent / 100 * cpuSeconds * 1e6 / float64(probes)
		}
		rows = append(rows, row)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Seconds > rows[j].Seconds })
	return rows, float64(total) / 1e9, nil
}

// breakdownMain prints the CPU breakdown of runs: each -profile with the
// JSON line of its run (-result, the file "probebench run" printed to).
//
//	probebench breakdown -profile cpu.out -result run.json [-profile ... -result ...]
func breakdownMain(args []string) error {
	fs := flag.NewFlagSet("breakdown", flag.ExitOnError)
	var profiles, resultFiles multiFlag
	fs.Var(&profiles, "profile", "CPU profile of a run's window (probebench run -cpuprofile); repeatable")
	fs.Var(&resultFiles, "result", "the JSON line of the same run; repeatable, one per -profile")
	_ = fs.Parse(args)
	if len(profiles) == 0 || len(profiles) != len(resultFiles) {
		return fmt.Errorf("breakdown: give each -profile with its -result")
	}
	type column struct {
		res   Result
		rows  map[string]breakdownRow
		total float64
	}
	var cols []column
	order := map[string]float64{}
	for i := range profiles {
		b, err := os.ReadFile(resultFiles[i])
		if err != nil {
			return err
		}
		var res Result
		if err := json.Unmarshal(lastJSONLine(b), &res); err != nil {
			return fmt.Errorf("%s: %w", resultFiles[i], err)
		}
		f, err := os.Open(profiles[i])
		if err != nil {
			return err
		}
		rows, total, err := cpuBreakdown(bufio.NewReader(f), res.CPUSeconds, res.ProbesExecuted)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", profiles[i], err)
		}
		c := column{res: res, rows: map[string]breakdownRow{}, total: total}
		for _, r := range rows {
			c.rows[r.Centre] = r
			order[r.Centre] += r.Percent
		}
		cols = append(cols, c)
	}
	names := make([]string, 0, len(order))
	for n := range order {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return order[names[i]] > order[names[j]] })
	var out bytes.Buffer
	out.WriteString("| cost centre |")
	sep := "|---|"
	for _, c := range cols {
		fmt.Fprintf(&out, " %s %dk/s: %% | µs/probe |", c.res.Impl, int(c.res.ExpectedProbesPerSecond/1000))
		sep += "---:|---:|"
	}
	out.WriteString("\n" + sep + "\n")
	for _, n := range names {
		fmt.Fprintf(&out, "| %s |", n)
		for _, c := range cols {
			r, ok := c.rows[n]
			if !ok {
				out.WriteString(" — | — |")
				continue
			}
			fmt.Fprintf(&out, " %.1f | %.2f |", r.Percent, r.MicrosPerRun)
		}
		out.WriteString("\n")
	}
	out.WriteString("| **total** (rusage CPU per executed probe; profile seconds / rusage seconds) |")
	for _, c := range cols {
		per := 0.0
		if c.res.ProbesExecuted > 0 {
			per = c.res.CPUSeconds * 1e6 / float64(c.res.ProbesExecuted)
		}
		fmt.Fprintf(&out, " 100 (%.2f / %.2f s) | **%.2f** |", c.total, c.res.CPUSeconds, per)
	}
	out.WriteString("\n")
	_, err := os.Stdout.Write(out.Bytes())
	return err
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// deadlineOwner tells the attempt's deadline (the context.WithDeadline the
// runtime's lazy deadline makes when a handler waits) from net/http's own: a client with a Timeout wraps
// each request's context in a deadline too, which belongs to the GET (the
// floor pays it as well). callers are the frames above the context call,
// nearest first.
func deadlineOwner(callers []string) string {
	for _, fn := range callers {
		switch {
		case strings.Contains(fn, "net/http."):
			return centreNetwork
		case strings.Contains(fn, "probed/runtime."):
			return centreDeadline
		}
	}
	return centreDeadline
}
