package agent_test

import (
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/probed/probed/agent"
)

// acceptLog is a loopback listener that records when it accepts each
// connection and closes it.
type acceptLog struct {
	mu    sync.Mutex
	times []time.Time
	port  int
}

func newAcceptLog(t *testing.T) *acceptLog {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := &acceptLog{port: ln.Addr().(*net.TCPAddr).Port}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			a.mu.Lock()
			a.times = append(a.times, time.Now())
			a.mu.Unlock()
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return a
}

func (a *acceptLog) accepted() []time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.times)
}

// Sub-second periods: a manifest pod's annotation TCP probe with
// periodSeconds 1 and periodMilliseconds -800 dials a real socket every
// 200 ms through the agent; the probe history states the period, and the
// pod becomes Ready.
func TestAgent_SubSecondAnnotationTCPProbe(t *testing.T) {
	for _, tick := range []time.Duration{0, 2 * time.Millisecond} {
		t.Run("tick="+tick.String(), func(t *testing.T) { subSecondTCPProbe(t, tick) })
	}
}

func subSecondTCPProbe(t *testing.T, tick time.Duration) {
	target := newAcceptLog(t)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "fast.yaml"), `apiVersion: v1
kind: Pod
metadata:
  name: fast
  namespace: shop
  annotations:
    probed.io/probes: '[{"container": "app", "type": "readiness", "periodSeconds": 1, "periodMilliseconds": -800, "timeoutMilliseconds": -500, "failureThreshold": 1, "tcpSocket": {"port": `+strconv.Itoa(target.port)+`}}]'
spec:
  containers:
  - name: app
    image: example/app
`)
	r := startAgent(t, dir, func(o *agent.Options) { o.SchedulerTick = tick })
	r.eventually("the pod Ready", func() bool { p, ok := r.pods()["shop/fast"]; return ok && podReady(p) })
	var hist struct {
		Probes []struct {
			Type      string  `json:"type"`
			Handler   string  `json:"handler"`
			PeriodMS  float64 `json:"periodMs"`
			TimeoutMS float64 `json:"timeoutMs"`
			Results   []struct {
				Result string `json:"result"`
			} `json:"results"`
		} `json:"probes"`
	}
	r.eventually("ten readiness runs", func() bool {
		r.get("/pods/shop/fast/probes", &hist)
		return len(hist.Probes) == 1 && len(hist.Probes[0].Results) >= 10
	})
	p := hist.Probes[0]
	if p.Type != "readiness" || p.Handler != "tcp" || p.PeriodMS != 200 || p.TimeoutMS != 500 {
		t.Fatalf("history: %s %s period %v ms timeout %v ms, want readiness tcp 200 ms 500 ms", p.Type, p.Handler, p.PeriodMS, p.TimeoutMS)
	}
	for _, res := range p.Results {
		if res.Result != "success" {
			t.Fatalf("a run against the open socket: %q", res.Result)
		}
	}
	// The runs are 200 ms apart on the target's own clock: the median gap
	// between accepts (robust to a loaded machine's late runs) is far from
	// the whole-second period the seconds field alone would give.
	times := target.accepted()
	if len(times) < 10 {
		t.Fatalf("%d connections accepted, want at least 10", len(times))
	}
	var gaps []time.Duration
	for i := 1; i < len(times); i++ {
		gaps = append(gaps, times[i].Sub(times[i-1]))
	}
	slices.Sort(gaps)
	if med := gaps[len(gaps)/2]; med < 100*time.Millisecond || med > 600*time.Millisecond {
		t.Fatalf("median gap between probe connections %v (of %d), want about 200ms", med, len(gaps))
	}
}

// --scheduler-tick is the wheel's resolution: at most the shortest period
// (100 ms); the error names the flag.
func TestAgent_SchedulerTickBounds(t *testing.T) {
	for _, tick := range []time.Duration{-time.Millisecond, 200 * time.Millisecond} {
		_, err := agent.New(agent.Options{ManifestDir: t.TempDir(), Listen: "127.0.0.1:0", SchedulerTick: tick})
		if err == nil || !strings.Contains(err.Error(), "--scheduler-tick") {
			t.Errorf("SchedulerTick %v: err = %v, want one naming --scheduler-tick", tick, err)
		}
	}
}

// --scheduler-coalesce is bounded: a run may be at most that late, and a
// window of half the shortest period (50 ms) is the most allowed; the
// error names the flag.
func TestAgent_SchedulerCoalesceBounds(t *testing.T) {
	for _, w := range []time.Duration{-time.Millisecond, agent.MaxSchedulerCoalesce + time.Millisecond} {
		_, err := agent.New(agent.Options{ManifestDir: t.TempDir(), Listen: "127.0.0.1:0", SchedulerCoalesce: w})
		if err == nil || !strings.Contains(err.Error(), "--scheduler-coalesce") {
			t.Errorf("SchedulerCoalesce %v: err = %v, want one naming --scheduler-coalesce", w, err)
		}
	}
}
