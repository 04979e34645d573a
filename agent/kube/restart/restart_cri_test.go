package restart_test

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/probed/probed/agent/actuate"
	"github.com/probed/probed/agent/events"
	"github.com/probed/probed/agent/kube/cri"
	"github.com/probed/probed/agent/kube/restart"
	"github.com/probed/probed/internal/critest"
	"github.com/probed/probed/runtime"
)

// criEnv is the actuator on a real containerd (test/cri/env.sh): the
// container is created through the CRI as the kubelet would.
type criEnv struct {
	act    *actuate.Queue
	client *cri.Client
	reg    *prometheus.Registry
	events *events.Recorder
	sb     *critest.Sandbox
}

func newCRIEnv(t *testing.T) *criEnv {
	t.Helper()
	e := &criEnv{reg: prometheus.NewRegistry(), events: events.New(100, slog.New(slog.DiscardHandler), nil)}
	rs := critest.Runtime(t)
	var err error
	e.client, err = cri.Connect(context.Background(), cri.Options{Endpoint: critest.Endpoint(t), Registerer: e.reg, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.client.Close() })
	step, err := restart.New(restart.Options{Runtime: e.client, Recorder: e.events, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	e.act, err = actuate.New(actuate.Options{Step: step, Texts: restart.Texts, Recorder: e.events, Workers: restart.DefaultWorkers,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = e.act.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	e.sb = critest.RunPodSandbox(t, rs)
	return e
}

// own is pod(grace, lifecycle) as the pod of e's sandbox: its UID,
// namespace and name are what the sandbox's and its containers' labels
// name (the actuator checks them before it acts).
func (e *criEnv) own(grace int64, lifecycle *v1.Lifecycle) *v1.Pod {
	p := pod(grace, lifecycle)
	md := e.sb.Config.Metadata
	p.Namespace, p.Name, p.UID = md.Namespace, md.Name, types.UID(md.Uid)
	return p
}

// waitExited waits up to limit for the container to exit and returns its
// exit code and how long it took.
func waitExited(t *testing.T, id string, limit time.Duration) (int32, time.Duration) {
	t.Helper()
	rs := critest.Runtime(t)
	start := time.Now()
	for {
		state, code := critest.State(t, rs, id)
		if state == runtimeapi.ContainerState_CONTAINER_EXITED {
			return code, time.Since(start)
		}
		if time.Since(start) > limit {
			t.Fatalf("container %s still %v after %v", id, state, limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stops is probed_cri_calls_total{method="StopContainer",code="OK"}.
func (e *criEnv) stops(t *testing.T) float64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if mf.GetName() == "probed_cri_calls_total" && labels["method"] == cri.MethodStopContainer && labels["code"] == "OK" {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// A liveness failure runs the preStop hook in the container (exec through
// ExecSync: its mark is seen), then stops the container through CRI
// StopContainer within the grace period; the container's own SIGTERM
// handler runs after the hook. Once per instance: a second report does
// nothing.
func TestRestartRunsPreStopThenStops(t *testing.T) {
	e := newCRIEnv(t)
	mark := critest.HostDir(t)
	id := e.sb.Start(t, critest.Container{
		Name:    "app",
		Command: []string{"sh", "-c", `trap "echo term >> /mark/log; exit 0" TERM; while :; do sleep 1; done`},
		Mounts:  []*runtimeapi.Mount{{ContainerPath: "/mark", HostPath: mark}},
	})
	p := e.own(5, &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"sh", "-c", "echo prestop >> /mark/log"}}}})
	f := actuate.Failure{Pod: p, Container: "app", ContainerID: "containerd://" + id, Probe: runtime.Liveness}
	e.act.ContainerFailed(f)
	e.act.ContainerFailed(f)
	code, took := waitExited(t, id, 10*time.Second)
	if code != 0 || took > 5*time.Second {
		t.Fatalf("exit %d after %v, want 0 within the grace period of 5 s", code, took)
	}
	if b, _ := os.ReadFile(filepath.Join(mark, "log")); string(b) != "prestop\nterm\n" {
		t.Fatalf("marks %q, want the preStop hook's, then the SIGTERM handler's", b)
	}
	time.Sleep(200 * time.Millisecond)
	if n := e.stops(t); n != 1 {
		t.Fatalf("%v StopContainer calls, want 1", n)
	}
	if ev := e.events.List(); len(ev) != 1 || ev[0].Reason != restart.ReasonKilling {
		t.Fatalf("events %+v, want one Killing", ev)
	}
}

// K3: a container that ignores SIGTERM is killed when the grace period
// (the probe's terminationGracePeriodSeconds, 2 s) ends: exit 137.
func TestRestartKillsAtTheGracePeriod(t *testing.T) {
	e := newCRIEnv(t)
	id := e.sb.Start(t, critest.Container{Name: "app", Command: []string{"sh", "-c", `trap "" TERM; while :; do sleep 1; done`}})
	e.act.ContainerFailed(actuate.Failure{Pod: e.own(2, nil), Container: "app", ContainerID: "containerd://" + id, Probe: runtime.Startup})
	code, took := waitExited(t, id, 10*time.Second)
	if code != 137 || took < 2*time.Second || took > 5*time.Second {
		t.Fatalf("exit %d after %v, want 137 (SIGKILL) after the grace period of 2 s", code, took)
	}
}

// An httpGet preStop hook goes to the pod's IP and the container's port
// with the kubelet's lifecycle User-Agent, before the stop.
func TestRestartHTTPPreStop(t *testing.T) {
	e := newCRIEnv(t)
	got := make(chan *http.Request, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r
		w.WriteHeader(http.StatusInternalServerError) // any response is a hook that ran
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	n, _ := strconv.Atoi(port)
	id := e.sb.Start(t, critest.Container{Name: "app", Command: []string{"sh", "-c", `trap "exit 0" TERM; while :; do sleep 1; done`}})
	p := e.own(5, &v1.Lifecycle{PreStop: &v1.LifecycleHandler{HTTPGet: &v1.HTTPGetAction{Path: "/bye", Port: intstr.FromInt(n)}}})
	e.act.ContainerFailed(actuate.Failure{Pod: p, Container: "app", ContainerID: "containerd://" + id, Probe: runtime.Liveness})
	select {
	case r := <-got:
		if r.URL.Path != "/bye" || r.UserAgent() != restart.LifecycleUserAgent {
			t.Fatalf("hook request %s UA %q", r.URL, r.UserAgent())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no preStop request")
	}
	waitExited(t, id, 10*time.Second)
	if n := len(e.events.List()); n != 1 {
		t.Fatalf("events %+v: want Killing only (a 500 is a hook that ran)", e.events.List())
	}
}

// A failure whose status names another pod's container, or a 12-character
// prefix of the pod's own container's ID, stops nothing: a Warning Event
// says why, no StopContainer is made, and both containers run on.
func TestRestartRefusesAContainerNotThePods(t *testing.T) {
	e := newCRIEnv(t)
	own := e.sb.Start(t, critest.Container{Name: "app", Command: []string{"sleep", "3600"}})
	other := critest.RunPodSandbox(t, critest.Runtime(t)).Start(t, critest.Container{Name: "app", Command: []string{"sleep", "3600"}})
	for i, id := range []string{"containerd://" + other, "containerd://" + own[:12]} {
		p := e.own(2, nil)
		p.Spec.Containers[0].Name = "app"
		e.act.ContainerFailed(actuate.Failure{Pod: p, Container: "app", ContainerID: id, Probe: runtime.Liveness})
		deadline := time.Now().Add(10 * time.Second)
		for len(e.events.List()) <= i {
			if time.Now().After(deadline) {
				t.Fatalf("no Event for %s", id)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	want := []string{"is not container app of pod", "is not a container's full ID"}
	for i, ev := range e.events.List() {
		if ev.Reason != restart.ReasonLivenessProbeFailed || !strings.Contains(ev.Message, "the container is not restarted") || !strings.Contains(ev.Message, want[i]) {
			t.Errorf("event %d: %s %q, want %s saying %q", i, ev.Reason, ev.Message, restart.ReasonLivenessProbeFailed, want[i])
		}
	}
	if n := e.stops(t); n != 0 {
		t.Fatalf("%v StopContainer calls", n)
	}
	rs := critest.Runtime(t)
	for _, id := range []string{own, other} {
		if state, _ := critest.State(t, rs, id); state != runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Fatalf("container %s %v", id, state)
		}
	}
}
