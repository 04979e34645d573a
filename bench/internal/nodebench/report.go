package nodebench

import (
	"bytes"
	"fmt"
	"image/color"
	"os"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// The targets of issues 20 and 28.
const (
	// HTTPRatio: with HTTP/TCP probes moved to probed, the node's CPU per
	// probe run at most this times the kubelet's.
	HTTPRatio = 0.5
	// ProbingRatio, ProbingKeepAliveRatio: the node's CPU per run above the
	// pods' own (probing ms / run) with probed at most this times the
	// kubelet's, by default and with --http-keep-alive.
	ProbingRatio          = 0.7
	ProbingKeepAliveRatio = 0.5
	// BareRatio and LatenessP99Ms: probed's own CPU per run at most this
	// times the bare prober's on the same pods, with lateness p99 at most
	// LatenessP99Ms.
	BareRatio     = 0.5
	LatenessP99Ms = 20
	// ResidentRatio, ResidentKeepUp: with resident exec helpers, the
	// node's CPU per exec run at most ResidentRatio times the kubelet's,
	// and keeping up at ResidentKeepUp times the exec pods where the
	// kubelet stops keeping up.
	ResidentRatio  = 0.1
	ResidentKeepUp = 3
	// keepUpShare: a side keeps up when it runs at least this share of the
	// expected probes, every pod is ready, and (HTTP/TCP) its lateness p99
	// is under one period.
	keepUpShare = 0.95
)

// Render is the markdown of the runs: one table per kind, the targets and
// the plot (img, relative to the document).
func Render(results []Result, header, img string) string {
	var b bytes.Buffer
	b.WriteString(header)
	lo, hi := loadRange(results)
	fmt.Fprintf(&b, "Load average (1 min) at the end of the windows: %.1f–%.1f.\n\n", lo, hi)

	b.WriteString("**HTTP readiness + TCP liveness probes**, period 1 s (2 runs a pod a second):\n\n")
	b.WriteString("| pods | side | ready | runs/s (expected) | false failures | node CPU, cores | kubelet | containerd + shims | pods' processes | prober | node ms / run | probing ms / run | lateness p50 / p99 / max ms | missed | API server + etcd, cores |\n")
	b.WriteString("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range sorted(results, KindHTTP) {
		w := r.WindowSeconds
		lat, missed := "—", "—"
		if r.Lateness != nil {
			lat = fmt.Sprintf("%.1f / %.1f / %.1f", r.Lateness.LatenessP50Ms, r.Lateness.LatenessP99Ms, r.Lateness.LatenessMaxMs)
			missed = fmt.Sprint(r.Lateness.Missed)
		}
		fmt.Fprintf(&b, "| %d | %s | %d | %s | %s | %.3f | %.3f | %.3f | %.3f | %s | %s | %s | %s | %s | %.3f |\n",
			r.Pods, r.Side, r.Ready, rate(r), failed(r), r.CPU.Node/w, r.CPU.Kubelet/w, (r.CPU.Containerd+r.CPU.Shims)/w, r.CPU.Pods/w,
			probedCores(r), perRun(r.NodeMsPerRun, r), perRun(r.ProbingMsPerRun, r), lat, missed, r.CPU.Control/w)
	}

	b.WriteString("\n**Exec readiness probes** (`true` in the container: through CRI `ExecSync`, a `runc exec` each, or with `probed-resident` through one resident helper per container), period 1 s (1 run a pod a second):\n\n")
	b.WriteString("| pods | side | ready | runs/s (expected) | false failures | ExecSync calls/s | node CPU, cores | kubelet | containerd | shims + runc | pods' processes (helpers) | prober | node ms / run | probing ms / run | execs in flight, most seen (lane) |\n")
	b.WriteString("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range sorted(results, KindExec) {
		w := r.WindowSeconds
		lane := "unbounded"
		if r.ExecLane > 0 {
			lane = fmt.Sprint(r.ExecLane)
		}
		fmt.Fprintf(&b, "| %d | %s | %d | %s | %s | %.1f | %.3f | %.3f | %.3f | %.3f | %.3f | %s | %s | %s | %d (%s) |\n",
			r.Pods, r.Side, r.Ready, rate(r), failed(r), float64(r.ExecCalls)/w, r.CPU.Node/w, r.CPU.Kubelet/w, r.CPU.Containerd/w, r.CPU.Shims/w, r.CPU.Pods/w,
			probedCores(r), perRun(r.NodeMsPerRun, r), perRun(r.ProbingMsPerRun, r), r.ExecsInFlightMax, lane)
	}
	b.WriteString("\n#### Targets\n\n")
	for _, t := range Targets(results) {
		fmt.Fprintf(&b, "- %s\n", t)
	}
	fmt.Fprintf(&b, "\n![node CPU and CPU per probe run against pods, kubelet and probed](%s)\n\n", img)
	return b.String()
}

func rate(r Result) string {
	if r.Side == SideNone {
		return "—"
	}
	return fmt.Sprintf("%.1f (%.0f)", r.RunsPerSec, r.Expected)
}

func failed(r Result) string {
	if r.Side == SideNone {
		return "—"
	}
	return fmt.Sprint(r.Failed)
}

func probedCores(r Result) string {
	if !IsProber(r.Side) {
		return "—"
	}
	return fmt.Sprintf("%.3f", r.CPU.Probed/r.WindowSeconds)
}

func perRun(v float64, r Result) string {
	if r.Side == SideNone || r.Runs == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f", v)
}

func loadRange(results []Result) (lo, hi float64) {
	for i, r := range results {
		if len(r.Load) == 0 {
			continue
		}
		if i == 0 || r.Load[0] < lo {
			lo = r.Load[0]
		}
		hi = max(hi, r.Load[0])
	}
	return lo, hi
}

// sorted returns the runs of kind, with the runs without probes at the same
// pod counts, by pods, then none, kubelet, probed.
func sorted(results []Result, kind string) []Result {
	order := map[string]int{SideNone: 0, SideKubelet: 1, SideBare: 2, SideProbedNoWindow: 3, SideProbed: 4, SideProbedKeepAlive: 5, SideOffloaded: 6, SideProbedResident: 7}
	var out []Result
	for _, r := range results {
		if (r.Side == SideNone && hasKind(results, kind, r.Pods)) || (r.Side != SideNone && r.Kind == kind) {
			out = append(out, r)
		}
	}
	slices.SortStableFunc(out, func(a, b Result) int {
		if a.Pods != b.Pods {
			return a.Pods - b.Pods
		}
		return order[a.Side] - order[b.Side]
	})
	return out
}

// hasKind: a run of kind with probes at pods.
func hasKind(results []Result, kind string, pods int) bool {
	for _, r := range results {
		if r.Kind == kind && r.Side != SideNone && r.Pods == pods {
			return true
		}
	}
	return false
}

// find returns the run of kind, side and pods.
func find(results []Result, kind, side string, pods int) (Result, bool) {
	for _, r := range results {
		if r.Kind == kind && r.Side == side && r.Pods == pods {
			return r, true
		}
	}
	return Result{}, false
}

// keepsUp: the side ran what it should (every pod ready, at least
// keepUpShare of the expected runs, no false failure, HTTP/TCP lateness p99
// under a period).
func keepsUp(r Result) bool {
	if r.Ready < r.Pods || r.RunsPerSec < keepUpShare*r.Expected || r.Failed > 0 {
		return false
	}
	return r.Lateness == nil || r.Lateness.LatenessP99Ms < float64(r.PeriodSeconds)*1000
}

// Targets says, for each target of the real node (the cost against the kubelet's), met or missed with the figures.
func Targets(results []Result) []string {
	var out []string
	verdict := func(ok bool) string {
		if ok {
			return "**met**"
		}
		return "**missed**"
	}
	counts := func(kind string) []int {
		var ns []int
		for _, r := range results {
			if r.Kind == kind && r.Side != SideNone && !slices.Contains(ns, r.Pods) {
				ns = append(ns, r.Pods)
			}
		}
		slices.Sort(ns)
		return ns
	}

	for _, n := range counts(KindHTTP) {
		k, okK := find(results, KindHTTP, SideKubelet, n)
		for _, side := range []struct{ side, what string }{{SideProbed, ""}, {SideOffloaded, ", unchanged manifests through the offload webhook"}} {
			p, okP := find(results, KindHTTP, side.side, n)
			if !okK || !okP || k.NodeMsPerRun == 0 {
				continue
			}
			ratio := p.NodeMsPerRun / k.NodeMsPerRun
			line := fmt.Sprintf("HTTP/TCP, %d pods%s: node CPU per run with probed %.2f ms, with the kubelet %.2f ms: %.2f× (target ≤ %.1f×) %s",
				n, side.what, p.NodeMsPerRun, k.NodeMsPerRun, ratio, HTTPRatio, verdict(ratio <= HTTPRatio))
			if k.ProbingMsPerRun > 0 {
				line += fmt.Sprintf("; above the same pods without probes: %.2f ms against %.2f ms (%.2f×)", p.ProbingMsPerRun, k.ProbingMsPerRun, p.ProbingMsPerRun/k.ProbingMsPerRun)
			}
			out = append(out, line)
		}
	}
	out = append(out, keepAliveTargets(results, counts(KindHTTP), verdict)...)
	for _, n := range counts(KindExec) {
		k, okK := find(results, KindExec, SideKubelet, n)
		p, okP := find(results, KindExec, SideProbed, n)
		if !okK || !okP || k.NodeMsPerRun == 0 {
			continue
		}
		out = append(out, fmt.Sprintf("exec, %d pods: node CPU per run with probed %.1f ms, with the kubelet %.1f ms (%.2f×; target: no more) %s; execs in flight at most %d with probed (lane %d) %s, %d with the kubelet",
			n, p.NodeMsPerRun, k.NodeMsPerRun, p.NodeMsPerRun/k.NodeMsPerRun, verdict(p.NodeMsPerRun <= k.NodeMsPerRun),
			p.ExecsInFlightMax, p.ExecLane, verdict(p.ExecsInFlightMax <= p.ExecLane), k.ExecsInFlightMax))
	}
	out = append(out, residentTargets(results, counts(KindExec), verdict)...)
	for _, kind := range []string{KindHTTP, KindExec} {
		for _, side := range []string{SideKubelet, SideBare, SideProbedNoWindow, SideProbed, SideProbedKeepAlive, SideOffloaded, SideProbedResident} {
			last, first := 0, 0
			for _, n := range counts(kind) {
				r, ok := find(results, kind, side, n)
				if !ok {
					continue
				}
				if keepsUp(r) {
					last = n
				} else if first == 0 {
					first = n
				}
			}
			switch {
			case first > 0 && last == 0:
				out = append(out, fmt.Sprintf("%s, %s: keeps up at no pod count measured (the first: %d; fewer than %.0f%% of the expected runs, false failures, pods not ready, or lateness p99 over a period)",
					kind, side, first, keepUpShare*100))
			case first == 0 && last > 0:
				out = append(out, fmt.Sprintf("%s, %s: keeps up at every pod count measured (up to %d)", kind, side, last))
			case first > 0:
				out = append(out, fmt.Sprintf("%s, %s: keeps up to %d pods; stops keeping up at %d (fewer than %.0f%% of the expected runs, false failures, pods not ready, or lateness p99 over a period)",
					kind, side, last, first, keepUpShare*100))
			}
		}
	}
	return out
}

// keepAliveTargets says, per HTTP/TCP pod count, met or missed for the
// targets of kept connections: the probing CPU per run against the kubelet's, by
// default and with kept connections, and probed's own CPU per run against
// the bare prober's with its lateness.
func keepAliveTargets(results []Result, counts []int, verdict func(bool) string) []string {
	var out []string
	for _, n := range counts {
		k, okK := find(results, KindHTTP, SideKubelet, n)
		for _, t := range []struct {
			side  string
			bound float64
			what  string
		}{{SideProbedNoWindow, ProbingRatio, "without the window (--scheduler-coalesce=0)"}, {SideProbed, ProbingRatio, "by default"}, {SideProbedKeepAlive, ProbingKeepAliveRatio, "with --http-keep-alive"}} {
			p, ok := find(results, KindHTTP, t.side, n)
			if !ok || !okK || k.ProbingMsPerRun <= 0 {
				continue
			}
			ratio := p.ProbingMsPerRun / k.ProbingMsPerRun
			out = append(out, fmt.Sprintf("HTTP/TCP, %d pods, %s: node CPU per run above the pods' own %.2f ms with probed, %.2f ms with the kubelet: %.2f× (target ≤ %.1f×) %s",
				n, t.what, p.ProbingMsPerRun, k.ProbingMsPerRun, ratio, t.bound, verdict(ratio <= t.bound)))
		}
		b, okB := find(results, KindHTTP, SideBare, n)
		if !okB || b.Runs == 0 || b.CPU.Probed <= 0 {
			continue
		}
		bare := b.CPU.Probed * 1000 / float64(b.Runs)
		for _, side := range []string{SideProbedNoWindow, SideProbed, SideProbedKeepAlive} {
			p, ok := find(results, KindHTTP, side, n)
			if !ok || p.Runs == 0 || p.Lateness == nil {
				continue
			}
			own := p.CPU.Probed * 1000 / float64(p.Runs)
			ratio := own / bare
			out = append(out, fmt.Sprintf("HTTP/TCP, %d pods, %s: its own CPU per run %.3f ms, the bare prober's %.3f ms: %.2f× (target ≤ %.1f×), lateness p99 %.1f ms (target ≤ %d ms) %s",
				n, side, own, bare, ratio, BareRatio, p.Lateness.LatenessP99Ms, LatenessP99Ms,
				verdict(ratio <= BareRatio && p.Lateness.LatenessP99Ms <= LatenessP99Ms)))
		}
	}
	return out
}

// residentTargets says met or missed for the resident helper's targets:
// per exec pod count, its node CPU per run against the kubelet's on the
// same count; then the most pods it kept up at against the fewest where the
// kubelet stopped (keepsUp).
func residentTargets(results []Result, counts []int, verdict func(bool) string) []string {
	var out []string
	kubeletStops, residentKeeps := 0, 0
	for _, n := range counts {
		k, okK := find(results, KindExec, SideKubelet, n)
		r, okR := find(results, KindExec, SideProbedResident, n)
		if okK && !keepsUp(k) && kubeletStops == 0 {
			kubeletStops = n
		}
		if okR && keepsUp(r) {
			residentKeeps = n
		}
		if !okK || !okR || k.NodeMsPerRun == 0 || r.Runs == 0 {
			continue
		}
		ratio := r.NodeMsPerRun / k.NodeMsPerRun
		line := fmt.Sprintf("exec, %d pods, resident helpers: node CPU per run %.2f ms, with the kubelet %.1f ms: %.3f× (target ≤ %.1f×) %s",
			n, r.NodeMsPerRun, k.NodeMsPerRun, ratio, ResidentRatio, verdict(ratio <= ResidentRatio))
		if k.ProbingMsPerRun > 0 {
			line += fmt.Sprintf("; above the same pods without probes: %.2f ms against %.1f ms (%.3f×)", r.ProbingMsPerRun, k.ProbingMsPerRun, r.ProbingMsPerRun/k.ProbingMsPerRun)
		}
		out = append(out, line)
	}
	switch {
	case kubeletStops == 0:
		// The kubelet kept up at every count measured: no bound to hold the
		// helper to.
	case residentKeeps == 0:
		out = append(out, fmt.Sprintf("exec, resident helpers: the kubelet stops keeping up at %d pods; the helpers kept up at no count measured (target: ≥ %d pods) **missed**",
			kubeletStops, ResidentKeepUp*kubeletStops))
	default:
		out = append(out, fmt.Sprintf("exec, resident helpers: keep up at %d pods, the kubelet stops at %d: %.1f× (target ≥ %d×) %s",
			residentKeeps, kubeletStops, float64(residentKeeps)/float64(kubeletStops), ResidentKeepUp, verdict(residentKeeps >= ResidentKeepUp*kubeletStops)))
	}
	return out
}

// Plot draws, for HTTP/TCP and exec, the node's CPU (cores) and its CPU per
// probe run against the pod count, one line per side.
func Plot(results []Result, path string) error {
	colors := map[string]color.Color{
		SideProbed:  color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 255},
		SideKubelet: color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 255},
		SideNone:    color.Gray{Y: 0x80},
		SideBare:    color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 255},
		// probed with kept connections: probed's blue, lighter.
		SideProbedKeepAlive: color.RGBA{R: 0x6b, G: 0xae, B: 0xd6, A: 255},
		// probed without the window: probed's blue, darker.
		SideProbedNoWindow: color.RGBA{R: 0x0b, G: 0x3d, B: 0x6b, A: 255},
		// probed through the offload webhook: green.
		SideOffloaded: color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 255},
		// probed with resident exec helpers: purple.
		SideProbedResident: color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 255},
	}
	mk := func(title, ylabel, kind string, y func(Result) (float64, bool)) (*plot.Plot, error) {
		p := plot.New()
		p.Title.Text = title
		p.X.Label.Text = "pods"
		p.Y.Label.Text = ylabel
		p.Y.Min = 0
		p.Legend.Top, p.Legend.Left = true, true
		for _, side := range []string{SideKubelet, SideBare, SideProbedNoWindow, SideProbed, SideProbedKeepAlive, SideOffloaded, SideProbedResident, SideNone} {
			var xys plotter.XYs
			for _, r := range sorted(results, kind) {
				if r.Side != side {
					continue
				}
				if v, ok := y(r); ok {
					xys = append(xys, plotter.XY{X: float64(r.Pods), Y: v})
				}
			}
			if len(xys) == 0 {
				continue
			}
			l, pts, err := plotter.NewLinePoints(xys)
			if err != nil {
				return nil, err
			}
			l.Color, pts.Color = colors[side], colors[side]
			name := side
			if side == SideNone {
				name = "no probes"
				l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			}
			p.Add(l, pts)
			p.Legend.Add(name, l, pts)
		}
		return p, nil
	}
	cores := func(r Result) (float64, bool) { return r.CPU.Node / r.WindowSeconds, true }
	perRun := func(r Result) (float64, bool) { return r.NodeMsPerRun, r.Side != SideNone && r.Runs > 0 }
	var plots []*plot.Plot
	for _, spec := range []struct {
		title, ylabel, kind string
		y                   func(Result) (float64, bool)
	}{
		{"HTTP/TCP: node CPU", "cores", KindHTTP, cores},
		{"HTTP/TCP: node CPU per probe run", "ms", KindHTTP, perRun},
		{"exec: node CPU", "cores", KindExec, cores},
		{"exec: node CPU per probe run", "ms", KindExec, perRun},
	} {
		p, err := mk(spec.title, spec.ylabel, spec.kind, spec.y)
		if err != nil {
			return err
		}
		plots = append(plots, p)
	}
	img := vgimg.New(vg.Points(900), vg.Points(640))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 2, PadX: vg.Millimeter * 6, PadY: vg.Millimeter * 6, PadTop: vg.Millimeter * 4,
		PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4}
	grid := [][]*plot.Plot{{plots[0], plots[1]}, {plots[2], plots[3]}}
	canvases := plot.Align(grid, tiles, dc)
	for i := range grid {
		for j, p := range grid[i] {
			p.Draw(canvases[i][j])
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = vgimg.PngCanvas{Canvas: img}.WriteTo(f)
	return err
}

// Header is the first lines of the section: how it was measured.
func Header(cmdline, machine string, results []Result) string {
	when := ""
	if len(results) > 0 {
		first, last := results[0].Time, results[len(results)-1].Time
		when = fmt.Sprintf(", %s – %s", first.Format("2006-01-02 15:04"), last.Format("15:04 UTC"))
	}
	return fmt.Sprintf("Measured with `%s`%s.  \nMachine: %s.  \n", strings.TrimSpace(cmdline), when, machine)
}
