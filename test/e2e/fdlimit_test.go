//go:build linux

package e2e

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// startProbedWithFileLimit starts probed as startProbed does, but under
// prlimit(1) (util-linux) with RLIMIT_NOFILE nofile:nofile, so that the
// agent's Go runtime cannot raise its soft limit above nofile.
func startProbedWithFileLimit(t *testing.T, nofile int, args ...string) *proc {
	t.Helper()
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Fatalf("prlimit (util-linux) is needed to run probed under a low RLIMIT_NOFILE: %v", err)
	}
	p := &proc{t: t, done: make(chan struct{})}
	limit := strconv.Itoa(nofile)
	p.cmd = exec.Command(prlimit, append([]string{"--nofile=" + limit + ":" + limit, "--", probedBin}, args...)...)
	p.cmd.Env = os.Environ()
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting probed under prlimit: %v", err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// openFiles counts the descriptors of process pid.
func openFiles(pid int) int {
	ents, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	return len(ents)
}

// idleClients opens n keep-alive connections to addr, sends one GET
// /healthz on each and returns the connections and how many were answered
// within wait; the connections stay open (idle) until closed.
func idleClients(t *testing.T, addr string, n int, wait time.Duration) ([]net.Conn, int) {
	t.Helper()
	conns := make([]net.Conn, 0, n)
	for i := 0; i < n; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("idle client %d: %v", i, err)
		}
		conns = append(conns, c)
	}
	var answered atomic.Int64
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: probed\r\n\r\n"); err != nil {
				return
			}
			_ = c.SetReadDeadline(time.Now().Add(wait))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			answered.Add(1)
		}()
	}
	wg.Wait()
	return conns, int(answered.Load())
}

// heldOpen counts the connections the server still holds open: reading
// until a timeout (rather than EOF or a reset) means open.
func heldOpen(conns []net.Conn) int {
	var open atomic.Int64
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
			buf := make([]byte, 4096)
			var err error
			for err == nil { // a late answer first
				_, err = c.Read(buf)
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				open.Add(1)
			}
		}()
	}
	wg.Wait()
	return int(open.Load())
}

// metricFamilies parses a Prometheus text exposition.
func metricFamilies(t *testing.T, body []byte) map[string]*dto.MetricFamily {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("parsing metrics: %v", err)
	}
	return fams
}

// sumCounter sums the counter samples of family name whose labels include
// match.
func sumCounter(fams map[string]*dto.MetricFamily, name string, match map[string]string) float64 {
	f := fams[name]
	if f == nil {
		return 0
	}
	var sum float64
	for _, m := range f.GetMetric() {
		ok := true
		for k, v := range match {
			found := false
			for _, l := range m.GetLabel() {
				if l.GetName() == k && l.GetValue() == v {
					found = true
				}
			}
			ok = ok && found
		}
		if ok {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

const fdLimitPod = `apiVersion: v1
kind: Pod
metadata:
  name: %[1]s
  namespace: fdlimit
spec:
  containers:
  - name: app
    image: app
    livenessProbe:
      %[2]s
      periodSeconds: 1
      timeoutSeconds: 5
      failureThreshold: 1
`

// TestLowFileLimitNoFalseRestarts runs the real agent under
// RLIMIT_NOFILE 128 with 150 healthy HTTP liveness targets that take 2 s to
// answer (150 probe sockets in flight, more than the limit leaves) and 20
// healthy TCP ones, plus 200 idle keep-alive connections to its API:
//
//   - the API holds at most its connection cap (a quarter of the limit:
//     32) open at once: a new client takes the slot of the one idle the
//     longest, others wait in the kernel's queue, holding no
//     descriptor of the agent;
//   - probes that find no descriptor are errored, not failed: no liveness
//     Failure (prober_probe_total), no restart, while
//     probed_probes_errored_total{reason="EMFILE"} counts them and /events
//     says why ("out of local resources (EMFILE)").
//
// The kubelet counts such a dial error as a Failure: with failureThreshold
// 1 every one would restart a healthy container.
func TestLowFileLimitNoFalseRestarts(t *testing.T) {
	const (
		nofile      = 128
		apiCap      = nofile / 4
		httpPods    = 150
		tcpPods     = 20
		idleConns   = 200
		pressureFor = 8 * time.Second
	)
	var delay atomic.Int64 // nanoseconds each HTTP answer waits
	web := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(time.Duration(delay.Load())):
		case <-r.Context().Done():
		}
	}))
	web.Config.MaxHeaderBytes = 1 << 20
	web.Start()
	t.Cleanup(web.Close)
	webPort := web.Listener.Addr().(*net.TCPAddr).Port
	tcp := newTCPTarget(t)

	dir := t.TempDir()
	var manifest strings.Builder
	for i := 0; i < httpPods; i++ {
		fmt.Fprintf(&manifest, "---\n"+fdLimitPod, "web-"+strconv.Itoa(i), fmt.Sprintf("httpGet: {path: /live, port: %d}", webPort))
	}
	for i := 0; i < tcpPods; i++ {
		fmt.Fprintf(&manifest, "---\n"+fdLimitPod, "tcp-"+strconv.Itoa(i), fmt.Sprintf("tcpSocket: {port: %d}", tcp.port))
	}
	writeFile(t, filepath.Join(dir, "pods.yaml"), manifest.String())

	listen := "127.0.0.1:" + strconv.Itoa(freePort(t))
	base := "http://" + listen
	// The pools' shares off: every pod is in one namespace, whose share (a
	// quarter of the pool) would keep the probes in flight below what
	// exhausts the descriptors, and this test is about exhausting them.
	p := startProbedWithFileLimit(t, nofile, "run", "--manifests", dir, "--listen", listen,
		"--rescan-interval", "10m", "--log-format", "json", "--pod-pool-share", "0", "--namespace-pool-share", "0")
	waitAPI(t, p, base, true)
	eventually(t, p, 30*time.Second, "every liveness probe has run", func() (bool, string) {
		body, err := apiGet(base, "/metrics/probes")
		if err != nil {
			return false, err.Error()
		}
		n := 0
		for _, m := range metricFamilies(t, body)["prober_probe_total"].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "pod" && m.GetCounter().GetValue() > 0 {
					n++
				}
			}
		}
		return n >= httpPods+tcpPods, fmt.Sprintf("%d probes ran", n)
	})
	apiClient.CloseIdleConnections()

	// The idle load: at most the cap is served.
	conns, answered := idleClients(t, listen, idleConns, 3*time.Second)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	held := heldOpen(conns)
	t.Logf("%d of %d idle clients served, %d held open by the agent; probed has %d descriptors open (limit %d)", answered, idleConns, held, openFiles(p.cmd.Process.Pid), nofile)
	if held > apiCap+1 { // the cap, and one accepted connection waiting for a slot
		t.Errorf("%d idle keep-alive connections held open at once, want at most the connection cap %d (a quarter of RLIMIT_NOFILE %d)", held, apiCap, nofile)
	}

	// Probe pressure: every HTTP probe holds its socket for 2 s, longer
	// than its period, so each is in flight all the time (BR-10: interval
	// = max(period, duration)), however late the scheduler runs.
	delay.Store(int64(2 * time.Second))
	time.Sleep(pressureFor)
	delay.Store(0)
	for _, c := range conns {
		c.Close()
	}
	if p.exited() {
		t.Fatalf("probed exited under the descriptor limit (%v); stderr:\n%s", p.err, tail(p.stderr.String(), 40))
	}

	var probes, runtimeMetrics map[string]*dto.MetricFamily
	eventually(t, p, 30*time.Second, "the API answers again", func() (bool, string) {
		pb, err := apiGet(base, "/metrics/probes")
		if err != nil {
			return false, err.Error()
		}
		rb, err := apiGet(base, "/metrics")
		if err != nil {
			return false, err.Error()
		}
		probes, runtimeMetrics = metricFamilies(t, pb), metricFamilies(t, rb)
		return true, ""
	})
	emfile := sumCounter(runtimeMetrics, "probed_probes_errored_total", map[string]string{"probe_type": "liveness", "reason": "EMFILE"})
	failed := sumCounter(probes, "prober_probe_total", map[string]string{"probe_type": "Liveness", "result": "failed"})
	succeeded := sumCounter(probes, "prober_probe_total", map[string]string{"probe_type": "Liveness", "result": "successful"})
	t.Logf("liveness runs: %v successful, %v failed, %v errored for EMFILE", succeeded, failed, emfile)
	if emfile == 0 {
		t.Errorf("probed_probes_errored_total{reason=\"EMFILE\"} is 0: the test did not exhaust the agent's descriptors (stderr:\n%s)", tail(p.stderr.String(), 20))
	}
	if failed != 0 {
		t.Errorf("%v liveness Failures of healthy targets under descriptor exhaustion, want 0", failed)
	}

	list, err := getPods(base)
	if err != nil {
		t.Fatal(err)
	}
	restarted := 0
	for _, pod := range list.Items {
		for _, cs := range pod.Status.ContainerStatuses {
			if cs.RestartCount != 0 {
				restarted++
			}
		}
	}
	if len(list.Items) != httpPods+tcpPods || restarted != 0 {
		t.Errorf("%d pods, %d containers restarted; want %d pods and no restart", len(list.Items), restarted, httpPods+tcpPods)
	}

	body, err := apiGet(base, "/events")
	if err != nil {
		t.Fatal(err)
	}
	var ev struct {
		Events []struct{ Reason, Message string }
	}
	if err := json.Unmarshal(body, &ev); err != nil {
		t.Fatalf("/events: %v", err)
	}
	why := 0
	for _, e := range ev.Events {
		if e.Reason == "Unhealthy" && strings.HasPrefix(e.Message, "Liveness probe errored and resulted in unknown state: probe not attempted: probed is out of local resources (EMFILE)") {
			why++
		}
		if e.Reason == "Killing" {
			t.Errorf("event %s %q: a container was restarted", e.Reason, e.Message)
		}
	}
	if why == 0 {
		t.Errorf("/events has no event saying the probe was not attempted for EMFILE:\n%.2000s", body)
	}
}
