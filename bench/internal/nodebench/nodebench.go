// Package nodebench holds what the real node's density benchmark
// (bench/node) measures and how it is reported: the CPU of the
// node's processes from /proc (the kubelet, containerd, its shims with the
// runc processes they reaped, the pods' own processes, probed, and apart
// from them the node's control plane), the runc execs in flight, one JSON
// line per run (Result), and the table, plot and targets of
// docs/benchmarks.md "The real node" (Render, Plot, Targets).
package nodebench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/probed/probed/bench/internal/lateness"
)

// The kinds of probe a run measures.
const (
	// KindHTTP: per pod an HTTP readiness probe and a TCP liveness probe,
	// both period 1 s: 2 probes a second a pod.
	KindHTTP = "http"
	// KindExec: per pod an exec readiness probe (true), period 1 s,
	// through the runtime (runc exec).
	KindExec = "exec"
)

// The sides of a run.
const (
	// SideKubelet: the probes are the containers' spec probes: the kubelet
	// runs them.
	SideKubelet = "kubelet"
	// SideProbed: the same probes in the probed.io/probes annotation, no
	// spec probe: probed runs them, and writes the readiness gate the pods
	// carry.
	SideProbed = "probed"
	// SideNone: the same pods without any probe (probed not running): the
	// node's cost of the pods themselves.
	SideNone = "none"
	// SideProbedKeepAlive: SideProbed with --http-keep-alive (each HTTP
	// probe keeps its connection between runs).
	SideProbedKeepAlive = "probed-keepalive"
	// SideProbedNoWindow: SideProbed with --scheduler-coalesce=0 (each run
	// wakes at its own tick): the before of coalesced wake-ups.
	SideProbedNoWindow = "probed-nowindow"
	// SideBare: the same probes run by the bare prober (bench/internal/bare,
	// cmd/bareprober): a goroutine and a ticker per probe, a plain GET with
	// keep-alives off, a plain dial and close — the floor of a prober with
	// the kubelet's model. It writes no readiness gate.
	SideBare = "bare"
	// SideOffloaded: the kubelet side's pods, spec probes and all (unchanged
	// manifests), created in a namespace that opts in to the offload
	// webhook (`probed webhook`): the webhook moves the probes into the
	// pods' probed.io/offloaded record and adds the gate, and probed runs
	// them (--liveness-action=restart with the runtime, so the liveness
	// probe moves too). The webhook acts once per pod creation, outside
	// the window.
	SideOffloaded = "offloaded"
	// SideProbedResident: exec runs only: SideProbed with --exec-mode
	// resident (one resident helper per container runs each probe's
	// command: no runc exec per run; docs/cluster.md "The resident exec
	// helper"). The helper's processes are the pods' (Node.classify).
	SideProbedResident = "probed-resident"
)

// Sides lists every side of an HTTP/TCP run, in the order they run on the
// same pods (the kubelet's and the offloaded on new pods after them).
var Sides = []string{SideProbedNoWindow, SideProbed, SideProbedKeepAlive, SideBare, SideKubelet, SideOffloaded}

// ExecSides lists every side of an exec run, in the order they run: probed
// through ExecSync and through resident helpers on the same pods, then the
// kubelet on new pods.
var ExecSides = []string{SideProbed, SideProbedResident, SideKubelet}

// IsProber reports whether side's prober is a process of its own whose CPU
// is the Probed part (probed, with or without its window, keep-alive, resident helpers
// or the offload webhook, or the bare prober).
func IsProber(side string) bool {
	return side == SideProbed || side == SideProbedNoWindow || side == SideProbedKeepAlive || side == SideBare || side == SideOffloaded || side == SideProbedResident
}

// CPUSeconds is the CPU time of each part of the node in a run's window.
type CPUSeconds struct {
	Kubelet    float64 `json:"kubelet"`
	Containerd float64 `json:"containerd"`
	Shims      float64 `json:"shims"`   // with runc and exec'd processes they reaped
	Pods       float64 `json:"pods"`    // the containers' own processes
	Probed     float64 `json:"probed"`  // the prober's process: probed, or the bare prober (SideBare)
	Node       float64 `json:"node"`    // the sum of the above
	Control    float64 `json:"control"` // the node's kube-apiserver and etcd, not in Node
	// Harness is the benchmark's own process (sampling, the targets'
	// statistics), not in Node: the other load on the node's 2 cores.
	Harness float64 `json:"harness"`
}

// Seconds converts a CPU difference.
func Seconds(c CPU) CPUSeconds {
	s := func(d time.Duration) float64 { return d.Seconds() }
	return CPUSeconds{Kubelet: s(c.Kubelet), Containerd: s(c.Containerd), Shims: s(c.Shims), Pods: s(c.Pods),
		Probed: s(c.Probed), Node: s(c.Node()), Control: s(c.Control)}
}

// Result is one run: one kind of probe, one side, N pods, one window.
type Result struct {
	Time          time.Time `json:"time"`
	Kind          string    `json:"kind"`
	Side          string    `json:"side"`
	Pods          int       `json:"pods"`
	Ready         int       `json:"ready"` // pods Ready (running, for SideNone) when the window began
	ProbesPerPod  int       `json:"probes_per_pod"`
	PeriodSeconds int       `json:"period_seconds"`
	WindowSeconds float64   `json:"window_seconds"`
	// Runs is the probes run in the window (the targets' count of
	// arrivals for HTTP and TCP, prober_probe_total of the prober for exec).
	Runs int64 `json:"runs"`
	// Failed is the runs the prober counted as failed or unknown
	// (prober_probe_total of the pods' namespace): every target is healthy,
	// so each is a false verdict.
	Failed     int64      `json:"failed"`
	RunsPerSec float64    `json:"runs_per_sec"`
	Expected   float64    `json:"expected_per_sec"` // pods × probes per pod / period
	CPU        CPUSeconds `json:"cpu"`
	// NodeMsPerRun is the whole node's CPU per probe run (ms): CPU.Node over
	// Runs. ProbingMsPerRun is the same above the node's cost with the same
	// pods and no probe (SideNone at the same pod count; 0 when none ran).
	NodeMsPerRun    float64 `json:"node_ms_per_run"`
	ProbingMsPerRun float64 `json:"probing_ms_per_run,omitempty"`
	// Lateness of the HTTP and TCP probes at the targets (each stream
	// against its most punctual arrival); nil for exec.
	Lateness *lateness.Stats `json:"lateness,omitempty"`
	// ExecsInFlightMax is the most runc execs of the node seen at once
	// (sampled every 20 ms); ExecLane probed's exec lane (0: kubelet).
	ExecsInFlightMax int `json:"execs_in_flight_max,omitempty"`
	// ExecCalls is the CRI ExecSync calls the prober made in the window
	// (its own metrics): more than Runs when runs were retried.
	ExecCalls int64     `json:"exec_calls,omitempty"`
	ExecLane  int       `json:"exec_lane,omitempty"`
	Load      []float64 `json:"load"` // 1, 5, 15 min load average at the end
	Note      string    `json:"note,omitempty"`
}

// Finish fills the derived figures: per second, per run, and
// ProbingMsPerRun from baseline (nil: none).
func (r *Result) Finish(baseline *Result) {
	if r.WindowSeconds > 0 {
		r.RunsPerSec = float64(r.Runs) / r.WindowSeconds
	}
	if r.Runs > 0 {
		r.NodeMsPerRun = r.CPU.Node * 1000 / float64(r.Runs)
		if baseline != nil && baseline.WindowSeconds > 0 {
			extra := r.CPU.Node - baseline.CPU.Node*r.WindowSeconds/baseline.WindowSeconds
			r.ProbingMsPerRun = extra * 1000 / float64(r.Runs)
		}
	}
}

// Append writes r as one JSON line to path.
func Append(path string, r Result) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	line, err := json.Marshal(r)
	if err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Read reads the JSON lines of path.
func Read(path string) ([]Result, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Result
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var r Result
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, r)
	}
	return out, sc.Err()
}
