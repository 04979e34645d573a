// Package cri measures what an exec probe costs through the container
// runtime (issue 19): CPU per exec probe run by probed's manager through
// CRI ExecSync (agent/kube/cri's Runner in the exec lane), against the
// floor — a loop calling ExecSync directly at the same rate, with the same
// bound on calls in flight (the exec lane's 64) — at 10, 50 and 100 exec
// probes a second, all in one container of a real containerd
// (test/cri/env.sh). For each it reports the rate achieved and the CPU per
// exec of the probing process, of containerd, and of the container's shim
// with the runc processes it ran and reaped (runc's CPU is its parent
// shim's children time), from getrusage and /proc/<pid>/stat.
//
//	eval "$(test/cri/env.sh start /tmp/probed-cri)"
//	cd bench && go test -run '^$' -bench ExecProbes -benchtime 1x ./cri
//
// PROBED_BENCH_CRI_WINDOW sets the measured window (default 20s) and
// PROBED_BENCH_CRI_RATES the rates (default "10,50,100"). It skips without
// PROBED_TEST_CRI_ENDPOINT. docs/benchmarks.md "Exec probes through the
// container runtime" has the figures.
package cri

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
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
	"github.com/probed/probed/internal/critest"
	"github.com/probed/probed/manager"
	"github.com/probed/probed/manager/results"
	"github.com/probed/probed/plugins/exec"
	"github.com/probed/probed/runtime"
)

// execLane is the exec lane's default size (runtime.Options.ExecPoolSize):
// the floor keeps as many calls in flight at most.
const execLane = 64

func BenchmarkExecProbes(b *testing.B) {
	ep := critest.Endpoint(b)
	window := 20 * time.Second
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
	client, err := cri.Connect(context.Background(), cri.Options{Endpoint: ep, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()
	rs := critest.Runtime(b)
	id := critest.RunPodSandbox(b, rs).Start(b, critest.Container{Name: "app", Command: []string{"sleep", "2147483647"}})
	procs := runtimeProcs(b, strings.TrimPrefix(ep, "unix://"))

	for _, rate := range rates {
		b.Run(fmt.Sprintf("rate=%d/floor", rate), func(b *testing.B) {
			measure(b, procs, window, func(ctx context.Context, count *atomic.Int64) func() {
				return floor(ctx, client, id, rate, count)
			})
		})
		b.Run(fmt.Sprintf("rate=%d/probed", rate), func(b *testing.B) {
			measure(b, procs, window, func(ctx context.Context, count *atomic.Int64) func() {
				return probed(b, client, id, rate, count)
			})
		})
	}
}

// measure starts the load, lets it settle for 2 s (probed's first runs are
// spread over the first period), then measures CPU and completed execs
// over window.
func measure(b *testing.B, procs *procSet, window time.Duration, start func(context.Context, *atomic.Int64) func()) {
	for range b.N {
		var count atomic.Int64
		ctx, cancel := context.WithCancel(context.Background())
		stop := start(ctx, &count)
		time.Sleep(2 * time.Second)
		n0, self0, rt0, t0 := count.Load(), selfCPU(), procs.cpu(b), time.Now()
		time.Sleep(window)
		n1, self1, rt1, elapsed := count.Load(), selfCPU(), procs.cpu(b), time.Since(t0)
		cancel()
		stop()
		execs := float64(n1 - n0)
		if execs == 0 {
			b.Fatal("no exec completed in the window")
		}
		per := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / execs }
		b.ReportMetric(execs/elapsed.Seconds(), "execs/s")
		b.ReportMetric(per(self1-self0), "self-cpu-ms/exec")
		b.ReportMetric(per(rt1.containerd-rt0.containerd), "containerd-cpu-ms/exec")
		b.ReportMetric(per(rt1.shims-rt0.shims), "shim+runc-cpu-ms/exec")
		b.ReportMetric(per(self1-self0+rt1.containerd-rt0.containerd+rt1.shims-rt0.shims), "total-cpu-ms/exec")
	}
}

// floor calls ExecSync(true) at rate, at most execLane calls in flight (a
// tick that finds them all busy is dropped, as the rate is then out of
// reach).
func floor(ctx context.Context, c *cri.Client, id string, rate int, count *atomic.Int64) func() {
	var wg sync.WaitGroup
	sem := make(chan struct{}, execLane)
	wg.Go(func() {
		t := time.NewTicker(time.Second / time.Duration(rate))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			select {
			case sem <- struct{}{}:
			default:
				continue
			}
			wg.Go(func() {
				defer func() { <-sem }()
				if _, _, err := c.ExecSync(ctx, id, []string{"true"}, 10*time.Second); err == nil {
					count.Add(1)
				}
			})
		}
	})
	return wg.Wait
}

// countingRunner counts the successful runs of the runner it wraps.
type countingRunner struct {
	exec.Runner
	count *atomic.Int64
}

func (r countingRunner) RunInContainer(ctx context.Context, id string, cmd []string, timeout time.Duration) ([]byte, error) {
	out, err := r.Runner.RunInContainer(ctx, id, cmd, timeout)
	if err == nil {
		r.count.Add(1)
	}
	return out, err
}

// statuses is the manager's status provider: every pod running, its
// container started, with the container's ID.
type statuses map[types.UID]v1.PodStatus

func (s statuses) GetPodStatus(uid types.UID) (v1.PodStatus, bool) { st, ok := s[uid]; return st, ok }

// probed runs rate pods, each with an exec readiness probe (true, period
// 1 s, timeout 10 s) in the container, through the manager, the exec lane
// and the CRI runner.
func probed(b *testing.B, c *cri.Client, id string, rate int, count *atomic.Int64) func() {
	logger := slog.New(slog.DiscardHandler)
	rt, err := runtime.New(runtime.Options{Logger: logger, Recorder: &record.FakeRecorder{}})
	if err != nil {
		b.Fatal(err)
	}
	if err := rt.Register(runtime.KindExec, exec.New(countingRunner{Runner: c.Runner(), count: count})); err != nil {
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
	mgr, err := manager.New(manager.Options{Status: st, Readiness: ready, Runtime: rt, Logger: logger})
	if err != nil {
		b.Fatal(err)
	}
	started, now := true, metav1.Now()
	var pods []*v1.Pod
	for i := range rate {
		uid := types.UID(fmt.Sprintf("bench-cri-%d", i))
		pod := &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: fmt.Sprintf("pod-%d", i), UID: uid},
			Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app", ReadinessProbe: &v1.Probe{
				ProbeHandler:   v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}},
				PeriodSeconds:  1,
				TimeoutSeconds: 10, SuccessThreshold: 1, FailureThreshold: 3,
			}}}},
		}
		st[uid] = v1.PodStatus{Phase: v1.PodRunning, PodIP: "127.0.0.1", ContainerStatuses: []v1.ContainerStatus{{
			Name: "app", ContainerID: c.RuntimeName() + "://" + id, Started: &started,
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

func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procSet finds the runtime's processes: containerd of the socket's
// directory (test/cri/env.sh's) and the shims it started.
type procSet struct {
	socket     string
	containerd int
}

type runtimeCPU struct{ containerd, shims time.Duration }

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

// cpu returns containerd's CPU and that of every shim of it with their
// reaped children (runc), user and system.
func (p *procSet) cpu(b *testing.B) runtimeCPU {
	var out runtimeCPU
	out.containerd = procCPU(p.containerd)
	for _, pid := range pids() {
		if c := cmdline(pid); strings.Contains(c, "containerd-shim") && strings.Contains(c, "-address "+p.socket) {
			out.shims += procCPU(pid)
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

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times (100 on
// Linux).
const clockTicks = 100

// procCPU is utime+stime+cutime+cstime of pid.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	var ticks int64
	for _, i := range []int{11, 12, 13, 14} { // fields 14-17 of stat, after pid and comm
		n, _ := strconv.ParseInt(f[i], 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks
}
