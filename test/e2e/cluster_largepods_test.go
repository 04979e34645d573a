package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/probed/probed/internal/kubetest"
)

// largePod is a hostile tenant's pod of about 1.15 MB (annotations may hold 256 KiB in all) (the review's case):
// 900 KB of env in one container, a 150 KB annotation of its own, and in
// its probed.io/probes annotation a readiness probe of the test's listener
// beside a liveness probe whose httpGet path is 100 KB long (it never runs:
// its initial delay is an hour). The cache keeps the probes' annotation and
// drops the rest; /pods shows the 100 KB path.
func largePod(ns, name, node string, port int) *v1.Pod {
	pod := kubetest.NewPod(ns, name, node, "app")
	c := &pod.Spec.Containers[0]
	for i := range 900 {
		c.Env = append(c.Env, v1.EnvVar{Name: fmt.Sprintf("BULK_%03d", i), Value: strings.Repeat("e", 1000)})
	}
	pod.Annotations = map[string]string{
		"tenant.example.com/blob": strings.Repeat("a", 150<<10),
		"probed.io/probes": fmt.Sprintf(`[{"container":"app","type":"readiness","periodSeconds":1,"tcpSocket":{"port":%d}},`+
			`{"container":"app","type":"liveness","initialDelaySeconds":3600,"httpGet":{"path":"/%s","port":%d}}]`, port, strings.Repeat("p", 100<<10), port),
	}
	pod.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: "probed.io/ready"}}
	return pod
}

// The review's large pods, scaled: pods were cached whole, so 70 pods with
// a 250 KB annotation and 1 MB of env took the agent to 239 of 256 MiB,
// and 20 clients that asked for /pods and never read the answer got it
// OOM-killed, /healthz silent for over 2 s. Now the cache keeps what
// probing needs (podsource.Trim) and /pods is written one pod at a time,
// at most 4 at once: with 40 such pods, the agent (the binary without the
// race detector, with the Go memory limit of the DaemonSet's 256 MiB)
// stays far below the limit, and with 20 clients that never read /pods it
// answers /healthz within a second throughout and stays there; each pod
// turns True; /pods and one pod's lookup still answer once the readers are
// gone.
func TestClusterLargePodsStayBounded(t *testing.T) {
	admin := kubetest.Client(t)
	ns, node := kubetest.Namespace(t), kubetest.NodeName(t)
	port := tcpListener(t)
	const pods = 40
	for i := range pods {
		p := largePod(ns, fmt.Sprintf("large-%02d", i), node, port)
		kubetest.CreatePod(t, admin, p)
		kubetest.SetPodRunning(t, admin, ns, p.Name, true)
	}
	const limit = 256 << 20
	// The bound: with the informer's transform off, this test measured the
	// agent at 264 MiB settled and 270 MiB under the stalled readers, over
	// the DaemonSet's limit; with it, 110 and 118 MiB (the informer's first
	// list of 50 MB is decoded whole before the transform trims it, and the
	// Go runtime keeps what it freed below its memory limit).
	const maxRSS = 140 << 20
	a := startClusterAgentWith(t, checkBin, []string{"PROBED_MEMORY_LIMIT=" + strconv.Itoa(limit)}, node, nil)
	for i := range pods {
		waitCondition(t, a, admin, ns, fmt.Sprintf("large-%02d", i), "probed.io/ready", v1.ConditionTrue, "ProbeSucceeded", 60*time.Second)
	}
	settled := processRSS(t, a.cmd.Process.Pid)
	t.Logf("agent with %d pods of 1.25 MB: RSS %d MiB", pods, settled>>20)
	if settled > maxRSS {
		t.Errorf("agent RSS %d MiB with %d large pods, want under %d MiB (the cache keeps what probing needs)", settled>>20, pods, maxRSS>>20)
	}

	// 20 clients ask for /pods and never read.
	addr := strings.TrimPrefix(a.Base, "http://")
	for range 20 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := c.Write([]byte("GET /pods HTTP/1.1\r\nHost: probed\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
	}
	client := &http.Client{Timeout: time.Second}
	var peak int64
	var slowest time.Duration
	for end := time.Now().Add(8 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		start := time.Now()
		resp, err := client.Get(a.Base + "/healthz")
		if err != nil {
			t.Fatalf("/healthz with 20 readers of /pods that never read: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("/healthz = %d", resp.StatusCode)
		}
		slowest = max(slowest, time.Since(start))
		peak = max(peak, processRSS(t, a.cmd.Process.Pid))
	}
	t.Logf("with 20 readers of /pods that never read: /healthz within %v, peak RSS %d MiB", slowest.Round(time.Millisecond), peak>>20)
	if peak > maxRSS {
		t.Errorf("agent RSS peaked at %d MiB with 20 stalled readers of /pods, want under %d MiB", peak>>20, maxRSS>>20)
	}

	// One pod's lookup answers meanwhile; /pods answers whole once a turn
	// is free (the stalled readers' answers are cut after
	// api.PodListStall).
	body, err := apiGet(a.Base, "/pods/"+ns+"/large-07")
	if err != nil || !strings.Contains(string(body), `"name": "large-07"`) || strings.Contains(string(body), "BULK_") {
		t.Fatalf("GET /pods/%s/large-07: %v, %d bytes (env kept: %v)", ns, err, len(body), strings.Contains(string(body), "BULK_"))
	}
	eventually(t, a.proc, 30*time.Second, "GET /pods whole", func() (bool, string) {
		resp, err := http.Get(a.Base + "/pods")
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false, resp.Status
		}
		var list v1.PodList
		if err := json.NewDecoder(bufio.NewReader(resp.Body)).Decode(&list); err != nil {
			return false, err.Error()
		}
		n := 0 // the node's other pods (the agent's own) are listed too
		for _, p := range list.Items {
			if p.Namespace == ns {
				n++
			}
		}
		return n == pods, fmt.Sprintf("%d items, %d of namespace %s", len(list.Items), n, ns)
	})
}
