package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/probed/probed/runtime"
)

// spec is one run of a suite: the arguments of "probebench run".
type spec []string

func instant(impl string, pods int, extra ...string) spec {
	return append(spec{"-impl", impl, "-mode", modeInstant, "-pods", fmt.Sprint(pods)}, extra...)
}

// suites lists the runs of each suite. Every run is its own process.
func suites(name string) ([]spec, error) {
	var out []spec
	both := func(f func(impl string) spec) {
		out = append(out, f("probed"), f("kubelet"))
	}
	// baselines: each implementation at rest (-pods 0), so that the
	// flat-cost line can show the fixed cost of the process beside the raw
	// CPU per probe.
	baselines := func(window string) {
		both(func(impl string) spec {
			return instant(impl, 0, "-warmup", "2s", "-window", window, "-drain-wait", "2s")
		})
	}
	switch name {
	case "quick":
		// 2k, 10k and 40k probes/s, instant handler, both implementations;
		// then 10k pods added at once to a manager that has run for more
		// than a period. Budget: under 5 minutes.
		for _, pods := range []int{1000, 5000, 20000} {
			both(func(impl string) spec {
				return instant(impl, pods, "-warmup", "4s", "-window", "10s", "-drain-wait", "5s")
			})
		}
		both(func(impl string) spec {
			return instant(impl, 10000, "-label", "burst", "-settle", "1500ms", "-warmup", "2s", "-window", "5s", "-drain-wait", "5s")
		})
		baselines("10s")
	case "full":
		baselines("20s")
		for _, pods := range []int{1000, 5000, 10000, 20000, 50000} {
			both(func(impl string) spec { return instant(impl, pods, "-window", "20s") })
		}
		both(func(impl string) spec {
			return instant(impl, 10000, "-label", "burst", "-settle", "1500ms", "-warmup", "3s", "-window", "10s")
		})
		// Real TCP probes, one loopback address per pod.
		for _, pods := range []int{1000, 10000} {
			both(func(impl string) spec {
				return spec{"-impl", impl, "-mode", modeTCP, "-pods", fmt.Sprint(pods), "-window", "20s"}
			})
		}
		// TCP saturation: 50k probes/s asked for; against a bare
		// dial-and-close loop with probed's network pool size as its
		// concurrency (the same number of goroutines dialing).
		both(func(impl string) spec {
			return spec{"-impl", impl, "-mode", modeTCP, "-pods", "25000", "-label", "saturation", "-window", "20s"}
		})
		out = append(out, spec{"-impl", "dialloop", "-mode", modeTCP, "-pods", "25000", "-label", "saturation", "-concurrency", fmt.Sprint(runtime.DefaultPoolSize), "-warmup", "3s", "-window", "20s"})
		// The one-address case: 2,000 TCP probes/s to 127.0.0.1.
		both(func(impl string) spec {
			return spec{"-impl", impl, "-mode", modeTCP, "-pods", "1000", "-one-addr", "127.0.0.1", "-label", "one-address", "-window", "30s"}
		})
		// Real HTTP probes, then the same with 10% of targets hung.
		for _, pods := range []int{1000, 5000} {
			both(func(impl string) spec {
				return spec{"-impl", impl, "-mode", modeHTTP, "-pods", fmt.Sprint(pods), "-window", "20s"}
			})
		}
		// 10% hung at the rate of the first HTTP run (2,000 probes/s),
		// which leaves CPU to spare on 2 cores, so that the lateness of
		// the healthy probes shows what the hung ones cost them and not
		// what an overloaded node costs everyone.
		both(func(impl string) spec {
			return spec{"-impl", impl, "-mode", modeHung, "-pods", "1000", "-window", "20s"}
		})
		// probed alone: 500k pods, 1M probes, period 60 s (the kubelet
		// cannot start 1M goroutines with tickers here), then period 10 s
		// (100k probes/s).
		out = append(out, instant("probed", 500000, "-period", "60", "-warmup", "70s", "-window", "180s", "-drain-wait", "120s"))
		out = append(out, instant("probed", 500000, "-period", "10", "-warmup", "15s", "-window", "30s", "-drain-wait", "120s"))
	case subsecSuite:
		// Sub-second periods (probed only: the kubelet has none), the
		// probes declared in the probed.io/probes annotation with
		// periodSeconds 1 and periodMilliseconds -900: 10,000 instant
		// probes at 100 ms (100k probes/s), and 1,000 real TCP probes at
		// 100 ms (10k/s), one loopback address per pod.
		out = append(out,
			instant("probed", 5000, "-period-ms", "100", "-warmup", "3s", "-window", "20s"),
			spec{"-impl", "probed", "-mode", modeTCP, "-pods", "500", "-period-ms", "100", "-warmup", "3s", "-window", "20s"})
	case "density":
		// The density targets: 2k–100k instant probes/s side by side, 1M
		// probes at period 10 s (100k/s, probed alone), TCP saturation
		// against the bare dial loop, HTTP saturation against the bare GET
		// loop; first each implementation at rest (the baseline of the
		// flat-cost line). About 14 minutes.
		baselines("20s")
		for _, pods := range []int{1000, 5000, 10000, 20000, 50000} {
			both(func(impl string) spec { return instant(impl, pods, "-window", "20s") })
		}
		out = append(out, instant("probed", 500000, "-period", "10", "-warmup", "15s", "-window", "30s", "-drain-wait", "120s"))
		out = append(out, spec{"-impl", "probed", "-mode", modeTCP, "-pods", "25000", "-label", "saturation", "-window", "20s"})
		out = append(out, spec{"-impl", "dialloop", "-mode", modeTCP, "-pods", "25000", "-label", "saturation", "-concurrency", fmt.Sprint(runtime.DefaultPoolSize), "-warmup", "3s", "-window", "20s"})
		// HTTP saturation: the same 50k probes/s asked of real HTTP
		// probes, against a bare GET loop (floor.go) at the same
		// concurrency and against the same targets.
		out = append(out, spec{"-impl", "probed", "-mode", modeHTTP, "-pods", "25000", "-label", "saturation", "-window", "20s"})
		out = append(out, spec{"-impl", implGetLoop, "-mode", modeHTTP, "-pods", "25000", "-label", "saturation", "-concurrency", fmt.Sprint(runtime.DefaultPoolSize), "-warmup", "3s", "-window", "20s"})
	default:
		return nil, fmt.Errorf("unknown suite %q (quick, full, density, %s)", name, subsecSuite)
	}
	return out, nil
}

func suiteMain(args []string) error {
	fs := flag.NewFlagSet("suite", flag.ExitOnError)
	name := fs.String("suite", "quick", "quick, full, density or "+subsecSuite)
	outDir := fs.String("out", "out", "directory for the JSON lines, table and plot")
	doc := fs.String("doc", "", "markdown file whose generated section to rewrite (e.g. ../docs/benchmarks.md)")
	only := fs.String("only", "", "run only the specs whose arguments contain this text")
	runTimeout := fs.Duration("run-timeout", 15*time.Minute, "kill a run that takes longer")
	_ = fs.Parse(args)

	specs, err := suites(*name)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*outDir, 0o755); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	jsonl := filepath.Join(*outDir, *name+".jsonl")
	f, err := os.Create(jsonl)
	if err != nil {
		return err
	}
	defer f.Close()
	start := time.Now()
	var results []Result
	for i, sp := range specs {
		if *only != "" && !strings.Contains(strings.Join(sp, " "), *only) {
			continue
		}
		fmt.Fprintf(os.Stderr, "[%d/%d %s] probebench run %s\n", i+1, len(specs), time.Since(start).Round(time.Second), strings.Join(sp, " "))
		cmd := exec.Command(self, append([]string{"run"}, sp...)...)
		cmd.Stderr = os.Stderr
		var stdout bytes.Buffer
		cmd.Stdout = &stdout
		if err := cmd.Start(); err != nil {
			fmt.Fprintf(os.Stderr, "  run failed: %v\n", err)
			continue
		}
		timer := time.AfterFunc(*runTimeout, func() {
			fmt.Fprintf(os.Stderr, "  run exceeded %s: killed\n", *runTimeout)
			_ = cmd.Process.Kill() // its target server exits on the closed pipe
		})
		err := cmd.Wait()
		timer.Stop()
		if err != nil {
			fmt.Fprintf(os.Stderr, "  run failed: %v\n", err)
			continue
		}
		line := lastJSONLine(stdout.Bytes())
		if line == nil {
			fmt.Fprintln(os.Stderr, "  run printed no JSON line")
			continue
		}
		var r Result
		if err := json.Unmarshal(line, &r); err != nil {
			fmt.Fprintf(os.Stderr, "  bad JSON line: %v\n", err)
			continue
		}
		results = append(results, r)
		fmt.Println(string(line))
		fmt.Fprintln(f, string(line))
	}
	fmt.Fprintf(os.Stderr, "suite %s: %d runs in %s\n", *name, len(results), time.Since(start).Round(time.Second))
	return writeReport(results, *name, suiteCommand(*name), *outDir, *doc)
}

func lastJSONLine(b []byte) []byte {
	var last []byte
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<16), 1<<22)
	for sc.Scan() {
		if l := bytes.TrimSpace(sc.Bytes()); len(l) > 0 && l[0] == '{' {
			last = append([]byte(nil), l...)
		}
	}
	return last
}

func reportMain(args []string) error {
	fs := flag.NewFlagSet("report", flag.ExitOnError)
	in := fs.String("in", "out/quick.jsonl", "JSON lines of a suite")
	name := fs.String("suite", "quick", "suite name for the section and file names")
	outDir := fs.String("out", "out", "directory for the table and plot")
	doc := fs.String("doc", "", "markdown file whose generated section to rewrite")
	cmdline := fs.String("cmd", "", "the command that produced the results (default: make bench / make bench-full)")
	_ = fs.Parse(args)
	b, err := os.ReadFile(*in)
	if err != nil {
		return err
	}
	var results []Result
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<16), 1<<22)
	for sc.Scan() {
		var r Result
		if l := bytes.TrimSpace(sc.Bytes()); len(l) > 0 && json.Unmarshal(l, &r) == nil {
			results = append(results, r)
		}
	}
	if *cmdline == "" {
		*cmdline = suiteCommand(*name)
	}
	return writeReport(results, *name, *cmdline, *outDir, *doc)
}

// suiteCommand is the make target that runs a suite.
func suiteCommand(name string) string {
	switch name {
	case "full":
		return "make bench-full"
	case "density":
		return "make bench-density"
	case subsecSuite:
		return "make bench-subsec"
	}
	return "make bench"
}
