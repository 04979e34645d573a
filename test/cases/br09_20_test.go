package cases

import (
	"net/http"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/probed/probed/manager"
	"github.com/probed/probed/manager/results"
	"github.com/probed/probed/runtime"
)

// expectErroredLiveness checks the BR-09 outcome of errored liveness runs:
// every run errored after MaxAttempts tries, liveness still Success, no
// restart, one "probe errored" Unhealthy warning per run (folded by the
// recorder), nothing in prober_probe_total.
func expectErroredLiveness(t *testing.T, e *env, pod *v1.Pod, wantRuns int, errText string) {
	t.Helper()
	runs := e.runsOf("app", runtime.Liveness)
	if len(runs) < wantRuns {
		t.Fatalf("liveness runs %d, want at least %d", len(runs), wantRuns)
	}
	for i, r := range runs {
		if r.Err == nil {
			t.Fatalf("run %d: %v %q, want errored", i+1, r.Result, r.Message)
		}
		if r.Attempts != runtime.MaxAttempts {
			t.Errorf("run %d: %d tries, want %d", i+1, r.Attempts, runtime.MaxAttempts)
		}
		if !strings.Contains(r.Err.Error(), errText) {
			t.Errorf("run %d: error %q, want it to mention %q", i+1, r.Err, errText)
		}
	}
	cs := e.container(pod.UID, "app")
	if got, ok := e.cached(runtime.Liveness, cs.ContainerID); !ok || got != results.Success {
		t.Errorf("liveness cached %v (found %v), want Success (no state change)", got, ok)
	}
	if rs := e.restartList(); len(rs) != 0 || cs.RestartCount != 0 {
		t.Errorf("restarts %+v (restartCount %d), want none", rs, cs.RestartCount)
	}
	var n int
	for _, ev := range e.eventsMatching("Liveness probe errored and resulted in ") {
		if ev.Type != v1.EventTypeWarning || ev.Reason != manager.ReasonUnhealthy || !strings.Contains(ev.Message, errText) {
			t.Errorf("event %+v, want a Warning Unhealthy naming %q", ev, errText)
		}
		if ev.FieldPath != "spec.containers{app}" || ev.Pod != pod.Name {
			t.Errorf("event about %s %s, want the container", ev.Pod, ev.FieldPath)
		}
		n += ev.Count
	}
	if n != len(runs) {
		t.Errorf("%d \"probe errored\" events for %d runs", n, len(runs))
	}
	for _, s := range e.gather(manager.MetricProbeTotal) {
		if s.labels["pod_uid"] == string(pod.UID) && s.labels["probe_type"] == "Liveness" {
			t.Errorf("prober_probe_total counted an errored probe: %v = %v", s.labels, s.value)
		}
	}
}

// BR-09 (a): a body cut off after 10 of 1000 bytes errors the probe: each
// tick is tried 3 times and then discarded; liveness stays Success, no
// restart, a "probe errored" event, nothing counted.
func TestBR09_CutOffBodyIsErrored(t *testing.T) {
	e := newEnv(t)
	srv := startServer(t, e.clk, "127.0.0.1:0", cutOffBody)
	pod := e.add(newPod("br09a", v1.Container{Name: "app",
		LivenessProbe: timing(httpProbe("/h", srv.Port), 0, 2, 1, 0, 2)}))
	e.advance(10*time.Second, 100*time.Millisecond)
	expectErroredLiveness(t, e, pod, 4, "unexpected EOF")
	runs := e.runsOf("app", runtime.Liveness)
	if n := len(srv.requests("/h")); n != runtime.MaxAttempts*len(runs) {
		t.Errorf("server saw %d requests for %d runs, want %d tries each", n, len(runs), runtime.MaxAttempts)
	}
}

// BR-09 (b): an executable that does not exist (reported by the runner as
// an error, not an exit code) errors the probe the same way.
func TestBR09_MissingBinaryIsErrored(t *testing.T) {
	e := newEnv(t)
	pod := e.add(newPod("br09b", v1.Container{Name: "app",
		LivenessProbe: timing(execProbe("/no/such/binary"), 0, 2, 0, 0, 2)}))
	e.advance(10*time.Second, 100*time.Millisecond)
	expectErroredLiveness(t, e, pod, 4, "/no/such/binary")
}

// BR-09, exit code variant: the same missing binary run through sh -c
// exits 127, which is a normal Failure: restart at the 2nd failure, and the
// failures are counted.
func TestBR09_ExitCode127IsFailure(t *testing.T) {
	e := newEnv(t)
	pod := e.add(newPod("br09c", v1.Container{Name: "app",
		LivenessProbe: timing(execProbe("sh", "-c", "/no/such/binary"), 0, 2, 0, 0, 2)}))
	e.advance(5*time.Second, 100*time.Millisecond)
	expectRestartAtFailure(t, e, "app", 2)
	if n := e.probeTotal(pod, "app", "Liveness", "failed"); n < 2 {
		t.Errorf("prober_probe_total{Liveness,failed} = %v, want the failures counted", n)
	}
	if evs := e.eventsMatching("Liveness probe failed: "); len(evs) == 0 {
		t.Errorf("no \"Liveness probe failed\" event: %+v", e.eventList())
	}
	if evs := e.eventsMatching("probe errored"); len(evs) != 0 {
		t.Errorf("exit code 127 reported as errored: %+v", evs)
	}
}

// BR-20: a named port resolves to the containerPort (not the hostPort);
// an unknown port name errors every attempt with a message naming it, and
// errored liveness never restarts.
func TestBR20_NamedPorts(t *testing.T) {
	e := newEnv(t)
	srv := startServer(t, e.clk, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	hostPort := freePort(t)
	ready := timing(httpProbe("/ready", 0), 0, 0, 0, 0, 0)
	ready.HTTPGet.Port = intstr.FromString("http-alt")
	live := timing(tcpProbe(0), 0, 1, 0, 0, 1)
	live.TCPSocket.Port = intstr.FromString("metrcis")
	pod := e.add(newPod("br20", v1.Container{Name: "app",
		Ports:          []v1.ContainerPort{{Name: "http-alt", ContainerPort: int32(srv.Port), HostPort: int32(hostPort)}},
		ReadinessProbe: ready,
		LivenessProbe:  live,
	}))
	e.advance(10*time.Second, 100*time.Millisecond)

	if n := len(srv.requests("/ready")); n == 0 {
		t.Fatalf("no readiness request reached the containerPort")
	}
	for i, r := range e.runsOf("app", runtime.Readiness) {
		if r.Err != nil || r.Result != runtime.Success {
			t.Fatalf("readiness run %d: %v %v %q, want Success", i+1, r.Result, r.Err, r.Message)
		}
	}
	if cs := e.container(pod.UID, "app"); !cs.Ready {
		t.Errorf("Ready = false, want true")
	}
	expectErroredLiveness(t, e, pod, 9, `port "metrcis" not found`)
}
