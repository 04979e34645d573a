package agent_test

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/probed/probed/agent"
	"github.com/probed/probed/internal/nettest"
)

// Issue #5: the last statuses survive a restart of probed (--state-dir).
// Container IDs and restart counts carry over, and a container that was
// Ready and started more than 10 s before probed restarted stays Ready
// until its first real readiness result (M8, M9), even when that result is
// slow to come. (A container restarted less than 10 s before is probed
// afresh, as the kubelet does.)
func TestAgent_StateSurvivesRestart(t *testing.T) {
	var slow atomic.Bool
	var livenessFails atomic.Bool
	livenessFails.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ready":
			if slow.Load() {
				time.Sleep(800 * time.Millisecond)
			}
		case "/alive":
			if livenessFails.Load() {
				w.WriteHeader(http.StatusInternalServerError)
				return
			}
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port

	dir, stateDir := t.TempDir(), t.TempDir()
	// The container started an hour ago (from the manifest's status), so
	// after probed restarts it counts as surviving the restart (M9).
	writeFile(t, filepath.Join(dir, "web.yaml"), fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: web, namespace: ns}
spec:
  containers:
  - name: app
    image: app
    readinessProbe:
      httpGet: {path: /ready, port: %[1]d}
      periodSeconds: 1
      timeoutSeconds: 2
  - name: crashy
    image: app
    livenessProbe:
      httpGet: {path: /alive, port: %[1]d}
      periodSeconds: 1
      failureThreshold: 1
status:
  podIP: 127.0.0.1
  containerStatuses:
  - name: app
    containerID: containerd://first
    state: {running: {startedAt: "2026-01-01T00:00:00Z"}}
`, port))
	withState := func(o *agent.Options) { o.StateDir = stateDir; o.StateInterval = 100 * time.Millisecond }

	a := startAgent(t, dir, withState)
	a.eventually("a restart by liveness", func() bool {
		cs, ok := container(a.pods()["ns/web"], "crashy")
		return ok && cs.RestartCount >= 1
	})
	livenessFails.Store(false)
	a.eventually("Ready", func() bool {
		p := a.pods()["ns/web"]
		cs, _ := container(p, "app")
		return cs.Ready && podReady(p)
	})
	before, _ := container(a.pods()["ns/web"], "crashy")
	a.stop()

	slow.Store(true)
	b := startAgent(t, dir, withState)
	b.eventually("the pod loaded", func() bool { _, ok := b.pods()["ns/web"]; return ok })
	p := b.pods()["ns/web"]
	cs, ok := container(p, "app")
	crashy, ok2 := container(p, "crashy")
	if !ok || !ok2 {
		t.Fatalf("pod not loaded after restart: %s", b.podsSummary())
	}
	if crashy.ContainerID != before.ContainerID || crashy.RestartCount != before.RestartCount || crashy.RestartCount < 1 {
		t.Fatalf("after restart container %s restarts %d, want %s and %d", crashy.ContainerID, crashy.RestartCount, before.ContainerID, before.RestartCount)
	}
	if !cs.Ready || cs.Started == nil || !*cs.Started {
		t.Fatalf("after restart Ready=%v podReady=%v Started=%v, want all true until the first readiness result (M8, M9)", cs.Ready, podReady(p), cs.Started)
	}
}

// M9 ends with the first readiness result: a pod of two
// containers, both started an hour before probed, restored from --state-dir
// with Ready=False, becomes Ready once its readiness probes succeed. Before
// the fix the restored Ready=False kept both containers not ready, which
// kept the pod's Ready False: NotReady forever while every probe succeeded.
func TestAgent_M9_RestoredNotReadyBecomesReady(t *testing.T) {
	tg := nettest.NewTarget(t)
	tg.Set("/ready", http.StatusServiceUnavailable)
	dir, stateDir := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(dir, "two.yaml"), fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: two, namespace: ns}
spec:
  containers:
  - name: a
    image: app
    readinessProbe:
      httpGet: {path: /ready, port: %[1]d}
      periodSeconds: 1
  - name: b
    image: app
    readinessProbe:
      httpGet: {path: /ready, port: %[1]d}
      periodSeconds: 1
status:
  podIP: 127.0.0.1
  containerStatuses:
  - name: a
    containerID: containerd://a1
    state: {running: {startedAt: "2026-01-01T00:00:00Z"}}
  - name: b
    containerID: containerd://b1
    state: {running: {startedAt: "2026-01-01T00:00:00Z"}}
`, tg.Port))
	withState := func(o *agent.Options) { o.StateDir = stateDir; o.StateInterval = 100 * time.Millisecond }

	first := startAgent(t, dir, withState)
	first.eventually("readiness failures", func() bool { return tg.Hits("/ready") >= 2 })
	first.eventually("the pod not ready", func() bool {
		p, ok := first.pods()["ns/two"]
		return ok && !podReady(p)
	})
	first.stop() // writes the state: Ready=False

	tg.Set("/ready", http.StatusOK)
	hitsBefore := tg.Hits("/ready")
	second := startAgent(t, dir, withState)
	second.eventually("the pod Ready after readiness successes", func() bool {
		p := second.pods()["ns/two"]
		a, okA := container(p, "a")
		b, okB := container(p, "b")
		return okA && okB && a.Ready && b.Ready && podReady(p)
	})
	if tg.Hits("/ready") == hitsBefore {
		t.Fatal("Ready without a readiness probe run after the restart")
	}
}
