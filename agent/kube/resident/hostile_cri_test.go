package resident_test

import (
	"fmt"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/probed/probed/agent/kube/cri"
	"github.com/probed/probed/agent/kube/resident"
	"github.com/probed/probed/internal/critest"
	probeexec "github.com/probed/probed/plugins/exec"
	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/tenant"
)

// A tenant owns its container's /bin/sh, so the resident helper may be a
// hostile program: what it writes, and what its runs print, must cost the
// agent a bounded amount whatever it does (runtime/tenant). Each case
// replaces /bin/sh in a real container of the real containerd, as a tenant
// would, and runs exec probes through the resident runner.

// hostileSh starts a container whose /bin/sh is script (a busybox sh
// script), written at the container's start, and waits until it is.
func (e *criEnv) hostileSh(t *testing.T, name, script string) (string, string) {
	t.Helper()
	id, status := e.start(t, critest.Container{Name: name,
		Command: []string{"/bin/busybox", "sh", "-c", `rm /bin/sh && printf '%s' "$HOSTILE" > /bin/sh && chmod 755 /bin/sh && exec /bin/busybox sleep 3600`},
		Env:     []*runtimeapi.KeyValue{{Key: "HOSTILE", Value: []byte("#!/bin/busybox sh\n" + script)}},
	})
	// /bin/sh may be missing for a moment (between its rm and its
	// printf), and an exec into a container whose first process is just
	// being replaced (its exec of sleep) can fail: asked again.
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, _, err := e.rs.ExecSync(critest.Context(t), id, []string{"/bin/busybox", "cat", "/bin/sh"}, 10*time.Second)
		if err == nil && strings.Contains(string(out), script) {
			return id, status
		}
		if time.Now().After(deadline) {
			t.Fatalf("/bin/sh not replaced within 30 s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// untilMode runs `/bin/true` on the container until its mode is want.
func (e *criEnv) untilMode(t *testing.T, status, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for e.runner.Mode(status) != want {
		if out, err := probe(t, e.runner, status, 5*time.Second, "/bin/true"); err != nil || out.Result != runtime.Success {
			t.Fatalf("run: %+v, %v", out, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("mode %q after 30 s, want %q", e.runner.Mode(status), want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// untilNoSession waits until the runner holds no helper session.
func (e *criEnv) untilNoSession(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for e.runner.Sessions() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d helper sessions still open 15 s after the helper said it cannot run", e.runner.Sessions())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A helper that says it cannot run and holds its stream open: its session
// is closed at once (it used to stay with its goroutines, 9 a container,
// for the container's life), and the container's exec probes run through
// ExecSync.
func TestCRIHostileHelperUnsupportedAndHolding(t *testing.T) {
	e := newCRIEnv(t, cri.DefaultRequestTimeout, resident.Options{})
	before := goruntime.NumGoroutine()
	var statuses []string
	for i := range 3 {
		_, status := e.hostileSh(t, fmt.Sprintf("c%d", i), "printf '\\036unsupported no cat in PATH\\n'\nexec /bin/busybox sleep 3600\n")
		statuses = append(statuses, status)
		e.untilMode(t, status, resident.ModeExecSync+" (no cat in PATH)")
	}
	e.untilNoSession(t)
	// client-go's WebSocket heartbeat of a closed session ends at its next
	// beat (5 s).
	deadline := time.Now().Add(15 * time.Second)
	for goruntime.NumGoroutine() > before+2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines, %d before three helpers that hold their streams", goruntime.NumGoroutine(), before)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, status := range statuses {
		if out, err := probe(t, e.runner, status, 5*time.Second, "/bin/echo", "ok"); err != nil || out.Output != "ok\n" {
			t.Fatalf("through ExecSync: %+v, %v", out, err)
		}
	}
}

// A helper that reports an environment over tenant.HelperEnvironmentBytes
// (300 KB of garbage here; it used to cost 0.94 MiB of the agent's heap
// per helper, kept for its life): the container cannot host a helper, the
// Event says why, and its session is closed.
func TestCRIHostileHelperEnvironmentFlood(t *testing.T) {
	e := newCRIEnv(t, cri.DefaultRequestTimeout, resident.Options{})
	_, status := e.hostileSh(t, "app", "/bin/busybox head -c 300000 /dev/zero | /bin/busybox tr '\\0' x\nexec /bin/busybox sleep 3600\n")
	why := "its environment is over 64 KiB"
	e.untilMode(t, status, resident.ModeExecSync+" ("+why+")")
	e.untilNoSession(t)
	evs := e.events.Lines()
	if len(evs) != 1 || !strings.HasSuffix(evs[0], "not a resident helper: "+why) {
		t.Fatalf("events %q, want one saying %q", evs, why)
	}
	if n := testutil.ToFloat64(e.runner.Starts().WithLabelValues(resident.ReasonUnsupported)); n != 1 {
		t.Fatalf("starts{unsupported} = %v, want 1 (no retry)", n)
	}
}

// Helpers of containers with a large (legitimate) environment keep none of
// it once they are ready: the dumps and the start's buffers are let go
// (each helper used to keep both dumps and a buffer as large as the
// larger, about three times the environment, for its life). The heap of
// ready helpers with a 60 KiB environment is compared with that of
// helpers with a 1-byte one (a helper's session, client-go's WebSocket,
// costs about 150 KiB either way).
func TestCRIHelperKeepsNoBufferOfItsStart(t *testing.T) {
	e := newCRIEnv(t, cri.DefaultRequestTimeout, resident.Options{})
	heap := func() int64 {
		var ms goruntime.MemStats
		goruntime.GC()
		goruntime.GC()
		goruntime.ReadMemStats(&ms)
		return int64(ms.HeapAlloc)
	}
	const n = 6
	perHelper := func(prefix string, env int) int64 {
		var statuses []string
		for i := range n {
			_, status := e.start(t, critest.Container{Name: fmt.Sprintf("%s%d", prefix, i),
				Env: []*runtimeapi.KeyValue{{Key: "BIG", Value: []byte(strings.Repeat("v", env))}}})
			statuses = append(statuses, status)
			// A first run through ExecSync: its connection and caches
			// are not the helper's.
			if out, err := probe(t, e.client.Runner(), status, 5*time.Second, "true"); err != nil || out.Result != runtime.Success {
				t.Fatal(out, err)
			}
		}
		base := heap()
		for _, status := range statuses {
			e.warm(t, status)
		}
		return (heap() - base) / n
	}
	small := perHelper("small", 1)
	big := perHelper("big", 60<<10)
	t.Logf("heap per ready helper: %d KiB with a 1-byte environment, %d KiB with a 60 KiB one", small>>10, big>>10)
	if big-small > 48<<10 {
		t.Fatalf("a ready helper with a 60 KiB environment holds %d KiB more than one with a 1-byte one, want none of it", (big-small)>>10)
	}
}

// A command that floods its output through the helper is killed once it
// printed tenant.ExecOutputBytes, and is a Failure saying so, at once
// rather than at its timeout (the agent used to read and drop it for the
// timeout and 5 s more: 0.32 of a core). The helper stays and runs the
// next command.
func TestCRIHelperRunFloodIsKilled(t *testing.T) {
	e := newCRIEnv(t, cri.DefaultRequestTimeout, resident.Options{})
	_, status := e.start(t, critest.Container{})
	e.warm(t, status)
	start := time.Now()
	out, err := probe(t, e.runner, status, 20*time.Second, "yes")
	took := time.Since(start)
	want := (&probeexec.OutputLimitError{Cmd: []string{"yes"}, Limit: tenant.ExecOutputBytes}).Error()
	if err != nil || out.Result != runtime.Failure || out.Output != want {
		t.Fatalf("yes: %+v, %v: want a Failure %q", out.Result, err, want)
	}
	if took > 5*time.Second {
		t.Fatalf("the flood ended after %v, want once it passed the bound, far before its 20 s timeout", took)
	}
	if n := testutil.ToFloat64(e.runner.Lost().WithLabelValues(resident.LostProtocol)); n != 0 {
		t.Fatalf("the helper was replaced (lost{protocol} %v): it obeyed the kill", n)
	}
	if out, err := probe(t, e.runner, status, 5*time.Second, "echo", "ok"); err != nil || out.Output != "ok\n" || e.runner.Mode(status) != resident.ModeResident {
		t.Fatalf("after the flood: %+v, %v, mode %s", out, err, e.runner.Mode(status))
	}
}
