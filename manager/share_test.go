package manager

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/probed/probed/manager/results"
	"github.com/probed/probed/runtime"
)

// hostileHandler serves kind tcp for the fairness test: probes of pods named
// "hostile-*" alternate a fast run and a run that hangs until its deadline
// (the target that alternates fast and hanging, which defeats the
// slow lane: a fast run moves the probe back to the network lane, where its
// next run hangs); every other pod's probes succeed at once, and the fake
// time of each of their runs is recorded.
type hostileHandler struct {
	clk *testingclock.FakeClock

	mu      sync.Mutex
	runs    map[string]int         // per probe: runs so far (hostile alternation)
	victims map[string][]time.Time // per victim pod: the start of each run
}

func (h *hostileHandler) Prepare(spec *runtime.Spec) (runtime.Prober, error) {
	key := spec.Pod.Name + "/" + spec.Container.Name
	hostile := len(spec.Pod.Name) > 8 && spec.Pod.Name[:8] == "hostile-"
	return runtime.ProberFunc(func(ctx context.Context, _ runtime.Target) (runtime.Outcome, error) {
		h.mu.Lock()
		if !hostile {
			h.victims[spec.Pod.Name] = append(h.victims[spec.Pod.Name], h.clk.Now())
			h.mu.Unlock()
			return runtime.Outcome{Result: runtime.Success}, nil
		}
		h.runs[key]++
		hang := h.runs[key]%2 == 1
		h.mu.Unlock()
		if hang {
			<-ctx.Done() // the attempt's deadline, on the fake clock (P3)
			return runtime.Outcome{Result: runtime.Failure, Output: "timeout"}, nil
		}
		return runtime.Outcome{Result: runtime.Success}, nil
	}), nil
}

func tcpProbe(period, timeout int32) *v1.Probe {
	return &v1.Probe{
		ProbeHandler:   v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(80)}},
		PeriodSeconds:  period,
		TimeoutSeconds: timeout, SuccessThreshold: 1, FailureThreshold: 3,
	}
}

func sharePod(ns, name string, containers int, probe *v1.Probe) *v1.Pod {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "-" + name)}}
	for i := 0; i < containers; i++ {
		pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Name: fmt.Sprintf("c%d", i), ReadinessProbe: probe})
	}
	return pod
}

func runningPodStatus(pod *v1.Pod, startedAt time.Time) v1.PodStatus {
	st := v1.PodStatus{Phase: v1.PodRunning, PodIP: "10.0.0.1"}
	started := true
	for i, c := range pod.Spec.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses, v1.ContainerStatus{
			Name: c.Name, ContainerID: fmt.Sprintf("test://%s-%d", pod.UID, i), Started: &started,
			State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(startedAt)}},
		})
	}
	return st
}

// TestSharesKeepAHostilePodFromStarvingOthers holds the pool shares on the fake
// clock: one pod with 30 probes against a target that alternates fast and
// hanging for its 20 s timeout, beside 5 pods with one healthy probe each,
// all at period 2 s, on a network lane of 8 slots. With the lane shares
// (a pod holds 2 slots, a namespace 4) every victim runs on time, within a
// step or two of its period (W3); without them (the control, the kubelet's
// shape of one shared pool) the hostile pod's hung runs take the lane and
// the victims go without runs for many periods, which is what makes the
// first case a test.
func TestSharesKeepAHostilePodFromStarvingOthers(t *testing.T) {
	for _, c := range []struct {
		name       string
		pod, ns    float64
		wantOnTime bool
	}{
		{"with shares", 0.25, 0.5, true},
		{"without shares (control)", 0, 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			maxGap, minRuns := hostileScenario(t, c.pod, c.ns)
			const period = 2 * time.Second
			// Loosely (the fake clock moves in 200 ms steps, and a run handed
			// out late in real time records a later step): at most half a
			// period late, at least 27 of the 30 runs.
			onTime := maxGap <= period+period/2 && minRuns >= 27
			t.Logf("victims: largest gap between runs %v, fewest runs %d in 60 s of period 2 s", maxGap, minRuns)
			if onTime != c.wantOnTime {
				t.Fatalf("victims on time = %v (largest gap %v, fewest runs %d), want %v", onTime, maxGap, minRuns, c.wantOnTime)
			}
		})
	}
}

// hostileScenario runs the scenario for 60 s of fake time and returns the
// victims' largest gap between two runs and the fewest runs of one victim.
func hostileScenario(t *testing.T, podShare, nsShare float64) (maxGap time.Duration, minRuns int) {
	clk := testingclock.NewFakeClock(fakeNow)
	h := &hostileHandler{clk: clk, runs: map[string]int{}, victims: map[string][]time.Time{}}
	rt, err := runtime.New(runtime.Options{PoolSize: 8, SlowPoolSize: 64, ExecPoolSize: 1, Clock: clk, Logger: quietLogger(),
		PodShare: podShare, NamespaceShare: nsShare})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Register(runtime.KindTCP, h); err != nil {
		t.Fatal(err)
	}
	status := newFakeStatus()
	mi, err := New(Options{Status: status, Clock: clk, Runtime: rt, Logger: quietLogger(), Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	drain := make(chan struct{})
	var wg sync.WaitGroup
	for _, rm := range mi.(*manager).results {
		wg.Add(1)
		go func(ch <-chan results.Update) {
			defer wg.Done()
			for {
				select {
				case <-ch:
				case <-drain:
					return
				}
			}
		}(rm.Updates())
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := mi.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
		close(drain)
		wg.Wait()
		if err := rt.Close(ctx); err != nil {
			t.Errorf("runtime Close: %v", err)
		}
	}()

	pods := []*v1.Pod{sharePod("tenant-a", "hostile-0", 30, tcpProbe(2, 20))}
	for i := 0; i < 5; i++ {
		pods = append(pods, sharePod(fmt.Sprintf("tenant-%d", i), fmt.Sprintf("victim-%d", i), 1, tcpProbe(2, 1)))
	}
	for _, p := range pods {
		status.set(p.UID, runningPodStatus(p, fakeNow.Add(-time.Hour)))
		mi.AddPod(context.Background(), p)
	}
	// Step 200 ms at a time; after each step give the runs it made due a
	// moment of real time to be handed out and to run (hung runs never end
	// before their fake deadline, so there is no idle point to wait for).
	m := mi.(*manager)
	start := clk.Now()
	for clk.Since(start) < 60*time.Second {
		clk.Step(200 * time.Millisecond)
		deadline := time.Now().Add(20 * time.Millisecond)
		for time.Now().Before(deadline) {
			if st := m.sched.Stats(); st.Ready[runtime.LaneNetwork] == 0 && !st.Advanced.Before(clk.Now().Add(-10*time.Millisecond)) {
				break
			}
			time.Sleep(200 * time.Microsecond)
		}
		time.Sleep(2 * time.Millisecond) // the handed-out victim runs record their start
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	minRuns = 1 << 30
	for i := 0; i < 5; i++ {
		runs := h.victims[fmt.Sprintf("victim-%d", i)]
		minRuns = min(minRuns, len(runs))
		for j := 1; j < len(runs); j++ {
			maxGap = max(maxGap, runs[j].Sub(runs[j-1]))
		}
		if len(runs) > 0 {
			maxGap = max(maxGap, start.Add(60*time.Second).Sub(runs[len(runs)-1]))
		}
	}
	return maxGap, minRuns
}
