package cases

import (
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/probed/probed/agent/manifest"
	"github.com/probed/probed/manager"
	"github.com/probed/probed/manager/results"
	"github.com/probed/probed/runtime"
)

// entries returns the number of probe workers registered with the
// manager's scheduler.
func (e *env) entries() int {
	e.t.Helper()
	st, ok := manager.StatsOf(e.mgr)
	if !ok {
		e.t.Fatal("StatsOf: not a manager built by New")
	}
	return st.Entries
}

// BR-15: at the deletion timestamp T the kubelet's termination sequence
// (K5) stops liveness and startup; the app then fails /alive and /ready
// while it drains. No liveness kill after T, no /alive request after T+S;
// readiness keeps running every second and Ready=false by T+2 s+S.
func TestBR15_ProbesWhileTerminating(t *testing.T) {
	e := newEnv(t)
	var draining atomic.Bool
	srv := startServer(t, e.clk, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		switch {
		case !draining.Load():
			w.WriteHeader(http.StatusOK)
		case r.URL.Path == "/alive":
			w.WriteHeader(http.StatusInternalServerError)
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	pod := newPod("br15", v1.Container{Name: "app",
		LivenessProbe:  timing(httpProbe("/alive", srv.Port), 0, 1, 0, 0, 1),
		ReadinessProbe: timing(httpProbe("/ready", srv.Port), 0, 1, 0, 0, 2),
	})
	pod.Spec.TerminationGracePeriodSeconds = ptr(int64(60))
	pod = e.add(pod)
	e.advance(5*time.Second, 100*time.Millisecond)
	cs := e.container(pod.UID, "app")
	if !cs.Ready || len(srv.requests("/alive")) == 0 {
		t.Fatalf("not Ready and probed before the deletion: ready=%v, /alive requests %d", cs.Ready, len(srv.requests("/alive")))
	}
	if n := e.entries(); n != 2 {
		t.Fatalf("%d workers, want 2", n)
	}

	// T: the pod is marked deleted and the app starts draining; the
	// kubelet publishes the status, then stops liveness and startup (K5).
	T := e.clk.Now()
	draining.Store(true)
	deleting := e.pod(pod.UID)
	deleting.DeletionTimestamp = &metav1.Time{Time: T}
	deleting.DeletionGracePeriodSeconds = ptr(int64(60))
	e.store.Put(deleting)
	e.mgr.StopLivenessAndStartup(deleting)
	e.settle()

	var readyFalseAt time.Time
	e.advanceTo(T.Add(30*time.Second), 100*time.Millisecond, func() bool {
		p := e.pod(pod.UID)
		if readyFalseAt.IsZero() && !p.Status.ContainerStatuses[0].Ready && condition(p, v1.PodReady) == v1.ConditionFalse {
			readyFalseAt = e.clk.Now()
		}
		return true
	})

	if rs := e.restartList(); len(rs) != 0 {
		t.Errorf("restarts after the deletion: %+v", rs)
	}
	if evs := e.eventsMatching("will be restarted"); len(evs) != 0 {
		t.Errorf("restart events: %+v", evs)
	}
	for _, r := range srv.requests("/alive") {
		if r.At.After(T.Add(S)) {
			t.Errorf("/alive requested at T+%v", r.At.Sub(T))
		}
	}
	if n := e.entries(); n != 1 {
		t.Errorf("%d workers during termination, want only readiness", n)
	}
	cs = e.container(pod.UID, "app")
	if r, ok := e.cached(runtime.Liveness, cs.ContainerID); ok && r != results.Success {
		t.Errorf("liveness cached %v after the stop, want Success or none", r)
	}
	var after []time.Time
	for _, r := range srv.requests("/ready") {
		if r.At.After(T) {
			after = append(after, r.At)
		}
	}
	if len(after) < 29 {
		t.Errorf("%d /ready requests in the 30 s after T, want one every second", len(after))
	}
	for i := 1; i < len(after); i++ {
		if d := after[i].Sub(after[i-1]); d > time.Second+100*time.Millisecond {
			t.Errorf("/ready gap %v at T+%v, want every second", d, after[i-1].Sub(T))
		}
	}
	if readyFalseAt.IsZero() || readyFalseAt.Sub(T) > 2*time.Second+S {
		t.Errorf("Ready=false at T+%v, want by T+2.5 s", readyFalseAt.Sub(T))
	}

	// killPod done: RemovePod ends readiness too.
	e.mgr.RemovePod(deleting)
	e.settle()
	if n := e.entries(); n != 0 {
		t.Errorf("%d workers after RemovePod", n)
	}
}

// BR-15, the W9 path: a liveness worker created from a pod that already
// carries a deletion timestamp (e.g. after an agent restart) forces
// Success and stops without probing.
func TestBR15_WorkerOfDeletingPodForcesSuccess(t *testing.T) {
	e := newEnv(t)
	srv := startServer(t, e.clk, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
	})
	pod := newPod("br15w", v1.Container{Name: "app",
		LivenessProbe:  timing(httpProbe("/alive", srv.Port), 0, 1, 0, 0, 1),
		ReadinessProbe: timing(httpProbe("/ready", srv.Port), 0, 1, 0, 0, 2),
	})
	pod.DeletionTimestamp = &metav1.Time{Time: e.clk.Now()}
	pod = e.add(pod)
	e.advance(5*time.Second, 100*time.Millisecond)
	if n := len(srv.requests("/alive")); n != 0 {
		t.Errorf("%d /alive requests for a deleting pod", n)
	}
	if len(srv.requests("/ready")) == 0 {
		t.Errorf("readiness of a deleting pod not probed")
	}
	if rs := e.restartList(); len(rs) != 0 {
		t.Errorf("restarts: %+v", rs)
	}
	if n := e.entries(); n != 1 {
		t.Errorf("%d workers, want only readiness", n)
	}
	if !strings.Contains(e.logs.String(), "Pod deletion requested, setting probe result to success") {
		t.Errorf("no W9 log line")
	}
}

// BR-16: a liveness or startup kill uses the probe's
// terminationGracePeriodSeconds (5), not the pod's (3600); without the
// field it uses the pod's; on a readiness probe the field is rejected, and
// so are values below 1. (The SIGTERM/SIGKILL sequence itself belongs to a
// container runtime: the store reports the grace period it would use.)
func TestBR16_ProbeLevelGracePeriod(t *testing.T) {
	e := newEnv(t)
	mk := func(name string, set func(c *v1.Container)) *v1.Pod {
		c := v1.Container{Name: "app"}
		set(&c)
		p := newPod(name, c)
		p.Spec.TerminationGracePeriodSeconds = ptr(int64(3600))
		return p
	}
	withGrace := func(p *v1.Probe) *v1.Probe {
		p.TerminationGracePeriodSeconds = ptr(int64(5))
		return p
	}
	a := e.add(mk("br16a", func(c *v1.Container) {
		c.LivenessProbe = withGrace(timing(execProbe("false"), 0, 1, 0, 0, 1))
	}))
	b := e.add(mk("br16b", func(c *v1.Container) {
		c.StartupProbe = withGrace(timing(execProbe("false"), 0, 1, 0, 0, 1))
	}))
	d := e.add(mk("br16d", func(c *v1.Container) {
		c.LivenessProbe = timing(execProbe("false"), 0, 1, 0, 0, 1)
	}))
	e.advance(3*time.Second, 100*time.Millisecond)

	first := map[string]restartRec{}
	for _, r := range e.restartList() {
		if _, ok := first[r.Pod.Name]; !ok {
			first[r.Pod.Name] = r
		}
	}
	for _, want := range []struct {
		pod    *v1.Pod
		reason string
		grace  int64
	}{{a, "LivenessProbe", 5}, {b, "StartupProbe", 5}, {d, "LivenessProbe", 3600}} {
		r, ok := first[want.pod.Name]
		if !ok {
			t.Errorf("%s: no restart", want.pod.Name)
			continue
		}
		if r.Reason != want.reason || r.GracePeriodSeconds != want.grace {
			t.Errorf("%s: restart reason %s grace %d s, want %s with %d s", want.pod.Name, r.Reason, r.GracePeriodSeconds, want.reason, want.grace)
		}
	}

	// (c) and values below 1: rejected at validation.
	for _, tc := range []struct {
		name  string
		set   func(c *v1.Container)
		field string
	}{
		{"readiness", func(c *v1.Container) {
			c.ReadinessProbe = withGrace(execProbe("true"))
		}, "spec.containers[0].readinessProbe.terminationGracePeriodSeconds"},
		{"liveness-0", func(c *v1.Container) {
			c.LivenessProbe = execProbe("true")
			c.LivenessProbe.TerminationGracePeriodSeconds = ptr(int64(0))
		}, "spec.containers[0].livenessProbe.terminationGracePeriodSeconds"},
		{"startup-negative", func(c *v1.Container) {
			c.StartupProbe = execProbe("true")
			c.StartupProbe.TerminationGracePeriodSeconds = ptr(int64(-1))
		}, "spec.containers[0].startupProbe.terminationGracePeriodSeconds"},
	} {
		p := mk("br16c", tc.set)
		manifest.SetDefaults(p)
		errs := manifest.ValidatePod(p)
		found := false
		for _, err := range errs {
			found = found || err.Field == tc.field
		}
		if !found {
			t.Errorf("%s: validation errors %v, want one on %s", tc.name, errs, tc.field)
		}
	}
}

// BR-18: a TCP probe proves the handshake only. (a) A listener whose app
// never accepts and (b) one that accepts and closes at once both pass;
// (c) nothing listening fails fast, then a restart. The prober sends no
// payload and closes right after connecting. ((d), a port that drops SYNs,
// needs a packet filter and is not covered.)
func TestBR18_TCPProbe(t *testing.T) {
	t.Run("a-never-accepts", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		expectTCPSuccess(t, ln.Addr().(*net.TCPAddr).Port)
	})
	t.Run("b-accept-and-close", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Go(func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		})
		defer wg.Wait()
		defer ln.Close()
		expectTCPSuccess(t, ln.Addr().(*net.TCPAddr).Port)
	})
	t.Run("no-payload", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		type read struct {
			n    int
			err  error
			took time.Duration
		}
		reads := make(chan read, 100)
		var wg sync.WaitGroup
		wg.Go(func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				begin := time.Now()
				_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
				n, err := io.Copy(io.Discard, c)
				reads <- read{int(n), err, time.Since(begin)}
				c.Close()
			}
		})
		expectTCPSuccess(t, ln.Addr().(*net.TCPAddr).Port)
		ln.Close()
		wg.Wait()
		close(reads)
		got := 0
		for r := range reads {
			got++
			var ne net.Error
			if r.n != 0 || errors.As(r.err, &ne) && ne.Timeout() || r.took > time.Second {
				t.Errorf("target read %d bytes, err %v after %v; want nothing and an immediate close", r.n, r.err, r.took)
			}
		}
		if got == 0 {
			t.Errorf("no connection accepted")
		}
	})
	t.Run("c-nothing-listening", func(t *testing.T) {
		e := newEnv(t)
		port := freePort(t)
		e.add(newPod("br18c", v1.Container{Name: "app",
			LivenessProbe: timing(tcpProbe(port), 0, 1, 1, 0, 1)}))
		var took []time.Duration
		for i := 0; i < 3; i++ {
			begin := time.Now()
			e.advance(time.Second, time.Second)
			took = append(took, time.Since(begin))
		}
		expectRestartAtFailure(t, e, "app", 1)
		for _, r := range e.runsOf("app", runtime.Liveness) {
			if !strings.Contains(r.Message, "connection refused") {
				t.Errorf("failure message %q, want connection refused", r.Message)
			}
		}
		for i, d := range took {
			if d > 900*time.Millisecond {
				t.Errorf("step %d took %v, want a refused connection to fail well under the 1 s timeout", i, d)
			}
		}
	})
}

func expectTCPSuccess(t *testing.T, port int) {
	t.Helper()
	e := newEnv(t)
	pod := e.add(newPod("br18", v1.Container{Name: "app",
		LivenessProbe: timing(tcpProbe(port), 0, 1, 1, 0, 1)}))
	e.advance(5*time.Second, 100*time.Millisecond)
	runs := e.runsOf("app", runtime.Liveness)
	if len(runs) < 4 {
		t.Fatalf("%d liveness attempts in 5 s", len(runs))
	}
	for i, r := range runs {
		if r.Err != nil || r.Result != runtime.Success {
			t.Fatalf("attempt %d: %v %v %q, want Success", i+1, r.Result, r.Err, r.Message)
		}
	}
	if rs := e.restartList(); len(rs) != 0 {
		t.Errorf("restarts %+v", rs)
	}
	if cs := e.container(pod.UID, "app"); cs.RestartCount != 0 {
		t.Errorf("restartCount %d", cs.RestartCount)
	}
}
