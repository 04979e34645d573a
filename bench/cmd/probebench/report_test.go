package main

import (
	"strings"
	"testing"
)

// instantResult is an instant run of impl with probes probes at period 1 s
// that used cpuMsPerS of CPU per second for probesPerS executed probes.
func instantResult(impl string, probes int, cpuMsPerS, probesPerS float64) Result {
	r := Result{Impl: impl, Mode: modeInstant, Pods: probes / 2, Probes: probes, PeriodSeconds: 1,
		WindowSeconds: 20, CPUSeconds: cpuMsPerS * 20 / 1000, ProbesPerSecond: probesPerS}
	if probesPerS > 0 {
		r.ProbesExecuted = int64(probesPerS * 20)
		r.CPUPer1kProbes = cpuMsPerS / probesPerS * 1000
	}
	return r
}

// The flat-cost line judges the raw figure and reports, labelled, the same
// ratio net of each implementation's baseline run (-pods 0).
func TestFlatCostJudgesRawAndReportsNet(t *testing.T) {
	results := []Result{
		instantResult("probed", 0, 15, 0),              // at rest: 15 ms/s
		instantResult("kubelet", 0, 1, 0),              // at rest: 1 ms/s
		instantResult("probed", 2000, 35, 2000),        // raw 17.5 ms/1k, net 10
		instantResult("probed", 20000, 175, 20000),     // raw 8.75, net 8.0
		instantResult("probed", 1000000, 1015, 100000), // raw 10.15 (shown 10.1), net 10.0
		instantResult("kubelet", 2000, 79, 2000),       // raw 39.5, net 39
		instantResult("kubelet", 20000, 421, 20000),    // raw 21.05, net 21
	}
	line, ok := flatCost(results, "flat", true)
	if !ok {
		t.Fatal("no line for three probed runs")
	}
	for _, want := range []string{
		"raw (process CPU per executed probe; the judged figure) 2k (period 1 s): 17.5 ms, 20k (period 1 s): 8.8 ms, 1M (period 1 s): 10.1 ms → 2.00× **missed**",
		"baseline at rest (same process, no pods): probed 15.0 ms/s, kubelet 1.0 ms/s",
		"net of probed's baseline (not judged) 2k: 10.0 ms, 20k: 8.0 ms, 1M: 10.0 ms → 1.25× (met net)",
		"kubelet 2k–20k probes for comparison: raw 1.88×, net 1.86×",
	} {
		if !strings.Contains(line, want) {
			t.Errorf("line lacks %q:\n%s", want, line)
		}
	}
	// No baseline run: the net figure is said to be missing, not made up.
	line, _ = flatCost(results[2:], "flat", true)
	if !strings.Contains(line, "net of the harness's baseline: not measured") {
		t.Errorf("without a baseline run: %s", line)
	}
	// The baseline rows are not points of the ratio (0 probes).
	if _, ok := flatCost(results[:3], "flat", true); ok {
		t.Error("one probed run and a baseline made a ratio")
	}
}

// A baseline row shows its CPU per second instead of a per-probe figure.
func TestBaselineRowInTable(t *testing.T) {
	md := renderMarkdown([]Result{instantResult("probed", 0, 15, 0)}, "quick", "make bench", "x.png")
	if !strings.Contains(md, "— (baseline: 15.0 ms/s)") {
		t.Errorf("baseline row:\n%s", md)
	}
}
