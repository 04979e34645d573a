package agent_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/probed/probed/internal/nettest"
)

// What a target sends stays bounded, through the real agent: one pod whose annotation readiness
// probe has a 250 KB path, every 100 ms, against a closed port (Go's error
// quotes the URL: every failed run's message held the path). The agent
// logs the failure once (a transition; runs are not logged one by one),
// and every string it keeps or shows is cut: the log, the probe history,
// the events, the status page and the pod's page stay a few KiB (they were
// 250 KB per run, per record, per row before).
func TestAgent_HostilePathIsBoundedEverywhere(t *testing.T) {
	closedPort := nettest.ClosedPort(t)
	path := "/" + strings.Repeat("a", 250_000)
	probes := fmt.Sprintf(`[{"container":"app","type":"readiness","periodSeconds":1,"periodMilliseconds":-900,"httpGet":{"path":%q,"port":%d}}]`, path, closedPort)
	ann, _ := json.Marshal(probes)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "flood.yaml"), fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: flood
  annotations:
    probed.io/probes: %s
spec:
  containers:
  - name: app
    image: app
`, ann))
	r := startAgent(t, dir, nil)
	var hist struct {
		Probes []struct {
			Results []json.RawMessage `json:"results"`
		} `json:"probes"`
	}
	r.eventually("the pod", func() bool { _, ok := r.pods()["flood/web"]; return ok })
	// An annotation probe's events say where its threshold stands: one
	// text per count below it, one at it, then one text for
	// every further failure, folded into one event with a count.
	folded := func() int {
		n := 0
		for _, e := range r.events() {
			n = max(n, e.Count)
		}
		return n
	}
	r.eventually("20 failed runs in the history", func() bool {
		r.get("/pods/flood/web/probes", &hist)
		return len(hist.Probes) == 1 && len(hist.Probes[0].Results) == 10 && folded() >= 20
	})
	runs := folded()
	sizes := map[string]int{}
	for _, p := range []string{"/pods/flood/web/probes", "/events", "/", "/pod/flood/web"} {
		sizes[p] = len(r.text(p)) // as served, line-break hints included
	}
	r.stop()
	logs := r.logs.String()
	// /events: the failureThreshold (3) + 1 texts of the probe's events,
	// each message cut to 1 KiB, with their fields.
	for p, limit := range map[string]int{"/pods/flood/web/probes": 11 * 2048, "/events": 6 << 10, "/": 16 << 10, "/pod/flood/web": 40 << 10} {
		if sizes[p] > limit {
			t.Errorf("GET %s: %d bytes, want at most %d", p, sizes[p], limit)
		}
	}
	if len(logs) > 16<<10 {
		t.Errorf("%d bytes of log for %d failed runs, want at most 16 KiB", len(logs), runs)
	}
	if n := strings.Count(logs, `"msg":"probe failed"`); n != 1 {
		t.Errorf("%d \"probe failed\" lines, want 1 (the transition):\n%.3000s", n, logs)
	}
	if strings.Contains(logs, `"msg":"event"`) {
		t.Errorf("a failed run's event was logged:\n%.3000s", logs)
	}
}

// Every other string field of the annotation a tenant writes, 250 KB each,
// one pod per field beside each other in one agent: a field that the
// probe runs with (a request header's name and value, a gRPC service, a
// plugin's parameter) or that refuses the pod (a container's name, a
// host) costs what the path does — each run's record, event, page and log
// line is cut, and a refusal's message too (/manifests).
func TestAgent_HostileStringsAreBoundedEverywhere(t *testing.T) {
	closedPort := nettest.ClosedPort(t)
	huge := strings.Repeat("a", 250_000)
	fields := map[string]string{ // namespace → the element
		"header-value": fmt.Sprintf(`{"container":"app","type":"readiness","periodSeconds":1,"periodMilliseconds":-900,"httpGet":{"port":%d,"httpHeaders":[{"name":"X-A","value":%q}]}}`, closedPort, huge),
		"header-name":  fmt.Sprintf(`{"container":"app","type":"readiness","periodSeconds":1,"periodMilliseconds":-900,"httpGet":{"port":%d,"httpHeaders":[{"name":%q,"value":"v"}]}}`, closedPort, huge),
		"grpc-service": fmt.Sprintf(`{"container":"app","type":"readiness","periodSeconds":1,"periodMilliseconds":-900,"grpc":{"port":%d,"service":%q}}`, closedPort, huge),
		"plugin-param": fmt.Sprintf(`{"container":"app","type":"readiness","periodSeconds":1,"periodMilliseconds":-900,"plugin":{"name":"none-serves-it","params":{"p":%q}}}`, huge),
		"container":    fmt.Sprintf(`{"container":%q,"type":"readiness","tcpSocket":{"port":%d}}`, huge, closedPort),
		"tcp-host":     fmt.Sprintf(`{"container":"app","type":"readiness","periodSeconds":1,"periodMilliseconds":-900,"tcpSocket":{"host":%q,"port":%d}}`, huge, closedPort),
	}
	dir := t.TempDir()
	for ns, elem := range fields {
		ann, _ := json.Marshal("[" + elem + "]")
		writeFile(t, filepath.Join(dir, ns+".yaml"), fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  namespace: %s\n  annotations:\n    probed.io/probes: %s\nspec:\n  containers:\n  - name: app\n    image: app\n", ns, ann))
	}
	r := startAgent(t, dir, nil)
	r.eventually("every pod probed or refused", func() bool {
		pods := r.pods()
		var report struct {
			Rejected []json.RawMessage `json:"rejected"`
		}
		r.get("/manifests", &report)
		return len(pods)+len(report.Rejected) >= len(fields) && len(pods) > 0
	})
	// Runs every 100 ms (a gRPC probe's take its 1 s timeout).
	var hist struct {
		Probes []struct {
			Results []json.RawMessage `json:"results"`
		} `json:"probes"`
	}
	pods := r.pods()
	r.eventually("3 runs of every probed pod", func() bool {
		for name := range pods {
			ns, _, _ := strings.Cut(name, "/")
			r.get("/pods/"+ns+"/web/probes", &hist)
			if len(hist.Probes) != 1 || len(hist.Probes[0].Results) < 3 {
				return false
			}
		}
		return true
	})
	sizes := map[string]int{"/events": len(r.text("/events")), "/": len(r.text("/")), "/manifests": len(r.text("/manifests"))}
	for name := range pods {
		ns, _, _ := strings.Cut(name, "/")
		for _, p := range []string{"/pods/" + ns + "/web/probes", "/pod/" + ns + "/web"} {
			sizes[p] = len(r.text(p))
		}
	}
	r.stop()
	logs := r.logs.String()
	n := len(fields)
	for p, size := range sizes {
		limit := 40 << 10 // a pod's page, a probe's history
		switch p {
		case "/events", "/", "/manifests":
			limit = n * 16 << 10
		}
		if size > limit {
			t.Errorf("GET %s: %d bytes, want at most %d", p, size, limit)
		}
	}
	if len(logs) > n*16<<10 {
		t.Errorf("%d bytes of log, want at most %d", len(logs), n*16<<10)
	}
}
