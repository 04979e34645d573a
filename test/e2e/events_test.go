package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/probed/probed/agent/events"
)

// The health-event log with the real binary in manifest mode: `probed run
// --events=transitions` and `probed events --watch` printing the
// health-event log as JSON lines while the verdicts change, until it is
// interrupted (exit 0).
func TestEventsWatch(t *testing.T) {
	t.Parallel()
	var healthy atomic.Bool
	port := serveHTTP(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if !healthy.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "web.yaml"), fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: shop
  annotations:
    probed.io/probes: '[{"container": "app", "type": "readiness", "periodSeconds": 30, "unhealthyPeriodMilliseconds": 200, "failureThreshold": 2, "httpGet": {"port": %d, "expect": {"status": [200]}}}]'
spec:
  containers:
  - name: app
    image: example/app
`, port))
	listen := "127.0.0.1:" + strconv.Itoa(freePort(t))
	base := "http://" + listen
	agent := startProbed(t, nil, "run", "--manifests", dir, "--listen", listen, "--events", "transitions", "--log-format", "json")
	waitAPI(t, agent, base, false)

	watch := startProbed(t, nil, "events", "--watch", "--interval", "100ms", "--server", listen)
	entries := func() ([]events.Transition, string) {
		var out []events.Transition
		for _, l := range strings.Split(strings.TrimSpace(watch.stdout.String()), "\n") {
			var tr events.Transition
			if l == "" || json.Unmarshal([]byte(l), &tr) != nil {
				continue
			}
			out = append(out, tr)
		}
		return out, watch.stdout.String() + watch.stderr.String()
	}
	eventually(t, agent, 15*time.Second, "the first verdict printed", func() (bool, string) {
		got, all := entries()
		return len(got) == 1, all
	})
	healthy.Store(true)
	eventually(t, agent, 15*time.Second, "the second verdict printed", func() (bool, string) {
		got, all := entries()
		return len(got) == 2, all
	})
	got, _ := entries()
	if got[0].From != "UNKNOWN" || got[0].To != "Failure" || got[0].Run.Message != "HTTP probe failed with statuscode: 503 (expect.status: 200)" ||
		got[1].From != "Failure" || got[1].To != "Success" || got[1].Pod != "web" || got[1].Namespace != "shop" || got[1].Seq != 2 {
		t.Fatalf("entries %+v", got)
	}
	if code := watch.stop(syscall.SIGINT, 10*time.Second); code != 0 {
		t.Fatalf("probed events --watch exited %d after SIGINT; stderr:\n%s", code, watch.stderr.String())
	}
	// --events=transitions: the agent's events are the two verdicts.
	body, err := apiGet(base, "/events")
	if err != nil {
		t.Fatal(err)
	}
	var evs struct{ Events []events.Event }
	if err := json.Unmarshal(body, &evs); err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, e := range evs.Events {
		reasons = append(reasons, e.Reason)
	}
	if strings.Join(reasons, ",") != "Unhealthy,ProbeSucceeded" {
		t.Fatalf("events %s, want the two verdict changes", body)
	}
	if code := agent.stop(syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Fatalf("probed exited %d after SIGTERM", code)
	}
}
