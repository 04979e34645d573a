// Package cri measures what an exec probe costs through the container
// runtime (issues 19 and 21): containers of a real containerd (one pod
// sandbox each, test/cri/env.sh), one exec probe each (`true`, period 1 s),
// at 10, 50 and 100 containers — 10, 50 and 100 exec probes a second —
// three ways:
//
//   - kubelet: the kubelet's model, one goroutine per probe ticking every
//     second and calling CRI ExecSync directly (no probed);
//   - execsync: probed's manager, the exec lane and agent/kube/cri's
//     ExecSync runner (--exec-mode execsync);
//   - resident: probed's manager, the exec lane and agent/kube/resident's
//     runner, one resident helper per container (--exec-mode resident).
//
// For each it reports the runs per second achieved, the CPU per exec run of
// the probing process (self), of containerd, of the shims with the runc
// processes and commands they ran and reaped (their children's CPU), of
// the resident helpers in the containers, and in all; the lateness of
// the runs against each probe's own grid (p99); the runs whose verdict was
// not Success (any is a failure of the benchmark: `true` succeeds); and for
// resident the probing process's heap and goroutines per helper.
//
//	eval "$(test/cri/env.sh start /tmp/probed-cri)"
//	cd bench && go test -run '^$' -bench ExecProbes -benchtime 1x -timeout 60m ./cri
//
// PROBED_BENCH_CRI_WINDOW sets the measured window (default 30s),
// PROBED_BENCH_CRI_RATES the numbers of containers (default "10,50,100")
// and PROBED_BENCH_CRI_MODES the ways (default "kubelet,execsync,resident").
// PROBED_BENCH_CRI_PROFILE=DIR writes, per way and number, a CPU profile
// of the probing process over the window and, for resident, a heap
// profile with the helpers running.
// It skips without PROBED_TEST_CRI_ENDPOINT. docs/benchmarks.md "Exec
// probes through the container runtime" has the figures.
package cri

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	goruntime "runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/probed/probed/agent/kube/cri"
	"github.com/probed/probed/agent/kube/resident"
	"github.com/probed/probed/bench/internal/lateness"
	"github.com/probed/probed/internal/critest"
	"github.com/probed/probed/manager"
	"github.com/probed/probed/manager/results"
	"github.com/probed/probed/plugins/exec"
	"github.com/probed/probed/runtime"
)

// settle is how long each way runs before the window: probed spreads first
// runs over the first period, and the resident helpers start on their
// containers' first runs.
const settle = 5 * time.Second

func BenchmarkExecProbes(b *testing.B) {
	ep := critest.Endpoint(b)
	window := 30 * time.Second
	if s := os.Getenv("PROBED_BENCH_CRI_WINDOW"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			b.Fatal(err)
		}
		window = d
	}
	rates := []int{10, 50, 100}
	if s := os.Getenv("PROBED_BENCH_CRI_RATES"); s != "" {
		rates = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				b.Fatal(err)
			}
			rates = append(rates, n)
		}
	}
	modes := []string{"kubelet", "execsync", "resident"}
	if s := os.Getenv("PROBED_BENCH_CRI_MODES"); s != "" {
		modes = strings.Split(s, ",")
	}
	client, err := cri.Connect(context.Background(), cri.Options{Endpoint: ep, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()
	rs := critest.Runtime(b)
	var ids []string
	for i := range slices.Max(rates) {
		// The sandbox of pod-i (UID bench-cri-i, as probed's pods below):
		// probed checks a container's labels against its pod.
		sb := critest.RunPodSandboxFor(b, rs, "bench", fmt.Sprintf("pod-%d", i), fmt.Sprintf("bench-cri-%d", i))
		ids = append(ids, sb.Start(b, critest.Container{Name: "app", Command: []string{"sleep", "2147483647"}}))
	}
	procs := runtimeProcs(b, strings.TrimPrefix(ep, "unix://"))

	for _, rate := range rates {
		for _, mode := range modes {
			b.Run(fmt.Sprintf("containers=%d/%s", rate, mode), func(b *testing.B) {
				for range b.N {
					measure(b, procs, window, rate, fmt.Sprintf("%s-%d", mode, rate), func(rec *recorder) func() {
						switch mode {
						case "kubelet":
							return kubelet(client, ids[:rate], rec)
						case "execsync":
							return probed(b, client, client.Runner(), ids[:rate], rec)
						case "resident":
							return residentProbed(b, client, ids[:rate], rec)
						}
						b.Fatalf("unknown mode %q", mode)
						return nil
					})
				}
			})
		}
	}
}

// recorder counts runs and their verdicts and records their starts for
// lateness; w is the container's index.
type recorder struct {
	late      *lateness.Recorder
	ok, other atomic.Int64
	index     map[string]int // status ID -> w
	// heap and goroutines per helper, set by the resident way.
	heapPerHelper, goroutinesPerHelper float64
	profile                            string // the profiles' path without suffix; "": none
}

// profilePath is PROBED_BENCH_CRI_PROFILE/name, or "".
func profilePath(b *testing.B, name string) string {
	dir := os.Getenv("PROBED_BENCH_CRI_PROFILE")
	if dir == "" {
		return ""
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	return filepath.Join(dir, name)
}

// cpuProfile profiles this process's CPU into path.cpu.pprof until the
// returned func is called; nothing without a path.
func cpuProfile(b *testing.B, path string) func() {
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path + ".cpu.pprof")
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() { pprof.StopCPUProfile(); _ = f.Close() }
}

// heapProfile writes this process's heap profile to path.heap.pprof.
func heapProfile(b *testing.B, path string) {
	if path == "" {
		return
	}
	f, err := os.Create(path + ".heap.pprof")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	goruntime.GC()
	if err := pprof.WriteHeapProfile(f); err != nil {
		b.Fatal(err)
	}
}

func (r *recorder) run(w int, err error) {
	if err == nil {
		r.ok.Add(1)
	} else {
		r.other.Add(1)
	}
}

// measure starts the load, lets it settle, then measures CPU, runs,
// verdicts and lateness over window.
func measure(b *testing.B, procs *procSet, window time.Duration, n int, name string, start func(*recorder) func()) {
	rec := &recorder{late: lateness.New(n, time.Second), index: map[string]int{}, profile: profilePath(b, name)}
	stop := start(rec)
	time.Sleep(settle)
	perWorker := int(window/time.Second)*2 + 10
	rec.late.StartWindow(perWorker)
	stopProfile := cpuProfile(b, rec.profile)
	n0, bad0, self0, rt0, t0 := rec.ok.Load(), rec.other.Load(), selfCPU(), procs.cpu(b), time.Now()
	time.Sleep(window)
	n1, bad1, self1, rt1, elapsed := rec.ok.Load(), rec.other.Load(), selfCPU(), procs.cpu(b), time.Since(t0)
	stopProfile()
	rec.late.StopWindow()
	stop()
	execs := float64(n1 - n0)
	if execs == 0 {
		b.Fatal("no exec completed in the window")
	}
	per := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / execs }
	st := rec.late.Stats(time.Second, nil)
	b.ReportMetric(execs/elapsed.Seconds(), "execs/s")
	b.ReportMetric(per(self1-self0), "self-cpu-ms/exec")
	b.ReportMetric(per(rt1.containerd-rt0.containerd), "containerd-cpu-ms/exec")
	b.ReportMetric(per(rt1.shims-rt0.shims), "shim+runc-cpu-ms/exec")
	b.ReportMetric(per(rt1.helpers-rt0.helpers), "helper-cpu-ms/exec")
	b.ReportMetric(per(self1-self0+rt1.containerd-rt0.containerd+rt1.shims-rt0.shims+rt1.helpers-rt0.helpers), "total-cpu-ms/exec")
	b.ReportMetric(st.LatenessP99Ms, "lateness-p99-ms")
	b.ReportMetric(float64(st.Missed), "missed-runs")
	b.ReportMetric(float64(bad1-bad0), "not-success")
	if rec.heapPerHelper != 0 {
		b.ReportMetric(rec.heapPerHelper, "heap-kB/helper")
		b.ReportMetric(rec.goroutinesPerHelper, "goroutines/helper")
	}
	if bad1 != bad0 {
		b.Errorf("%d runs were not Success (`true` always succeeds)", bad1-bad0)
	}
}

// kubelet is the kubelet's way: a goroutine per probe with a 1 s ticker
// (spread over the first second, as the kubelet's restart jitter does),
// each tick one ExecSync, skipped while the previous one runs.
func kubelet(c *cri.Client, ids []string, rec *recorder) func() {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w, id := range ids {
		wg.Go(func() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(w) * time.Second / time.Duration(len(ids))):
			}
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				rec.late.Start(w)
				// The kubelet's own call: no check of the container's labels.
				_, _, err := c.ExecSync(ctx, cri.Container{ID: id}, []string{"true"}, 10*time.Second)
				if ctx.Err() != nil {
					return
				}
				rec.run(w, err)
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		})
	}
	return func() { cancel(); wg.Wait() }
}

// countingRunner records each run of the runner it wraps.
type countingRunner struct {
	exec.Runner
	rec *recorder
}

func (r countingRunner) RunInContainer(ctx context.Context, id string, cmd []string, timeout time.Duration) ([]byte, error) {
	w := r.rec.index[id]
	r.rec.late.Start(w)
	out, err := r.Runner.RunInContainer(ctx, id, cmd, timeout)
	if ctx.Err() == nil {
		r.rec.run(w, err)
	}
	return out, err
}

// statuses is the manager's status provider: every pod running, its
// container started, with the container's ID.
type statuses map[types.UID]v1.PodStatus

func (s statuses) GetPodStatus(uid types.UID) (v1.PodStatus, bool) { st, ok := s[uid]; return st, ok }

// probed runs one pod per container, each with an exec readiness probe
// (true, period 1 s, timeout 10 s) in it, through the manager, the exec
// lane and runner.
func probed(b *testing.B, c *cri.Client, runner exec.Runner, ids []string, rec *recorder) func() {
	logger := slog.New(slog.DiscardHandler)
	rt, err := runtime.New(runtime.Options{Logger: logger})
	if err != nil {
		b.Fatal(err)
	}
	if err := rt.Register(runtime.KindExec, exec.New(countingRunner{Runner: runner, rec: rec})); err != nil {
		b.Fatal(err)
	}
	ready := results.NewManager()
	stopDrain := make(chan struct{})
	go func() {
		for {
			select {
			case <-ready.Updates():
			case <-stopDrain:
				return
			}
		}
	}()
	st := statuses{}
	mgr, err := manager.New(manager.Options{Status: st, Readiness: ready, Runtime: rt, Logger: logger, Recorder: &record.FakeRecorder{}})
	if err != nil {
		b.Fatal(err)
	}
	started, now := true, metav1.Now()
	var pods []*v1.Pod
	for i, id := range ids {
		uid := types.UID(fmt.Sprintf("bench-cri-%d", i))
		statusID := c.RuntimeName() + "://" + id
		rec.index[statusID] = i
		pod := &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: fmt.Sprintf("pod-%d", i), UID: uid},
			Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app", ReadinessProbe: &v1.Probe{
				ProbeHandler:   v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}},
				PeriodSeconds:  1,
				TimeoutSeconds: 10, SuccessThreshold: 1, FailureThreshold: 3,
			}}}},
		}
		st[uid] = v1.PodStatus{Phase: v1.PodRunning, PodIP: "127.0.0.1", ContainerStatuses: []v1.ContainerStatus{{
			Name: "app", ContainerID: statusID, Started: &started,
			State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: now}},
		}}}
		pods = append(pods, pod)
	}
	for _, p := range pods {
		mgr.AddPod(context.Background(), p)
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = mgr.Close(ctx)
		close(stopDrain)
	}
}

// residentProbed is probed with the resident runner; after the window it
// measures the heap and goroutines the helpers hold in the probing process
// (with them, then after the runner's Close), and closes it.
func residentProbed(b *testing.B, c *cri.Client, ids []string, rec *recorder) func() {
	r, err := resident.New(resident.Options{Runtime: c, ExecSync: c.Runner(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	stop := probed(b, c, r, ids, rec)
	return func() {
		stop()
		heapProfile(b, rec.profile)
		heap0, g0 := heapAndGoroutines()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = r.Close(ctx)
		heap1, g1 := heapAndGoroutines()
		rec.heapPerHelper = float64(heap0-heap1) / 1024 / float64(len(ids))
		rec.goroutinesPerHelper = float64(g0-g1) / float64(len(ids))
	}
}

func heapAndGoroutines() (uint64, int) {
	goruntime.GC()
	var ms goruntime.MemStats
	goruntime.ReadMemStats(&ms)
	return ms.HeapAlloc, goruntime.NumGoroutine()
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procSet finds the runtime's processes: containerd of the socket's
// directory (test/cri/env.sh's), the shims it started and the resident
// helpers under them.
type procSet struct {
	socket     string
	containerd int
}

type runtimeCPU struct{ containerd, shims, helpers time.Duration }

func runtimeProcs(b *testing.B, socket string) *procSet {
	config := filepath.Join(filepath.Dir(socket), "config.toml")
	for _, pid := range pids() {
		if strings.Contains(cmdline(pid), "containerd --config "+config) {
			return &procSet{socket: socket, containerd: pid}
		}
	}
	b.Skipf("no containerd process with --config %s (a runtime test/cri/env.sh started is needed)", config)
	return nil
}

// cpu returns containerd's CPU, that of every shim of it with their reaped
// children (runc, and the commands of ExecSync), and that of the resident
// helpers' processes under those shims with their reaped children (the
// commands they ran), user and system.
func (p *procSet) cpu(b *testing.B) runtimeCPU {
	var out runtimeCPU
	out.containerd = procCPU(p.containerd)
	parent := map[int]int{}
	shims := map[int]bool{}
	all := pids()
	for _, pid := range all {
		parent[pid] = ppid(pid)
		if c := cmdline(pid); strings.Contains(c, "containerd-shim") && strings.Contains(c, "-address "+p.socket) {
			shims[pid] = true
			out.shims += procCPU(pid)
		}
	}
	for _, pid := range all {
		if !strings.Contains(cmdline(pid), resident.Name) {
			continue
		}
		for a := parent[pid]; a > 1; a = parent[a] {
			if shims[a] {
				out.helpers += procCPU(pid)
				break
			}
		}
	}
	return out
}

func pids() []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, n)
		}
	}
	return out
}

func cmdline(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.ReplaceAll(string(b), "\x00", " ")
}

// statFields are the fields of /proc/<pid>/stat after pid and comm
// (field 3, the state, first); nil when it is gone.
func statFields(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
}

func ppid(pid int) int {
	f := statFields(pid)
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times (100 on
// Linux).
const clockTicks = 100

// procCPU is utime+stime+cutime+cstime of pid.
func procCPU(pid int) time.Duration {
	f := statFields(pid)
	if len(f) < 15 {
		return 0
	}
	var ticks int64
	for _, i := range []int{11, 12, 13, 14} { // fields 14-17 of stat
		n, _ := strconv.ParseInt(f[i], 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks
}
