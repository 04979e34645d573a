package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// subsecSuite is the suite of sub-second periods: probed only,
// annotation probes with periodMilliseconds.
const subsecSuite = "subsec"

// Targets of the sub-second suite: at a 100 ms period, lateness
// p99 at most 10 ms and no skipped run.
const subsecLatenessP99Ms = 10

// writeSubsecReport writes <out>/subsec.md and, with doc set, rewrites the
// "subsec" section of doc. The suite has no plot: two runs of one
// implementation.
func writeSubsecReport(results []Result, cmdline, outDir, doc string) error {
	md := renderSubsec(results, cmdline)
	if err := os.WriteFile(filepath.Join(outDir, subsecSuite+".md"), []byte(md), 0o644); err != nil {
		return err
	}
	if doc == "" {
		return nil
	}
	return rewriteSection(doc, subsecSuite, md)
}

func renderSubsec(results []Result, cmdline string) string {
	var b bytes.Buffer
	when := time.Now().UTC().Format("2006-01-02 15:04 UTC")
	if len(results) > 0 {
		if t, err := time.Parse(time.RFC3339, results[0].Time); err == nil {
			when = t.Format("2006-01-02 15:04 UTC")
		}
	}
	fmt.Fprintf(&b, "Measured with `%s`, runs starting %s.  \n", cmdline, when)
	fmt.Fprintf(&b, "Machine: %s.  \n", machine())
	b.WriteString("probed only (the kubelet has no sub-second periods); probes declared in the `probed.io/probes` annotation with `periodSeconds: 1, periodMilliseconds: -900`, timeout 1 s; scheduler tick 10 ms unless noted.\n\n")
	b.WriteString("| run | probes | period ms | tick ms | CPU s / window s | CPU ms / 1k probes | probes/s (expected) | lateness p50 / p99 / p99.9 / max ms | skipped / extra runs | failures | load average 1/5/15 min | p99 ≤ 10 ms, 0 skipped |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n")
	for _, r := range results {
		tick := "10"
		if r.TickMs > 0 {
			tick = fmt.Sprintf("%g", r.TickMs)
		}
		var load []string
		for _, l := range r.LoadAverage {
			load = append(load, fmt.Sprintf("%.2f", l))
		}
		met := verdict(r.LatenessP99Ms <= subsecLatenessP99Ms && r.SkippedRuns == 0 && r.SilentWorkers == 0 && r.ProbesExecuted > 0)
		if len(r.LoadAverage) > 0 && r.GOMAXPROCS > 0 && r.LoadAverage[0] > float64(r.GOMAXPROCS) {
			met += fmt.Sprintf(" (host load %.1f on %d cores: not an idle machine)", r.LoadAverage[0], r.GOMAXPROCS)
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %s | %.2f / %.0f | %.1f | %.0f (%.0f) | %.1f / %.1f / %.1f / %.1f | %d / %d | %d | %s | %s |\n",
			runName(r), r.Probes, r.PeriodMs, tick, r.CPUSeconds, r.WindowSeconds, r.CPUPer1kProbes, r.ProbesPerSecond, r.ExpectedProbesPerSecond,
			r.LatenessP50Ms, r.LatenessP99Ms, r.LatenessP999Ms, r.LatenessMaxMs, r.SkippedRuns, r.ExtraRuns, r.Failures+r.Unknown,
			strings.Join(load, " / "), met)
	}
	b.WriteString("\nLateness and skipped runs as in the suites above (each worker against its own most punctual run, modulo the 100 ms period; a run later than a period counts as skipped). ")
	b.WriteString("The load average is the host's at the end of the window: on a shared machine it says how much else ran beside the benchmark.\n\n")
	return b.String()
}
