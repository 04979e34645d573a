package main

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"sort"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// writeReport writes <out>/<suite>.md (machine, command, table, targets)
// and <out>/<suite>.png, and, with doc set, rewrites the suite's section of
// doc (between "<!-- BEGIN bench:<suite> -->" and "<!-- END bench:<suite> -->")
// and copies the plot next to doc as benchmarks-<suite>.png.
func writeReport(results []Result, suite, cmdline, outDir, doc string) error {
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return err
	}
	if suite == subsecSuite {
		return writeSubsecReport(results, cmdline, outDir, doc)
	}
	return publish(suite, outDir, doc,
		func(path string) error { return plotResults(results, path, suite) },
		func(img string) string { return renderMarkdown(results, suite, cmdline, img) })
}

// publish writes <out>/<section>.png with plot and <out>/<section>.md with
// render (given the plot's name as the markdown refers to it), and, with
// doc set, copies the plot next to doc as benchmarks-<section>.png and
// rewrites doc's section.
func publish(section, outDir, doc string, plot func(path string) error, render func(img string) string) error {
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return err
	}
	png := filepath.Join(outDir, section+".png")
	if err := plot(png); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	imgRef := section + ".png"
	if doc != "" {
		imgRef = "benchmarks-" + section + ".png"
		b, err := os.ReadFile(png)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(filepath.Dir(doc), imgRef), b, 0o644); err != nil {
			return err
		}
	}
	md := render(imgRef)
	if err := os.WriteFile(filepath.Join(outDir, section+".md"), []byte(md), 0o644); err != nil {
		return err
	}
	if doc == "" {
		return nil
	}
	return rewriteSection(doc, section, md)
}

func rewriteSection(doc, suite, md string) error {
	begin := "<!-- BEGIN bench:" + suite + " -->"
	end := "<!-- END bench:" + suite + " -->"
	old, err := os.ReadFile(doc)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	s := string(old)
	block := begin + "\n" + md + end
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i >= 0 && j > i {
		s = s[:i] + block + s[j+len(end):]
	} else {
		if s != "" && !strings.HasSuffix(s, "\n") {
			s += "\n"
		}
		s += "\n" + block + "\n"
	}
	return os.WriteFile(doc, []byte(s), 0o644)
}

func machine() string {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				if i := strings.Index(l, ":"); i >= 0 {
					cpu = strings.TrimSpace(l[i+1:])
				}
				break
			}
		}
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		fmt.Sscanf(strings.TrimPrefix(strings.Split(string(b), "\n")[0], "MemTotal:"), "%d", &kb)
		mem = fmt.Sprintf(", %.0f GiB", float64(kb)/(1<<20))
	}
	kernel := ""
	if out, err := exec.Command("uname", "-r").Output(); err == nil {
		kernel = ", Linux " + strings.TrimSpace(string(out))
	}
	return fmt.Sprintf("%s, %d cores%s%s, %s", cpu, goruntime.NumCPU(), mem, kernel, goruntime.Version())
}

func mib(b int64) string { return fmt.Sprintf("%.1f", float64(b)/(1<<20)) }

func runName(r Result) string {
	s := r.Mode
	if r.Label != "" {
		s += " " + r.Label
	}
	return s
}

func renderMarkdown(results []Result, suite, cmdline, img string) string {
	var b bytes.Buffer
	when := time.Now().UTC().Format("2006-01-02 15:04 UTC")
	if len(results) > 0 {
		if t, err := time.Parse(time.RFC3339, results[0].Time); err == nil {
			when = t.Format("2006-01-02 15:04 UTC")
		}
	}
	fmt.Fprintf(&b, "Measured with `%s`, runs starting %s.  \n", cmdline, when)
	fmt.Fprintf(&b, "Machine: %s.  \n", machine())
	fmt.Fprintf(&b, "Kubelet: k8s.io/kubernetes v1.37.2 pkg/kubelet/prober. Each row is its own process; period 1 s, timeout 1 s unless noted.\n\n")
	b.WriteString("| impl | run | probes | period s | RSS MiB | heap MiB | stack MiB | B/probe | goroutines | CPU s / window s | CPU ms / 1k probes | probes/s (expected) | lateness p50 / p99 / p99.9 / max ms | skipped / extra runs | burst | failures | AddPod s | drain s |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range results {
		lat := fmt.Sprintf("%.1f / %.1f / %.1f / %.1f", r.LatenessP50Ms, r.LatenessP99Ms, r.LatenessP999Ms, r.LatenessMaxMs)
		if r.OneAddr != "" || isFloor(r.Impl) {
			lat = "—"
		}
		burst := fmt.Sprintf("%.2f", r.Burstiness)
		if r.Burstiness == 0 {
			burst = "—"
		}
		fail := fmt.Sprintf("%d", r.Failures+r.Unknown)
		if r.OneAddr != "" {
			fail += fmt.Sprintf(" (TIME-WAIT %d)", r.TimeWait)
		}
		if r.HungEvery > 0 {
			fail += fmt.Sprintf(" (+%d on hung)", r.HungFailures)
		}
		per1k := fmt.Sprintf("%.1f", r.CPUPer1kProbes)
		if r.Probes == 0 {
			per1k = fmt.Sprintf("— (baseline: %.1f ms/s)", cpuMsPerSecond(r))
		}
		drain := fmt.Sprintf("%.2f", r.DrainSeconds)
		if r.DrainSeconds < 0 {
			drain = "not done"
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %s | %s | %s | %.0f | %d | %.2f / %.0f | %s | %.0f (%.0f) | %s | %d / %d | %s | %s | %.2f | %s |\n",
			r.Impl, runName(r), r.Probes, r.PeriodSeconds, mib(r.RSSBytes), mib(r.HeapBytes), mib(r.StackBytes), r.MemPerProbeBytes,
			r.Goroutines, r.CPUSeconds, r.WindowSeconds, per1k, r.ProbesPerSecond, r.ExpectedProbesPerSecond, lat,
			r.SkippedRuns, r.ExtraRuns, burst, fail, r.AddPodSeconds, drain)
	}
	b.WriteString("\nB/probe: Go heap + stacks added by AddPod and the warm-up, per probe (the pods and their statuses are in the baseline; `registered_bytes_per_probe` in the JSON is the same right after AddPod). ")
	b.WriteString("Lateness: each worker's probe starts against its own most punctual one, modulo the period (a run later than a period counts as skipped; two runs in one period of the grid count as an extra run). ")
	b.WriteString("Burst: largest number of probe starts in any 100 ms within two periods of adding all pods at once, over the mean. ")
	b.WriteString("Failures: `prober_probe_total{result=failed|unknown}` of healthy targets in the window. ")
	b.WriteString("Baseline rows (0 probes): the same process, recorder and manager with no pod; their CPU per second of the window is the fixed cost that the flat-cost lines below subtract for the figure labelled net (the raw figure is the one judged).\n\n")
	b.WriteString("### Targets\n\n")
	for _, t := range evaluate(results) {
		fmt.Fprintf(&b, "- %s\n", t)
	}
	b.WriteString("\n### Targets of issue 13 (density)\n\n")
	for _, t := range evaluateDensity(results) {
		fmt.Fprintf(&b, "- %s\n", t)
	}
	fmt.Fprintf(&b, "\n![RSS and CPU against probe count](%s)\n\n", img)
	return b.String()
}

func find(results []Result, f func(Result) bool) (Result, bool) {
	for _, r := range results {
		if f(r) {
			return r, true
		}
	}
	return Result{}, false
}

func instantRun(impl string, probes int) func(Result) bool {
	return func(r Result) bool {
		return r.Impl == impl && r.Mode == modeInstant && r.Label == "" && r.Probes == probes && r.PeriodSeconds == 1
	}
}

func verdict(ok bool) string {
	if ok {
		return "**met**"
	}
	return "**missed**"
}

// evaluate checks the targets against the results present.
func evaluate(results []Result) []string {
	var out []string
	na := func(what string) { out = append(out, what+": not measured in this suite") }

	// RSS at 100k probes.
	if p, ok := find(results, instantRun("probed", 100000)); ok {
		if k, ok := find(results, instantRun("kubelet", 100000)); ok {
			ratio := float64(p.RSSBytes) / float64(k.RSSBytes)
			out = append(out, fmt.Sprintf("RSS at 100k probes ≤ 0.25× kubelet: %.3f× (%s vs %s MiB) %s", ratio, mib(p.RSSBytes), mib(k.RSSBytes), verdict(ratio <= 0.25)))
		} else {
			na("RSS at 100k probes ≤ 0.25× kubelet")
		}
	} else {
		na("RSS at 100k probes ≤ 0.25× kubelet")
	}
	// Memory per probe: largest probed run.
	var big Result
	for _, r := range results {
		if r.Impl == "probed" && r.Mode == modeInstant && r.Probes > big.Probes {
			big = r
		}
	}
	if big.Probes > 0 {
		reg := big.RegisteredBytesPerProbe
		if reg == 0 { // results from before the figure existed
			reg = big.MemPerProbeBytes
		}
		out = append(out, fmt.Sprintf("memory added per registered probe ≤ 300 B: %.0f B at %d probes right after AddPod (%.0f B after the warm-up, with results caches and metric counts) %s",
			reg, big.Probes, big.MemPerProbeBytes, verdict(reg <= 300)))
	}
	// CPU per 1k probes at 10k and 40k probes/s.
	for _, probes := range []int{10000, 40000} {
		p, ok1 := find(results, instantRun("probed", probes))
		k, ok2 := find(results, instantRun("kubelet", probes))
		if !ok1 || !ok2 || k.CPUPer1kProbes == 0 {
			na(fmt.Sprintf("CPU per 1,000 probes at %dk probes/s ≤ 0.5× kubelet", probes/1000))
			continue
		}
		ratio := p.CPUPer1kProbes / k.CPUPer1kProbes
		out = append(out, fmt.Sprintf("CPU per 1,000 probes at %dk probes/s ≤ 0.5× kubelet: %.2f× (%.1f vs %.1f ms) %s", probes/1000, ratio, p.CPUPer1kProbes, k.CPUPer1kProbes, verdict(ratio <= 0.5)))
	}
	if p, ok := find(results, instantRun("probed", 40000)); ok {
		out = append(out, fmt.Sprintf("lateness p99 at 40k probes/s (instant) ≤ 20 ms: %.1f ms (kubelet: %s) %s", p.LatenessP99Ms, kubeletField(results, 40000, func(r Result) string { return fmt.Sprintf("%.1f ms", r.LatenessP99Ms) }), verdict(p.LatenessP99Ms <= 20)))
	} else {
		na("lateness p99 at 40k probes/s ≤ 20 ms")
	}
	if p, ok := find(results, func(r Result) bool { return r.Impl == "probed" && r.Label == "burst" }); ok {
		k, _ := find(results, func(r Result) bool { return r.Impl == "kubelet" && r.Label == "burst" })
		out = append(out, fmt.Sprintf("burstiness after adding %dk pods at once ≤ 1.5: %.2f (kubelet %.2f) %s", p.Pods/1000, p.Burstiness, k.Burstiness, verdict(p.Burstiness <= 1.5)))
	} else {
		na("burstiness after adding 10k pods at once ≤ 1.5")
	}
	if p, ok := find(results, func(r Result) bool { return r.Impl == "probed" && r.Probes >= 1000000 }); ok {
		out = append(out, fmt.Sprintf("1M probes, period 60 s, lateness p99 ≤ 50 ms: %.1f ms (%d skipped, %d silent) %s", p.LatenessP99Ms, p.SkippedRuns, p.SilentWorkers, verdict(p.LatenessP99Ms <= 50 && p.SilentWorkers == 0)))
	} else {
		na("1M probes, period 60 s, lateness p99 ≤ 50 ms")
	}
	if p, ok := find(results, saturationRun("probed", modeTCP)); ok {
		if d, ok := find(results, saturationRun(implDialLoop, modeTCP)); ok && d.ProbesPerSecond > 0 {
			ratio := p.ProbesPerSecond / d.ProbesPerSecond
			out = append(out, fmt.Sprintf("TCP probes/s at saturation ≥ 0.8× a bare dial loop (concurrency %d): %.2f× (%.0f vs %.0f/s) %s", d.Concurrency, ratio, p.ProbesPerSecond, d.ProbesPerSecond, verdict(ratio >= 0.8)))
		}
	} else {
		na("TCP probes/s at saturation ≥ 0.8× a bare dial loop")
	}
	if h, ok := find(results, func(r Result) bool { return r.Impl == "probed" && r.Mode == modeHung }); ok {
		if base, ok := find(results, func(r Result) bool { return r.Impl == "probed" && r.Mode == modeHTTP && r.Pods == h.Pods }); ok {
			ratio := h.LatenessP99Ms / math.Max(base.LatenessP99Ms, 0.001)
			v := verdict(ratio <= 2 && h.Failures+h.Unknown == 0)
			if base.ProbesPerSecond < 0.95*base.ExpectedProbesPerSecond || h.ProbesPerSecond < 0.95*h.ExpectedProbesPerSecond {
				v += fmt.Sprintf(" (but both runs are saturated: %.0f/%.0f and %.0f/%.0f probes/s, so the lateness comparison is not conclusive)",
					base.ProbesPerSecond, base.ExpectedProbesPerSecond, h.ProbesPerSecond, h.ExpectedProbesPerSecond)
			}
			out = append(out, fmt.Sprintf("10%% hung targets: healthy p99 ≤ 2× without hung targets and no false failure: %.1f ms vs %.1f ms (%.2f×), %d false failures, %d skipped %s",
				h.LatenessP99Ms, base.LatenessP99Ms, ratio, h.Failures+h.Unknown, h.SkippedRuns, v))
		}
	} else {
		na("10% hung targets")
	}
	// Flat cost per probe (probed, instant): the same rule as the density targets'.
	if line, ok := flatCost(results, "cost per probe flat within 1.5×", false); ok {
		out = append(out, line)
	}
	return out
}

func kubeletField(results []Result, probes int, f func(Result) string) string {
	if k, ok := find(results, instantRun("kubelet", probes)); ok {
		return f(k)
	}
	return "n/a"
}

func shortCount(n int) string {
	switch {
	case n >= 1000000 && n%1000000 == 0:
		return fmt.Sprintf("%dM", n/1000000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

// plotResults draws RSS, CPU cores and CPU per 1k probes against the
// probe count for the instant runs of both implementations.
func plotResults(results []Result, path, suite string) error {
	type series struct{ rss, cores, per1k plotter.XYs }
	by := map[string]*series{}
	for _, r := range results {
		if r.Mode != modeInstant || r.Label != "" || isFloor(r.Impl) || r.Probes == 0 {
			continue
		}
		name := r.Impl
		if r.PeriodSeconds != 1 {
			name = fmt.Sprintf("%s (period %d s)", r.Impl, r.PeriodSeconds)
		}
		s := by[name]
		if s == nil {
			s = &series{}
			by[name] = s
		}
		x := float64(r.Probes)
		s.rss = append(s.rss, plotter.XY{X: x, Y: float64(r.RSSBytes) / (1 << 20)})
		s.cores = append(s.cores, plotter.XY{X: x, Y: r.CPUSeconds / math.Max(r.WindowSeconds, 1e-9)})
		s.per1k = append(s.per1k, plotter.XY{X: x, Y: r.CPUPer1kProbes})
	}
	names := make([]string, 0, len(by))
	for n := range by {
		names = append(names, n)
	}
	sort.Strings(names)
	var xs []float64
	seen := map[float64]bool{}
	for _, s := range by {
		for _, xy := range s.rss {
			if !seen[xy.X] {
				seen[xy.X] = true
				xs = append(xs, xy.X)
			}
		}
	}
	sort.Float64s(xs)
	colors := map[string]color.Color{"probed": color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 255}, "kubelet": color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 255}}
	mk := func(title, ylabel string, pick func(*series) plotter.XYs) (*plot.Plot, error) {
		p := plot.New()
		p.Title.Text = title
		p.X.Label.Text = "probes (log)"
		p.Y.Label.Text = ylabel
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = countTicks(xs)
		p.Legend.Top = true
		p.Legend.Left = true
		p.Y.Min = 0
		for i, n := range names {
			xys := pick(by[n])
			sort.Slice(xys, func(a, b int) bool { return xys[a].X < xys[b].X })
			l, pts, err := plotter.NewLinePoints(xys)
			if err != nil {
				return nil, err
			}
			c, ok := colors[strings.Fields(n)[0]]
			if !ok {
				c = color.Gray{Y: 0x60}
			}
			l.Color, pts.Color = c, c
			if i > 1 || strings.Contains(n, "period") {
				l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
				pts.Shape = draw.TriangleGlyph{}
			}
			p.Add(l, pts)
			p.Legend.Add(n, l, pts)
		}
		return p, nil
	}
	p1, err := mk("RSS after warm-up", "MiB", func(s *series) plotter.XYs { return s.rss })
	if err != nil {
		return err
	}
	p2, err := mk("CPU (cores busy in the window)", "cores", func(s *series) plotter.XYs { return s.cores })
	if err != nil {
		return err
	}
	p3, err := mk("CPU per 1,000 executed probes", "ms", func(s *series) plotter.XYs { return s.per1k })
	if err != nil {
		return err
	}
	img := vgimg.New(vg.Points(1200), vg.Points(420))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 3, PadX: vg.Millimeter * 6, PadY: vg.Millimeter * 4, PadTop: vg.Millimeter * 4, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4}
	plots := [][]*plot.Plot{{p1, p2, p3}}
	canvases := plot.Align(plots, tiles, dc)
	for j, p := range plots[0] {
		p.Draw(canvases[0][j])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = vgimg.PngCanvas{Canvas: img}.WriteTo(f)
	return err
}

// countTicks labels the probe counts present ("2k", "100k", "1M").
type countTicks []float64

func (c countTicks) Ticks(lo, hi float64) []plot.Tick {
	var out []plot.Tick
	for _, x := range c {
		if x >= lo && x <= hi {
			out = append(out, plot.Tick{Value: x, Label: shortCount(int(x))})
		}
	}
	return out
}

// evaluateDensity checks the density targets (100k probes/s on two
// cores, a flat cost per probe) against the results present.
func evaluateDensity(results []Result) []string {
	var out []string
	na := func(what, why string) { out = append(out, what+": not measured in this suite"+why) }

	const t100k = "100k instant probes/s, lateness p99 ≤ 10 ms and 0 skipped runs"
	if p, ok := find(results, instantRun("probed", 100000)); ok {
		kub := kubeletField(results, 100000, func(k Result) string {
			return fmt.Sprintf("p99 %.1f ms, %d skipped, %.0f of %.0f probes/s executed", k.LatenessP99Ms, k.SkippedRuns, k.ProbesPerSecond, k.ExpectedProbesPerSecond)
		})
		out = append(out, fmt.Sprintf("%s: p99 %.1f ms, %d skipped, %.0f of %.0f probes/s executed (kubelet: %s) %s", t100k,
			p.LatenessP99Ms, p.SkippedRuns, p.ProbesPerSecond, p.ExpectedProbesPerSecond, kub, verdict(p.LatenessP99Ms <= 10 && p.SkippedRuns == 0)))
	} else {
		na(t100k, "")
	}

	const t1m = "1M probes at period 10 s, lateness p99 ≤ 20 ms and 0 skipped runs"
	if p, ok := find(results, func(r Result) bool {
		return r.Impl == "probed" && r.Mode == modeInstant && r.Probes >= 1000000 && r.PeriodSeconds == 10
	}); ok {
		out = append(out, fmt.Sprintf("%s: p99 %.1f ms, %d skipped, %d silent; RSS %s MiB, of which the pods' own objects (before AddPod) %s MiB, %.0f B per probe added %s", t1m,
			p.LatenessP99Ms, p.SkippedRuns, p.SilentWorkers, mib(p.RSSBytes), mib(p.BaselineRSSBytes), p.RSSPerProbeBytes,
			verdict(p.LatenessP99Ms <= 20 && p.SkippedRuns == 0 && p.SilentWorkers == 0)))
	} else {
		na(t1m, "")
	}

	const tcpu = "CPU per instant probe ≤ 0.25× the kubelet's, 10k–100k probes/s"
	var parts []string
	worst := 0.0
	for _, probes := range []int{10000, 20000, 40000, 100000} {
		p, ok1 := find(results, instantRun("probed", probes))
		k, ok2 := find(results, instantRun("kubelet", probes))
		if !ok1 || !ok2 || k.CPUPer1kProbes == 0 {
			continue
		}
		ratio := p.CPUPer1kProbes / k.CPUPer1kProbes
		worst = math.Max(worst, ratio)
		parts = append(parts, fmt.Sprintf("%s/s %.2f× (%.1f vs %.1f µs)", shortCount(probes), ratio, p.CPUPer1kProbes, k.CPUPer1kProbes))
	}
	if len(parts) > 0 {
		out = append(out, fmt.Sprintf("%s: %s %s", tcpu, strings.Join(parts, ", "), verdict(worst <= 0.25)))
	} else {
		na(tcpu, "")
	}

	const trss = "RSS added per registered probe at 100k probes (rss_per_probe_bytes) ≤ 1 KiB"
	if p, ok := find(results, instantRun("probed", 100000)); ok {
		kub := kubeletField(results, 100000, func(k Result) string { return fmt.Sprintf("%.0f B", k.RSSPerProbeBytes) })
		out = append(out, fmt.Sprintf("%s: %.0f B (heap + stacks %.0f B; kubelet %s) %s", trss, p.RSSPerProbeBytes, p.MemPerProbeBytes, kub, verdict(p.RSSPerProbeBytes <= 1024)))
	} else {
		na(trss, "")
	}

	const tflat = "cost per probe from 2k to 1M probes (CPU per 1k probes, max/min) ≤ 1.5×"
	if line, ok := flatCost(results, tflat, true); ok {
		out = append(out, line)
	} else {
		na(tflat, "")
	}

	out = append(out, againstFloor(results, "real TCP probes: throughput ≥ 0.95× and CPU per probe ≤ 1.1× the bare dial loop at the same concurrency", modeTCP, implDialLoop))
	out = append(out, againstFloor(results, "real HTTP probes against a bare GET loop: throughput ≥ 0.95× and CPU per probe ≤ 1.1× at the same concurrency", modeHTTP, implGetLoop))
	return out
}

// isFloor reports whether impl is one of the saturation floors (floor.go).
func isFloor(impl string) bool { return impl == implDialLoop || impl == implGetLoop }

// saturationRun selects the saturation run of impl in mode.
func saturationRun(impl, mode string) func(Result) bool {
	return func(r Result) bool { return r.Impl == impl && r.Mode == mode && r.Label == "saturation" }
}

// againstFloor is the density targets' line for real probes of mode against their
// floor (the saturation runs of probed and of floor): probed's throughput
// at least 0.95× the floor's and its CPU per probe at most 1.1×.
func againstFloor(results []Result, what, mode, floor string) string {
	p, ok1 := find(results, saturationRun("probed", mode))
	d, ok2 := find(results, saturationRun(floor, mode))
	if !ok1 || !ok2 || d.ProbesPerSecond == 0 || d.CPUPer1kProbes == 0 {
		return what + ": not measured in this suite"
	}
	tput, cpu := p.ProbesPerSecond/d.ProbesPerSecond, p.CPUPer1kProbes/d.CPUPer1kProbes
	return fmt.Sprintf("%s (%d): throughput %.2f× (%.0f vs %.0f/s), CPU per probe %.2f× (%.1f vs %.1f ms per 1k) %s", what, d.Concurrency,
		tput, p.ProbesPerSecond, d.ProbesPerSecond, cpu, p.CPUPer1kProbes, d.CPUPer1kProbes, verdict(tput >= 0.95 && cpu <= 1.1))
}

// cpuMsPerSecond is a run's CPU per second of its window, in ms (results
// from before the field existed: from CPUSeconds and WindowSeconds).
func cpuMsPerSecond(r Result) float64 {
	if r.CPUMsPerSecond > 0 || r.WindowSeconds <= 0 {
		return r.CPUMsPerSecond
	}
	return r.CPUSeconds * 1000 / r.WindowSeconds
}

// baselineRun is impl's baseline run of the suite (instant, -pods 0: the
// same process, recorder and manager with no probe), if any.
func baselineRun(results []Result, impl string) (Result, bool) {
	return find(results, func(r Result) bool { return r.Impl == impl && r.Mode == modeInstant && r.Pods == 0 })
}

// netPer1k is r's CPU per 1,000 executed probes net of base's CPU per
// second (the same implementation at rest), in ms: (r's ms/s − base's
// ms/s) / probes per second × 1000.
func netPer1k(r, base Result) float64 {
	if r.ProbesPerSecond <= 0 {
		return 0
	}
	return (cpuMsPerSecond(r) - cpuMsPerSecond(base)) / r.ProbesPerSecond * 1000
}

// flatCost is the line of the flat-cost target (CPU per 1,000
// probes, max over min, ≤ 1.5×) over probed's instant runs. The verdict
// judges the raw figure, getrusage CPU of the whole process per executed
// probe, as the issue states it. Beside it, when the suite has baseline
// runs (-pods 0), each implementation's CPU at rest and the same ratio net
// of it, labelled and not judged, and the kubelet's ratios over its own
// runs for comparison. With judgeRange, a suite without a run at 2k probes
// or none at 1M is not judged. ok is false with fewer than two runs.
func flatCost(results []Result, title string, judgeRange bool) (line string, ok bool) {
	runs := func(impl string) []Result {
		var pts []Result
		for _, r := range results {
			if r.Impl == impl && r.Mode == modeInstant && r.Label == "" && r.Probes > 0 && r.CPUPer1kProbes > 0 {
				pts = append(pts, r)
			}
		}
		sort.Slice(pts, func(i, j int) bool { return pts[i].Probes < pts[j].Probes })
		return pts
	}
	ratio := func(pts []Result, f func(Result) float64) float64 {
		lo, hi := math.Inf(1), 0.0
		for _, r := range pts {
			lo, hi = math.Min(lo, f(r)), math.Max(hi, f(r))
		}
		if lo <= 0 {
			return math.Inf(1)
		}
		return hi / lo
	}
	raw := func(r Result) float64 { return r.CPUPer1kProbes }
	pts := runs("probed")
	if len(pts) < 2 {
		return "", false
	}
	rawRatio := ratio(pts, raw)
	v := verdict(rawRatio <= 1.5)
	if judgeRange && (pts[0].Probes > 2000 || pts[len(pts)-1].Probes < 1000000) {
		v = "**not judged** (the suite has no run at 2k probes or none at 1M)"
	}
	var parts []string
	for _, r := range pts {
		parts = append(parts, fmt.Sprintf("%s (period %d s): %.1f ms", shortCount(r.Probes), r.PeriodSeconds, r.CPUPer1kProbes))
	}
	line = fmt.Sprintf("%s: raw (process CPU per executed probe; the judged figure) %s → %.2f× %s", title, strings.Join(parts, ", "), rawRatio, v)

	pb, okP := baselineRun(results, "probed")
	kb, okK := baselineRun(results, "kubelet")
	if !okP {
		return line + "; net of the harness's baseline: not measured (no -pods 0 run in this suite)", true
	}
	net := func(r Result) float64 { return netPer1k(r, pb) }
	parts = parts[:0]
	for _, r := range pts {
		parts = append(parts, fmt.Sprintf("%s: %.1f ms", shortCount(r.Probes), net(r)))
	}
	line += fmt.Sprintf("; baseline at rest (same process, no pods): probed %.1f ms/s", cpuMsPerSecond(pb))
	if okK {
		line += fmt.Sprintf(", kubelet %.1f ms/s", cpuMsPerSecond(kb))
	}
	nr := ratio(pts, net)
	line += fmt.Sprintf("; net of probed's baseline (not judged) %s → %.2f× (%s net)", strings.Join(parts, ", "), nr, strings.Trim(verdict(nr <= 1.5), "*"))
	if kpts := runs("kubelet"); len(kpts) >= 2 {
		line += fmt.Sprintf("; kubelet %s–%s probes for comparison: raw %.2f×", shortCount(kpts[0].Probes), shortCount(kpts[len(kpts)-1].Probes), ratio(kpts, raw))
		if okK {
			line += fmt.Sprintf(", net %.2f×", ratio(kpts, func(r Result) float64 { return netPer1k(r, kb) }))
		}
	}
	return line, true
}
