package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/probed/probed/agent"
	"github.com/probed/probed/agent/events"
	"github.com/probed/probed/agent/statusview"
	"github.com/probed/probed/internal/testlog"
	"github.com/probed/probed/manager"
)

// Periods by state, body checks and the health-event log through the agent (manifest mode, real sockets, the real
// clock): an annotation probe that runs fast until ready and checks the
// body, the events that say where its threshold stands, the health-event
// log and `probed events`.

// statusTarget answers {"status": <state>} with the state the test sets.
type statusTarget struct {
	port int
	mu   sync.Mutex
	st   string
	hits []time.Time
}

func newStatusTarget(t *testing.T, state string) *statusTarget {
	t.Helper()
	tg := &statusTarget{st: state}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		tg.mu.Lock()
		st := tg.st
		tg.hits = append(tg.hits, time.Now())
		tg.mu.Unlock()
		fmt.Fprintf(w, `{"status":%q,"secret":"hunter2-in-the-body"}`, st)
	}))
	t.Cleanup(srv.Close)
	tg.port = srv.Listener.Addr().(*net.TCPAddr).Port
	return tg
}

func (tg *statusTarget) set(state string) {
	tg.mu.Lock()
	tg.st = state
	tg.mu.Unlock()
}

func (tg *statusTarget) hitCount() int {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return len(tg.hits)
}

func fastUntilReadyPod(t *testing.T, dir string, port int) {
	t.Helper()
	writeFile(t, filepath.Join(dir, "starting.yaml"), fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: starting
  namespace: shop
  annotations:
    probed.io/probes: '[{"container": "app", "type": "readiness", "periodSeconds": 30, "unhealthyPeriodMilliseconds": 200, "failureThreshold": 2, "httpGet": {"port": %d, "path": "/health", "expect": {"status": [200], "jsonPath": {"path": "{.status}", "value": "up"}}}}]'
spec:
  containers:
  - name: app
    image: example/app
`, port))
}

func (r *running) transitions(since uint64) events.TransitionList {
	r.t.Helper()
	var out events.TransitionList
	r.get(fmt.Sprintf("/events?type=transition&since=%d", since), &out)
	return out
}

// Fast until ready, with a body check, end to end in the agent: the probe runs every 200 ms
// while the target says "starting" (its body check fails), the pod turns
// Ready within a few hundred milliseconds of the target saying "up", and
// then the probe runs once per 30 s period; the events say where the
// threshold stood and what the verdict changed, never the body; the
// health-event log has the two verdict changes, with the time from the
// container's start to its first success.
func TestAgent_FastUntilReadyWithBodyCheck(t *testing.T) {
	tg := newStatusTarget(t, "starting")
	dir := t.TempDir()
	fastUntilReadyPod(t, dir, tg.port)
	r := startAgent(t, dir, nil)
	r.eventually("three failed runs", func() bool { return tg.hitCount() >= 3 })
	tg.set("up")
	up := time.Now()
	r.eventually("the pod Ready", func() bool { p, ok := r.pods()["shop/starting"]; return ok && podReady(p) })
	if d := time.Since(up); d > 3*time.Second {
		t.Fatalf("Ready %v after the target came up, want about the 200 ms unhealthy period", d)
	}
	hits := tg.hitCount()
	time.Sleep(time.Second)
	if n := tg.hitCount() - hits; n > 1 {
		t.Fatalf("%d runs in the second after Ready, want the 30 s period's (at most 1)", n)
	}

	var msgs []string
	for _, e := range r.events() {
		if e.Pod == "starting" {
			msgs = append(msgs, e.Reason+": "+e.Message)
			if strings.Contains(e.Message, "hunter2") {
				t.Fatalf("an event shows the body: %q", e.Message)
			}
		}
	}
	const fail = `HTTP probe failed: expect.jsonPath {.status} is not "up"`
	for _, want := range []string{
		"ProbeFailureBelowThreshold: Readiness probe failed (1/2, threshold not reached): " + fail,
		"Unhealthy: Readiness probe failed (2/2): container marked not ready: " + fail,
		"Unhealthy: Readiness probe failed (threshold 2 reached): container not ready: " + fail,
		"ProbeSucceeded: Readiness probe succeeded after ",
	} {
		found := false
		for _, m := range msgs {
			found = found || strings.HasPrefix(m, want)
		}
		if !found {
			t.Errorf("no event %q in:\n  %s", want, strings.Join(msgs, "\n  "))
		}
	}

	log := r.transitions(0)
	if len(log.Transitions) != 2 || log.Last != 2 {
		t.Fatalf("health-event log %+v, want 2 entries", log)
	}
	first, ready := log.Transitions[0], log.Transitions[1]
	if first.From != "UNKNOWN" || first.To != "Failure" || first.Probe != "readiness" || first.Handler != "http" || first.Pod != "starting" ||
		first.Run.Result != "failure" || first.Run.Message != fail || first.FirstCheck || first.TimeToFirstSuccessSeconds != 0 {
		t.Errorf("first entry %+v", first)
	}
	if ready.From != "Failure" || ready.To != "Success" || ready.Run.Result != "success" || ready.TimeToFirstSuccessSeconds <= 0 || ready.Run.LatencyMS <= 0 {
		t.Errorf("ready entry %+v", ready)
	}
	if got := r.transitions(1); len(got.Transitions) != 1 || got.Transitions[0].Seq != 2 {
		t.Errorf("?since=1: %+v, want the second entry only", got)
	}

	// `probed events` (statusview.Transitions) prints them as JSON lines.
	var out bytes.Buffer
	if err := statusview.Transitions(context.Background(), statusview.WatchOptions{Server: r.base}, &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("probed events printed %q, want 2 lines", out.String())
	}
	var back events.Transition
	if err := json.Unmarshal([]byte(lines[1]), &back); err != nil || back != ready {
		t.Fatalf("line %q decodes to %+v (%v), want %+v", lines[1], back, err, ready)
	}
}

// --events=transitions: the same pod records one event per
// verdict change, whatever the runs in between.
func TestAgent_EventsTransitions(t *testing.T) {
	tg := newStatusTarget(t, "starting")
	dir := t.TempDir()
	fastUntilReadyPod(t, dir, tg.port)
	r := startAgent(t, dir, func(o *agent.Options) { o.Events = manager.EventsTransitions })
	r.eventually("five failed runs", func() bool { return tg.hitCount() >= 5 })
	tg.set("up")
	r.eventually("the pod Ready", func() bool { p, ok := r.pods()["shop/starting"]; return ok && podReady(p) })
	r.eventually("the second verdict's event", func() bool {
		n := 0
		for _, e := range r.events() {
			if e.Pod == "starting" {
				n++
			}
		}
		return n >= 2
	})
	var msgs []string
	for _, e := range r.events() {
		if e.Pod == "starting" {
			msgs = append(msgs, fmt.Sprintf("%s %s (x%d)", e.Reason, e.Message, e.Count))
		}
	}
	if len(msgs) != 2 || !strings.HasPrefix(msgs[0], "Unhealthy Readiness probe failed (2/2): container marked not ready:") ||
		!strings.HasPrefix(msgs[1], "ProbeSucceeded Readiness probe succeeded after ") || !strings.HasSuffix(msgs[1], "(x1)") {
		t.Fatalf("events:\n  %s\nwant one per verdict change", strings.Join(msgs, "\n  "))
	}
}

// `probed events --watch` (statusview.Transitions with Watch) prints new
// entries as they come, then stops with its context.
func TestAgent_WatchTransitions(t *testing.T) {
	tg := newStatusTarget(t, "starting")
	dir := t.TempDir()
	fastUntilReadyPod(t, dir, tg.port)
	r := startAgent(t, dir, nil)
	ctx, cancel := context.WithCancel(context.Background())
	out := &testlog.Buffer{}
	done := make(chan error, 1)
	go func() {
		done <- statusview.Transitions(ctx, statusview.WatchOptions{Server: r.base, Watch: true, Interval: 50 * time.Millisecond}, out)
	}()
	r.eventually("the first verdict printed", func() bool { return strings.Count(out.String(), "\n") == 1 })
	tg.set("up")
	r.eventually("the second verdict printed", func() bool { return strings.Count(out.String(), "\n") == 2 })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("watch returned %v", err)
	}
	if !strings.Contains(out.String(), `"to":"Success"`) {
		t.Fatalf("watch printed %q", out.String())
	}
}
