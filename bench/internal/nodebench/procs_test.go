package nodebench

import (
	"strings"
	"testing"
	"time"
)

// The resident exec helper's shells are a shim's grandchildren (the shim,
// then the helper's sh, then its reader and runner), and a run's processes
// are reaped by the runner: classify counts them as the pods' with what they
// reaped, where a children-only count missed the helper's work.
func TestClassifyCountsTheShimsDescendants(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	n := Node{Kubelet: 10, Containerd: 11, Probed: 12, APIServer: 13, Etcd: 14}
	procs := []proc{
		{pid: 1, ppid: 0, self: ms(1000)},              // init: not the node's
		{pid: 10, ppid: 1, self: ms(100), kids: ms(7)}, // kubelet
		{pid: 11, ppid: 1, self: ms(50)},               // containerd
		{pid: 12, ppid: 1, self: ms(30), kids: ms(3)},  // probed
		{pid: 13, ppid: 1, self: ms(200)},              // kube-apiserver
		{pid: 14, ppid: 1, self: ms(90)},               // etcd
		{pid: 20, ppid: 1, self: ms(5), kids: ms(40)},  // a shim, with the runc execs it reaped
		{pid: 21, ppid: 20, self: ms(1)},               // pause
		{pid: 22, ppid: 20, self: ms(8)},               // the probe target
		{pid: 23, ppid: 20, self: ms(2), kids: ms(1)},  // a resident helper's sh
		{pid: 24, ppid: 23, self: ms(3)},               // its reader
		{pid: 25, ppid: 23, self: ms(4), kids: ms(60)}, // its runner, with the runs it reaped
		{pid: 26, ppid: 25, self: ms(2)},               // a run under way
		{pid: 30, ppid: 1, self: ms(500)},              // another engineer's process
		{pid: 31, ppid: 30, self: ms(70)},              // and its child
	}
	got := n.classify(procs, map[int]bool{20: true})
	want := CPU{Kubelet: ms(107), Containerd: ms(50), Probed: ms(33), Control: ms(290), Shims: ms(45),
		Pods: ms(1 + 8 + 3 + 3 + 64 + 2)}
	if got != want {
		t.Fatalf("classify = %+v, want %+v", got, want)
	}
	if got.Node() != ms(107+50+33+45+81) {
		t.Fatalf("Node() = %v", got.Node())
	}
}

// A parent chain that loops (read while PIDs were reused) ends; nothing in
// it is a shim's.
func TestClassifyEndsOnALoop(t *testing.T) {
	procs := []proc{{pid: 40, ppid: 41, self: time.Second}, {pid: 41, ppid: 40, self: time.Second}}
	if got := (Node{}).classify(procs, map[int]bool{}); got != (CPU{}) {
		t.Fatalf("classify = %+v, want nothing", got)
	}
}

// The resident helper's targets (issue 28): its node CPU per run against
// the kubelet's at each exec pod count, and the most pods it keeps up at
// against three times the fewest where the kubelet stops.
func TestResidentTargets(t *testing.T) {
	row := func(side string, pods int, runsPerSec, msPerRun float64, failed int64) Result {
		return Result{Kind: KindExec, Side: side, Pods: pods, Ready: pods, PeriodSeconds: 1, Expected: float64(pods),
			RunsPerSec: runsPerSec, Runs: int64(runsPerSec * 60), NodeMsPerRun: msPerRun, Failed: failed}
	}
	results := []Result{
		row(SideKubelet, 10, 10, 100, 0), row(SideProbedResident, 10, 10, 9, 0),
		row(SideKubelet, 25, 13, 140, 15), row(SideProbedResident, 25, 25, 24, 0),
		row(SideProbedResident, 75, 75, 25, 0), row(SideProbedResident, 100, 80, 25, 0),
	}
	got := strings.Join(Targets(results), "\n")
	for _, want := range []string{
		"exec, 10 pods, resident helpers: node CPU per run 9.00 ms, with the kubelet 100.0 ms: 0.090× (target ≤ 0.1×) **met**",
		"exec, 25 pods, resident helpers: node CPU per run 24.00 ms, with the kubelet 140.0 ms: 0.171× (target ≤ 0.1×) **missed**",
		"exec, resident helpers: keep up at 75 pods, the kubelet stops at 25: 3.0× (target ≥ 3×) **met**",
		"exec, probed-resident: keeps up to 75 pods; stops keeping up at 100",
		"exec, kubelet: keeps up to 10 pods; stops keeping up at 25",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("targets lack %q:\n%s", want, got)
		}
	}
	// Kept up only to 25, where the kubelet stopped: missed.
	got = strings.Join(Targets(results[:4]), "\n")
	if want := "keep up at 25 pods, the kubelet stops at 25: 1.0× (target ≥ 3×) **missed**"; !strings.Contains(got, want) {
		t.Errorf("targets lack %q:\n%s", want, got)
	}
}
