package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/probed/probed/internal/kubetest"
)

// The checks on a response cost the agent what a pod asks of them: before
// the bounds of runtime/tenant, `expect.jsonPath` `{..[0]}` on a 10 KB body
// of nested arrays took 4.7 s of CPU and 100 MiB per run (one pod with 8
// such probes drove the agent to 234 MiB and other pods' probes 250–530 ms
// late; a second such pod in another namespace got it OOM-killed), and a
// `bodyRegex` of 1,003 instructions took 160 ms per 10 KiB body. Now a
// path that can visit the body more than once, and a regex over 50
// instructions, are refused when the pod is admitted, with the field named;
// what is allowed costs at most a few milliseconds a run. These tests run
// the pods beside others, in both modes, and hold the others'
// punctuality and the agent's memory loosely (the figures are bench/'s,
// docs/benchmarks.md "A hostile pod beside others").

// nestedArrays is the body: 10 KB of nested arrays.
var nestedArrays = strings.Repeat("[", 5000) + strings.Repeat("]", 5000)

// worstRegex is the costliest bodyRegex allowed (50 instructions): on a
// body of 10 KiB of "a" every position keeps 47 threads alive.
const worstRegex = `[a-z]{47}b`

// victimTarget serves the victims' probes and records when each path was
// asked; the hostile paths answer the bodies above.
type victimTarget struct {
	mu      sync.Mutex
	arrived map[string][]time.Time
	port    int
}

func newVictimTarget(t *testing.T) *victimTarget {
	v := &victimTarget{arrived: map[string][]time.Time{}}
	flood := strings.Repeat("a", 10<<10)
	v.port = serveHTTP(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/nested":
			_, _ = w.Write([]byte(nestedArrays))
		case r.URL.Path == "/flood":
			_, _ = w.Write([]byte(flood))
		default:
			v.mu.Lock()
			v.arrived[r.URL.Path] = append(v.arrived[r.URL.Path], time.Now())
			v.mu.Unlock()
			_, _ = w.Write([]byte(`{"status":"ok"}`))
		}
	}))
	return v
}

// largestGap is the largest gap between two arrivals of any of paths in
// [from, to], and the fewest arrivals of one of them there.
func (v *victimTarget) largestGap(paths []string, from, to time.Time) (time.Duration, int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	var gap time.Duration
	fewest := -1
	for _, p := range paths {
		var last time.Time
		n := 0
		for _, at := range v.arrived[p] {
			if at.Before(from) || at.After(to) {
				continue
			}
			if !last.IsZero() {
				gap = max(gap, at.Sub(last))
			}
			last = at
			n++
		}
		if fewest < 0 || n < fewest {
			fewest = n
		}
	}
	return gap, fewest
}

// holdVictimsOnTime watches the agent (pid) and the victims' probes (at
// paths, every second) for 10 s, and fails the test if a victim missed
// runs or the agent's memory grew far. Loose: before the bounds the
// victims were 250–530 ms late beside one refused pod, and the agent was
// OOM-killed (256 MiB) beside two; the figures are bench/'s.
func (v *victimTarget) holdVictimsOnTime(t *testing.T, pid int, paths []string) {
	t.Helper()
	from := time.Now()
	cpu0 := processCPU(t, pid)
	var peak int64
	for range 10 {
		time.Sleep(time.Second)
		peak = max(peak, processRSS(t, pid))
	}
	to := time.Now()
	cpu := processCPU(t, pid) - cpu0
	gap, fewest := v.largestGap(paths, from, to)
	t.Logf("victims: largest gap %v, fewest runs %d in %v; agent: peak RSS %d MiB, CPU %.0f%% of a core",
		gap.Round(time.Millisecond), fewest, to.Sub(from).Round(time.Millisecond), peak>>20, 100*cpu.Seconds()/to.Sub(from).Seconds())
	if gap > 1600*time.Millisecond || fewest < 8 {
		t.Errorf("victims' largest gap %v and fewest runs %d in 10 s, want every second", gap, fewest)
	}
	if peak > 150<<20 {
		t.Errorf("agent RSS %d MiB, want far below the 256 MiB it was OOM-killed at", peak>>20)
	}
}

// hostileAnnotation is n annotation readiness probes, one per container
// c0..c(n-1), every second, with the given httpGet.
func hostileAnnotation(n int, httpGet string) string {
	var b strings.Builder
	b.WriteString("[")
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"container":"c%d","type":"readiness","periodSeconds":1,"timeoutSeconds":5,"httpGet":%s}`, i, httpGet)
	}
	return b.String() + "]"
}

// The pods in manifest mode: two pods of 8 `{..[0]}` probes (in two
// namespaces) and one of 32 probes with a 1,003-instruction bodyRegex are
// rejected, each naming the field and why; a pod of 32 probes with the
// costliest regex allowed runs beside 20 victim pods, whose probes stay on
// time, and the agent's memory stays far below what one refused pod cost
// before.
func TestHostileChecksRefusedAndOthersOnTime(t *testing.T) {
	v := newVictimTarget(t)
	dir := t.TempDir()
	var m strings.Builder
	pod := func(ns, name string, containers int, annotation string) {
		fmt.Fprintf(&m, "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: %s\n  namespace: %s\n", name, ns)
		if annotation != "" {
			fmt.Fprintf(&m, "  annotations:\n    probed.io/probes: '%s'\n", annotation)
		}
		m.WriteString("spec:\n  containers:\n")
		for i := range containers {
			fmt.Fprintf(&m, "  - {name: c%d, image: app}\n", i)
		}
	}
	nested := fmt.Sprintf(`{"path":"/nested","port":%d,"expect":{"jsonPath":{"path":"{..[0]}","value":"[]"}}}`, v.port)
	nested2 := fmt.Sprintf(`{"path":"/nested","port":%d,"expect":{"jsonPath":{"path":"{..[0]..[0]}","value":"[]"}}}`, v.port)
	bigRegex := fmt.Sprintf(`{"path":"/flood","port":%d,"expect":{"bodyRegex":"[a-z]{1000}b"}}`, v.port)
	worst := fmt.Sprintf(`{"path":"/flood","port":%d,"expect":{"bodyRegex":"%s"}}`, v.port, worstRegex)
	pod("hostile-a", "nested", 8, hostileAnnotation(8, nested))
	pod("hostile-b", "nested", 8, hostileAnnotation(8, nested2))
	pod("hostile-c", "regex", 32, hostileAnnotation(32, bigRegex))
	pod("hostile-d", "worst", 32, hostileAnnotation(32, worst))
	var victims []string
	for i := range 20 {
		path := fmt.Sprintf("/v%d", i)
		victims = append(victims, path)
		fmt.Fprintf(&m, `---
apiVersion: v1
kind: Pod
metadata: {name: web-%d, namespace: victims}
spec:
  containers:
  - name: app
    image: app
    readinessProbe:
      httpGet: {path: %s, port: %d}
      periodSeconds: 1
`, i, path, v.port)
	}
	writeFile(t, filepath.Join(dir, "pods.yaml"), m.String())
	listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	// The build without the race detector: the figures are about time.
	p := startBinary(t, checkBin, nil, "run", "--manifests", dir, "--listen", listen, "--log-format", "json")
	base := "http://" + listen
	waitAPI(t, p, base, false)

	// Refused at admission, each with its field and why.
	want := map[string][]string{
		"hostile-a/nested": {"httpGet.expect.jsonPath.path", "recursive descent (..) is not allowed"},
		"hostile-b/nested": {"httpGet.expect.jsonPath.path", "recursive descent (..) is not allowed"},
		"hostile-c/regex":  {"httpGet.expect.bodyRegex", "compiles to 1003 instructions, at most 50"},
	}
	eventually(t, p, 30*time.Second, "the hostile manifests rejected", func() (bool, string) {
		var report struct {
			Rejected []struct{ Pod, Error string }
		}
		body, err := apiGet(base, "/manifests")
		if err == nil {
			err = json.Unmarshal(body, &report)
		}
		if err != nil {
			return false, err.Error()
		}
		found := map[string]bool{}
		for _, r := range report.Rejected {
			ok := len(want[r.Pod]) > 0
			for _, part := range want[r.Pod] {
				ok = ok && strings.Contains(r.Error, part)
			}
			found[r.Pod] = found[r.Pod] || ok
		}
		for pod, parts := range want {
			if !found[pod] {
				return false, fmt.Sprintf("%s: no rejection saying %q in %s", pod, parts, tail(string(body), 10))
			}
		}
		return true, ""
	})

	// The worst allowed checks beside the victims: 10 s after a warm-up.
	time.Sleep(3 * time.Second)
	v.holdVictimsOnTime(t, p.cmd.Process.Pid, victims)
	if code := p.stop(syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, tail(p.stderr.String(), 20))
	}
}

// The same pods in cluster mode against the real API server: the hostile
// pods of two namespaces get the InvalidProbeAnnotation condition and Event
// naming the field, the pod of the costliest allowed checks runs, and the
// victims of a third namespace turn ready and stay on time.
func TestClusterHostileChecksRefusedAndOthersOnTime(t *testing.T) {
	admin := kubetest.Client(t)
	node := kubetest.NodeName(t)
	nsA, nsB, nsC, nsV := kubetest.Namespace(t), kubetest.Namespace(t), kubetest.Namespace(t), kubetest.Namespace(t)
	v := newVictimTarget(t)
	a := startClusterAgentWith(t, checkBin, nil, node, nil)
	gated := func(ns, name string, containers int, annotation string) {
		names := make([]string, containers)
		for i := range names {
			names[i] = fmt.Sprintf("c%d", i)
		}
		pod := kubetest.NewPod(ns, name, node, names...)
		pod.Annotations = map[string]string{"probed.io/probes": annotation}
		pod.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: gate}}
		kubetest.CreatePod(t, admin, pod)
		kubetest.SetPodRunning(t, admin, ns, name, true)
	}
	gated(nsA, "nested", 8, hostileAnnotation(8, fmt.Sprintf(`{"path":"/nested","port":%d,"expect":{"jsonPath":{"path":"{..[0]}","value":"[]"}}}`, v.port)))
	gated(nsB, "nested", 8, hostileAnnotation(8, fmt.Sprintf(`{"path":"/nested","port":%d,"expect":{"jsonPath":{"path":"{..[0]..[0]}","value":"[]"}}}`, v.port)))
	gated(nsC, "worst", 32, hostileAnnotation(32, fmt.Sprintf(`{"path":"/flood","port":%d,"expect":{"bodyRegex":"%s"}}`, v.port, worstRegex)))
	var victims []string
	for i := range 10 {
		path := fmt.Sprintf("/v%d", i)
		victims = append(victims, path)
		gated(nsV, fmt.Sprintf("web-%d", i), 1, fmt.Sprintf(`[{"container":"c0","type":"readiness","periodSeconds":1,"httpGet":{"path":"%s","port":%d}}]`, path, v.port))
	}
	for _, ns := range []string{nsA, nsB} {
		c := waitCondition(t, a, admin, ns, "nested", gate, v1.ConditionFalse, "InvalidProbeAnnotation", 60*time.Second)
		if !strings.Contains(c.Message, "httpGet.expect.jsonPath.path") || !strings.Contains(c.Message, "recursive descent") {
			t.Errorf("condition of %s/nested: %q, want the field and why", ns, c.Message)
		}
		waitEvent(t, a, admin, ns, "nested", "InvalidProbeAnnotation", "httpGet.expect.jsonPath.path", "recursive descent (..) is not allowed")
	}
	for i := range 10 {
		waitCondition(t, a, admin, nsV, fmt.Sprintf("web-%d", i), gate, v1.ConditionTrue, "ProbeSucceeded", 60*time.Second)
	}
	// The costliest allowed checks do not match (no "b" in the body): a
	// Failure, with the check named and never the body.
	waitCondition(t, a, admin, nsC, "worst", gate, v1.ConditionFalse, "ProbeFailed", 60*time.Second)
	waitEvent(t, a, admin, nsC, "worst", "ProbeFailureBelowThreshold", "the body does not match expect.bodyRegex")

	time.Sleep(2 * time.Second)
	v.holdVictimsOnTime(t, a.cmd.Process.Pid, victims)
	if code := a.stop(syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Fatalf("probed exited %d after SIGTERM; stderr:\n%s", code, tail(a.stderr.String(), 20))
	}
}
