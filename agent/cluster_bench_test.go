package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/probed/probed/agent"
	"github.com/probed/probed/internal/agenttest"
	"github.com/probed/probed/internal/kubetest"
	"github.com/probed/probed/manager/customprobe"
)

// benchPods is the pod count of BenchmarkNode (one node, 500
// pods × 2 annotation probes).
const benchPods = 500

// benchWindow is the steady-state window over which CPU and API requests are
// counted.
var benchWindow = envDuration("PROBED_BENCH_WINDOW", 30*time.Second)

func envDuration(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil && d > 0 {
		return d
	}
	return def
}

// BenchmarkNode: one node with 500 pods, each with two
// probed.io/probes annotation probes (tcpSocket readiness and tcpSocket
// liveness, period 1 s, against two shared loopback targets), in manifest
// mode and in cluster mode against the real API server (cluster runs skip
// without PROBED_TEST_KUBECONFIG), at the default condition-writer rate
// (--status-qps 5, --status-burst 10) and at 50/100. It reports, as custom
// metrics of one iteration (run with -benchtime 1x, one sub-benchmark per
// process so RSS figures do not mix):
//
//   - heap-MiB, heap-B/pod: Go heap after a forced GC once every probe ran,
//     and its growth since before agent.New per pod (the informer cache, the
//     manager's workers, results and statuses);
//   - rss-MiB: the process's VmRSS (the benchmark process also holds the
//     targets and, in cluster mode, the test's own client);
//   - cpu-ms/s: getrusage CPU time of the process per second of the steady
//     window (includes the targets' accept loops: 1,000 connections/s);
//   - api-req/min, api-writes/min, api-patches/min (pods/status): the agent's requests to the API server
//     during the steady window, counted through rest.Config.WrapTransport
//     (the watch opened before the window is not counted);
//   - sync-s, down-s, up-s: seconds until every pod's gate condition is True
//     after the agent starts, False after both targets close at once, True
//     again after they reopen (observed by listing the pods every 250 ms);
//     down-patch/s, up-patch/s: the agent's status patches per second during
//     each flip.
func BenchmarkNode(b *testing.B) {
	b.Run("manifest", benchManifest)
	b.Run("cluster-qps5", func(b *testing.B) { benchCluster(b, 5, 10) })
	b.Run("cluster-qps50", func(b *testing.B) { benchCluster(b, 50, 100) })
}

// benchTargets are the readiness and liveness targets every pod probes.
type benchTargets struct {
	ready, live *switchable
}

// switchable is a loopback TCP port that accepts and closes, and can be
// closed and opened again on the same port.
type switchable struct {
	mu   sync.Mutex
	port int
	ln   net.Listener
	wg   sync.WaitGroup
}

func newSwitchable(b testing.TB) *switchable {
	s := &switchable{}
	s.open(b)
	s.port = s.ln.Addr().(*net.TCPAddr).Port
	b.Cleanup(s.close)
	return s
}

func (s *switchable) open(b testing.TB) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(s.port))
	if err != nil {
		b.Fatal(err)
	}
	s.ln = ln
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
}

func (s *switchable) close() {
	s.mu.Lock()
	if s.ln != nil {
		s.ln.Close()
		s.ln = nil
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// benchAnnotation is the probed.io/probes annotation of every pod.
func benchAnnotation(tg benchTargets) string {
	return fmt.Sprintf(`[{"container":"app","type":"readiness","periodSeconds":1,"failureThreshold":1,"tcpSocket":{"port":%d}},`+
		`{"container":"app","type":"liveness","periodSeconds":1,"failureThreshold":3,"tcpSocket":{"port":%d}}]`, tg.ready.port, tg.live.port)
}

// requestCounter counts the agent's requests to the API server, and
// keeps a line per write while recording is on (the steady window), so a
// write at steady state is named in the benchmark's log.
type requestCounter struct {
	total, writes, patches, events atomic.Int64

	mu        sync.Mutex
	recording bool
	recorded  []string
}

// record turns the per-write log on or off and returns what it held.
func (c *requestCounter) record(on bool) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.recorded
	c.recording, c.recorded = on, nil
	return out
}

// wrap is a rest.Config.WrapTransport that counts into c.
func (c *requestCounter) wrap(next http.RoundTripper) http.RoundTripper {
	return countingTransport{c: c, next: next}
}

type countingTransport struct {
	c    *requestCounter
	next http.RoundTripper
}

func (t countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	c := t.c
	c.total.Add(1)
	if req.Method != http.MethodGet {
		c.writes.Add(1)
		c.mu.Lock()
		if c.recording {
			line := time.Now().Format("15:04:05.000") + " " + req.Method + " " + req.URL.Path
			if req.GetBody != nil {
				if body, err := req.GetBody(); err == nil {
					data, _ := io.ReadAll(io.LimitReader(body, 2048))
					body.Close()
					line += " " + string(data)
				}
			}
			c.recorded = append(c.recorded, line)
		}
		c.mu.Unlock()
		switch {
		case req.Method == http.MethodPatch && strings.HasSuffix(req.URL.Path, "/status"):
			c.patches.Add(1)
		case strings.Contains(req.URL.Path, "/events"):
			c.events.Add(1)
		}
	}
	return t.next.RoundTrip(req)
}

// memory is the heap after a forced GC and the process's RSS, in bytes.
func memory(b testing.TB) (heap, rss uint64) {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseUint(f[1], 10, 64)
			rss = kb << 10
		}
	}
	return ms.HeapAlloc, rss
}

// cpuTime is the process's user + system CPU time.
func cpuTime(b testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// runBenchAgent runs a until the benchmark ends.
func runBenchAgent(b *testing.B, opts agent.Options) *agent.Agent {
	b.Helper()
	opts.Listen = "127.0.0.1:0"
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	return agenttest.Start(b, opts).Agent
}

// steady measures memory, CPU and requests over benchWindow.
func steady(b *testing.B, baseHeap uint64, counter *requestCounter) {
	heap, rss := memory(b)
	var total, writes, patches int64
	if counter != nil {
		total, writes, patches = counter.total.Load(), counter.writes.Load(), counter.patches.Load()
		counter.record(true)
	}
	cpu0, t0 := cpuTime(b), time.Now()
	time.Sleep(benchWindow)
	cpu, elapsed := cpuTime(b)-cpu0, time.Since(t0)
	b.ReportMetric(float64(heap)/(1<<20), "heap-MiB")
	b.ReportMetric(float64(int64(heap)-int64(baseHeap))/benchPods, "heap-B/pod")
	b.ReportMetric(float64(rss)/(1<<20), "rss-MiB")
	b.ReportMetric(float64(cpu.Milliseconds())/elapsed.Seconds(), "cpu-ms/s")
	if counter != nil {
		minutes := elapsed.Minutes()
		b.ReportMetric(float64(counter.total.Load()-total)/minutes, "api-req/min")
		b.ReportMetric(float64(counter.writes.Load()-writes)/minutes, "api-writes/min")
		b.ReportMetric(float64(counter.patches.Load()-patches)/minutes, "api-patches/min")
		for _, w := range counter.record(false) {
			b.Logf("write at steady state: %s", w)
		}
	}
}

func benchManifest(b *testing.B) {
	tg := benchTargets{ready: newSwitchable(b), live: newSwitchable(b)}
	dir := b.TempDir()
	for i := 0; i < benchPods; i++ {
		pod := kubetest.NewPod("bench", fmt.Sprintf("pod-%03d", i), "", "app")
		pod.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
		pod.Annotations = map[string]string{customprobe.Annotation: benchAnnotation(tg)}
		data, err := json.Marshal(pod)
		if err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, pod.Name+".json"), data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	for i := 0; i < b.N; i++ {
		baseHeap, _ := memory(b)
		a := runBenchAgent(b, agent.Options{ManifestDir: dir})
		waitAgentPods(b, a, benchPods)
		time.Sleep(3 * time.Second) // every probe has run
		steady(b, baseHeap, nil)
	}
}

// waitAgentPods waits until the agent's API lists n pods.
func waitAgentPods(b *testing.B, a *agent.Agent, n int) {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + a.Addr().String() + "/pods")
		if err == nil {
			var list v1.PodList
			err = json.NewDecoder(resp.Body).Decode(&list)
			resp.Body.Close()
			if err == nil && len(list.Items) == n {
				return
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	b.Fatalf("agent does not list %d pods", n)
}

func benchCluster(b *testing.B, qps float64, burst int) {
	cfg := kubetest.Config(b)
	admin := kubetest.ClientFor(b, cfg)
	ns, node := kubetest.Namespace(b), kubetest.NodeName(b)
	tg := benchTargets{ready: newSwitchable(b), live: newSwitchable(b)}
	createBenchPods(b, admin, ns, node, benchAnnotation(tg))

	for i := 0; i < b.N; i++ {
		counter := &requestCounter{}
		agentCfg := *cfg
		agentCfg.WrapTransport = counter.wrap
		baseHeap, _ := memory(b)
		start := time.Now()
		runBenchAgent(b, agent.Options{Cluster: &agent.ClusterOptions{
			Config: &agentCfg, NodeName: node, StatusQPS: qps, StatusBurst: burst,
		}})
		waitGates(b, admin, ns, v1.ConditionTrue)
		b.ReportMetric(time.Since(start).Seconds(), "sync-s")
		time.Sleep(3 * time.Second) // the last patches' watch events are in
		steady(b, baseHeap, counter)

		flip := func(name string, want v1.ConditionStatus, change func()) {
			patches := counter.patches.Load()
			t0 := time.Now()
			change()
			waitGates(b, admin, ns, want)
			d := time.Since(t0)
			b.ReportMetric(d.Seconds(), name+"-s")
			b.ReportMetric(float64(counter.patches.Load()-patches)/d.Seconds(), name+"-patch/s")
		}
		flip("down", v1.ConditionFalse, func() { tg.ready.close(); tg.live.close() })
		flip("up", v1.ConditionTrue, func() { tg.ready.open(b); tg.live.open(b) })
		b.ReportMetric(float64(counter.events.Load()), "event-writes")
	}
}

// createBenchPods creates benchPods gated pods on node with annotation and
// writes their status as the kubelet would (running, started, not ready).
func createBenchPods(b *testing.B, c kubernetes.Interface, ns, node, annotation string) {
	var wg sync.WaitGroup
	names := make(chan string)
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range names {
				pod := kubetest.NewPod(ns, name, node, "app")
				pod.Annotations = map[string]string{customprobe.Annotation: annotation}
				pod.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: gateType}}
				if _, err := c.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
					b.Errorf("create pod %s: %v", name, err)
					continue
				}
				kubetest.SetPodRunning(b, c, ns, name, false)
			}
		}()
	}
	for i := 0; i < benchPods; i++ {
		names <- fmt.Sprintf("pod-%03d", i)
	}
	close(names)
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
}

// waitGates polls until every pod of ns has its gate condition at want.
func waitGates(b *testing.B, c kubernetes.Interface, ns string, want v1.ConditionStatus) {
	deadline := time.Now().Add(10 * time.Minute)
	for time.Now().Before(deadline) {
		list, err := c.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for _, p := range list.Items {
			for _, cond := range p.Status.Conditions {
				if cond.Type == gateType && cond.Status == want {
					n++
				}
			}
		}
		if n == benchPods {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	b.Fatalf("not every pod's gate is %s after 10 minutes", want)
}
