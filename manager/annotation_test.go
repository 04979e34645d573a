package manager

import (
	"context"
	"fmt"
	"net"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/probed/probed/manager/customprobe"
	"github.com/probed/probed/manager/podprobes"
	"github.com/probed/probed/manager/results"
	"github.com/probed/probed/runtime"
)

// listenTCP returns the port of a real loopback listener that accepts and
// closes connections, and the port of one that refuses them.
func listenTCP(t *testing.T) (open, refused int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused = closed.Addr().(*net.TCPAddr).Port
	closed.Close()
	return ln.Addr().(*net.TCPAddr).Port, refused
}

// The probed.io/probes annotation accepts the built-in
// handlers with v1.Probe's field names; such a probe runs through the
// built-in handler (a real TCP dial here) and joins the state machine like a
// spec probe.
func TestAnnotationBuiltinHandlerRuns(t *testing.T) {
	open, refused := listenTCP(t)
	for _, tc := range []struct {
		port int
		want results.Result
	}{{open, results.Success}, {refused, results.Failure}} {
		t.Run(fmt.Sprint(tc.want), func(t *testing.T) {
			e := newTestEnv(t, func(o *Options) { o.Runtime = nil })
			e.status.set("ann", runningStatus(fakeNow, true))
			p := testPod(v1.Container{Name: testContainerName})
			p.UID = "ann"
			p.Annotations = map[string]string{customprobe.Annotation: fmt.Sprintf(
				`[{"container":%q,"type":"readiness","periodSeconds":1,"failureThreshold":1,"tcpSocket":{"port":%d}}]`, testContainerName, tc.port)}
			e.m.AddPod(context.Background(), p)
			w := e.worker("ann", testContainerName, runtime.Readiness)
			if w.rs.Kind != runtime.KindTCP {
				t.Fatalf("kind %q, want %q", w.rs.Kind, runtime.KindTCP)
			}
			e.runOnce(w)
			e.expectCached(runtime.Readiness, tc.want)
		})
	}
}

// Cluster mode: with podprobes.LeaveSpecToKubelet the
// kubelet runs the spec's probes, so only the annotation's probes get
// workers.
func TestSkipSpecProbes(t *testing.T) {
	open, _ := listenTCP(t)
	e := newTestEnv(t, func(o *Options) {
		o.Runtime = nil
		o.Probes.Transforms = []podprobes.Transform{podprobes.LeaveSpecToKubelet}
	})
	e.status.set("skip", runningStatus(fakeNow, true))
	c := probeOf(runtime.Liveness, execProbe())
	p := testPod(c)
	p.UID = "skip"
	p.Annotations = map[string]string{customprobe.Annotation: fmt.Sprintf(
		`[{"container":%q,"type":"readiness","tcpSocket":{"port":%d}}]`, c.Name, open)}
	e.m.AddPod(context.Background(), p)
	if _, ok := e.m.getWorker("skip", c.Name, runtime.Liveness); ok {
		t.Fatal("a worker for the spec's liveness probe exists with LeaveSpecToKubelet")
	}
	if _, ok := e.m.getWorker("skip", c.Name, runtime.Readiness); !ok {
		t.Fatal("no worker for the annotation's readiness probe")
	}
	if n := e.m.workerCount(); n != 1 {
		t.Fatalf("%d workers, want 1", n)
	}
}

// In cluster mode an exec annotation probe is rejected
// (podprobes.RefuseExec); the pod's other probes still run.
func TestAnnotationExecUnavailable(t *testing.T) {
	open, _ := listenTCP(t)
	e := newTestEnv(t, func(o *Options) {
		o.Runtime = nil
		o.Probes.Transforms = []podprobes.Transform{podprobes.LeaveSpecToKubelet, podprobes.RefuseExec("exec needs the container runtime")}
	})
	e.status.set("noexec", runningStatus(fakeNow, true))
	p := testPod(v1.Container{Name: testContainerName})
	p.UID = "noexec"
	p.Annotations = map[string]string{customprobe.Annotation: fmt.Sprintf(
		`[{"container":%q,"type":"liveness","exec":{"command":["true"]}},{"container":%q,"type":"readiness","tcpSocket":{"port":%d}}]`,
		testContainerName, testContainerName, open)}
	e.m.AddPod(context.Background(), p)
	if _, ok := e.m.getWorker("noexec", testContainerName, runtime.Liveness); ok {
		t.Fatal("the exec annotation probe got a worker in cluster mode")
	}
	if _, ok := e.m.getWorker("noexec", testContainerName, runtime.Readiness); !ok {
		t.Fatal("the valid annotation probe has no worker")
	}
}

// AddPodProbes is the one road of a pod's probes: the workers are the
// view's probes, each with its origin, and nothing else; AddPod without a
// view works the view out itself under Options.Probes (the zero policy: the
// kubelet's spec probes and the annotation's, as a library user expects).
func TestAddPodProbesStartsTheViewsProbes(t *testing.T) {
	open, _ := listenTCP(t)
	e := newTestEnv(t, func(o *Options) { o.Runtime = nil })
	newPod := func(uid string) *v1.Pod {
		c := probeOf(runtime.Liveness, execProbe())
		p := testPod(c)
		p.UID = types.UID(uid)
		p.Annotations = map[string]string{customprobe.Annotation: fmt.Sprintf(
			`[{"container":%q,"type":"readiness","tcpSocket":{"port":%d}}]`, c.Name, open)}
		e.status.set(p.UID, runningStatus(fakeNow, true))
		return p
	}

	viewed := newPod("viewed")
	view := podprobes.Of(viewed, podprobes.Policy{Transforms: []podprobes.Transform{podprobes.LeaveSpecToKubelet}})
	AddPodProbes(context.Background(), e.m, viewed, view)
	if _, ok := e.m.getWorker("viewed", testContainerName, runtime.Liveness); ok {
		t.Error("a worker for a spec probe the view leaves to the kubelet")
	}
	w, ok := e.m.getWorker("viewed", testContainerName, runtime.Readiness)
	if !ok || w.rs.Origin != runtime.OriginAnnotation || w.rs.Extension == nil {
		t.Fatalf("the view's annotation probe: worker %v, spec %+v", ok, w)
	}

	plain := newPod("plain")
	e.m.AddPod(context.Background(), plain)
	for _, c := range []struct {
		t      runtime.ProbeType
		origin runtime.Origin
	}{{runtime.Liveness, runtime.OriginSpec}, {runtime.Readiness, runtime.OriginAnnotation}} {
		w, ok := e.m.getWorker("plain", testContainerName, c.t)
		if !ok || w.rs.Origin != c.origin {
			t.Errorf("AddPod without a view: %v worker %v, origin %v, want %v", c.t, ok, w, c.origin)
		}
	}
	if n := e.m.workerCount(); n != 3 {
		t.Errorf("%d workers, want 3", n)
	}
}
