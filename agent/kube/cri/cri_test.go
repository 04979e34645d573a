package cri_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/probed/probed/agent/kube/cri"
	"github.com/probed/probed/internal/critest"
	probeexec "github.com/probed/probed/plugins/exec"
	"github.com/probed/probed/runtime"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreCurrent()) }

// env is a connected Client and a running container of the test runtime.
type env struct {
	client *cri.Client
	reg    *prometheus.Registry
	rs     internalapi.RuntimeService // the test's own CRI connection (the kubelet's side)
	id     string                     // the container's CRI ID
	status string                     // its ID as the pod's status has it: containerd://<id>
	pod    *v1.Pod                    // the pod its sandbox's labels name
}

// podOf is the pod a test sandbox's labels name (its UID, namespace and
// name), as the API server would have it.
func podOf(sb *critest.Sandbox) *v1.Pod {
	md := sb.Config.Metadata
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: md.Namespace, Name: md.Name, UID: types.UID(md.Uid)}}
}

// app is what an exec run's context names: container app of e's pod.
func (e *env) app(ctx context.Context) context.Context {
	return probeexec.WithContainer(ctx, probeexec.PodContainer{Namespace: e.pod.Namespace, Pod: e.pod.Name, PodUID: e.pod.UID, Container: "app"})
}

func connect(t *testing.T) (*cri.Client, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	c, err := cri.Connect(context.Background(), cri.Options{Endpoint: critest.Endpoint(t), Registerer: reg, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, reg
}

// newEnv starts a container running command (sh -c) with its own file
// /ready, and connects a Client.
func newEnv(t *testing.T, command string) *env {
	t.Helper()
	e := &env{rs: critest.Runtime(t)}
	e.client, e.reg = connect(t)
	sb := critest.RunPodSandbox(t, e.rs)
	e.id = sb.Start(t, critest.Container{Name: "app", Command: []string{"sh", "-c", command}})
	e.status = e.client.RuntimeName() + "://" + e.id
	e.pod = podOf(sb)
	return e
}

// probe runs an exec probe of cmd with timeout through the exec handler and
// the client's Runner, as the agent does: one attempt with the probe's
// deadline (P3).
func (e *env) probe(t *testing.T, containerID string, timeout time.Duration, cmd ...string) (runtime.Outcome, error) {
	t.Helper()
	spec := &runtime.Spec{
		Kind: runtime.KindExec, ProbeType: runtime.Readiness, Pod: e.pod, Container: &v1.Container{Name: "app"},
		Probe:        &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: cmd}}, TimeoutSeconds: int32(timeout / time.Second)},
		Milliseconds: &runtime.Milliseconds{Timeout: int32(timeout % time.Second / time.Millisecond)},
	}
	p, err := probeexec.New(e.client.Runner()).Prepare(spec)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := runtime.WithTimeout(context.Background(), nil, spec.Timeout())
	defer cancel()
	return p.Probe(ctx, runtime.Target{ContainerID: containerID, Attempt: 1})
}

func (e *env) calls(method, code string) float64 {
	return testutil.ToFloat64(e.client.Calls().WithLabelValues(method, code))
}

// At start the runtime's Version names it; the calls are counted by method.
func TestConnectNamesTheRuntime(t *testing.T) {
	c, reg := connect(t)
	if c.RuntimeName() != "containerd" || c.RuntimeVersion() == "" {
		t.Fatalf("runtime %q %q, want containerd", c.RuntimeName(), c.RuntimeVersion())
	}
	if n := testutil.ToFloat64(c.Calls().WithLabelValues(cri.MethodVersion, "OK")); n != 2 { // Build's check, then ours
		t.Fatalf("Version calls counted: %v, want 2", n)
	}
	if n, err := testutil.GatherAndCount(reg, "probed_cri_calls_total"); err != nil || n != 1 {
		t.Fatalf("registered series: %d, %v", n, err)
	}
}

// An endpoint nothing listens on is an error naming the flag and endpoint,
// within the request timeout.
func TestConnectRefusesAnEndpointWithoutRuntime(t *testing.T) {
	ep := "unix://" + t.TempDir() + "/none.sock"
	_, err := cri.Connect(context.Background(), cri.Options{Endpoint: ep, RequestTimeout: time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err == nil || !strings.Contains(err.Error(), "--container-runtime-endpoint "+ep) {
		t.Fatalf("err %v", err)
	}
}

// E2/E3 through ExecSync: the command runs in the container's own
// filesystem; output is stdout then stderr; exit 0 is Success, another
// code a Failure with its output and exit code.
func TestRunnerVerdicts(t *testing.T) {
	e := newEnv(t, "echo ok > /tmp/ready; exec sleep 3600")
	out, err := e.probe(t, e.status, time.Second, "cat", "/tmp/ready")
	if err != nil || out.Result != runtime.Success || out.Output != "ok\n" {
		t.Fatalf("cat /tmp/ready: %+v, %v", out, err)
	}
	out, err = e.probe(t, e.status, time.Second, "sh", "-c", "echo err >&2; echo out; exit 3")
	if err != nil || out.Result != runtime.Failure || out.ExitCode != 3 || out.Output != "out\nerr\n" {
		t.Fatalf("exit 3: %+v, %v", out, err)
	}
	if n := e.calls(cri.MethodExecSync, "OK"); n != 2 {
		t.Fatalf("ExecSync calls counted OK: %v, want 2", n)
	}
}

// E2: at most 10 KiB of output is kept, stdout first.
func TestRunnerOutputLimit(t *testing.T) {
	e := newEnv(t, "exec sleep 3600")
	out, err := e.probe(t, e.status, time.Second, "sh", "-c", "head -c 8192 /dev/zero | tr '\\0' a; head -c 8192 /dev/zero | tr '\\0' b >&2")
	if err != nil || out.Result != runtime.Success {
		t.Fatalf("%+v, %v", out.Result, err)
	}
	if len(out.Output) != runtime.MaxOutputBytes || strings.Count(out.Output, "a") != 8192 || strings.Count(out.Output, "b") != 2048 {
		t.Fatalf("output of %d bytes (%d a, %d b), want 10 KiB: all of stdout, then stderr", len(out.Output),
			strings.Count(out.Output, "a"), strings.Count(out.Output, "b"))
	}
}

// E3: a command that outlives the probe's timeout is a Failure with the
// kubelet's timeout text, it is cut at the timeout (not when it ends) and
// its process is gone from the container. A sub-second timeout
// (timeoutMilliseconds) is kept to the millisecond.
func TestRunnerTimeout(t *testing.T) {
	e := newEnv(t, "exec sleep 3600")
	for _, tc := range []struct {
		timeout time.Duration
		marker  string
		text    string
	}{
		{time.Second, "1111", `command timed out: "sleep 1111" timed out after 1s`},
		{1500 * time.Millisecond, "2222", `command timed out: "sleep 2222" timed out after 1.5s`},
	} {
		start := time.Now()
		out, err := e.probe(t, e.status, tc.timeout, "sleep", tc.marker)
		took := time.Since(start)
		if err != nil || out.Result != runtime.Failure || out.Output != tc.text || out.ExitCode != -1 {
			t.Fatalf("timeout %v: %+v, %v", tc.timeout, out, err)
		}
		if took < tc.timeout || took > tc.timeout+5*time.Second {
			t.Fatalf("timeout %v: cut after %v", tc.timeout, took)
		}
		waitGone(t, e, "sleep "+tc.marker)
	}
}

// waitGone waits until no process of the container runs cmdline.
func waitGone(t *testing.T, e *env, cmdline string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ps := critest.Exec(t, e.rs, e.id, "ps", "-o", "args")
		if !strings.Contains(ps, cmdline) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q still runs in the container 5 s after its timeout:\n%s", cmdline, ps)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A container ID of another runtime, or without a runtime, is refused
// without a call: the run is errored (never a verdict), naming what was
// found and this node's runtime.
func TestRunnerRefusesAnotherRuntimesID(t *testing.T) {
	e := newEnv(t, "exec sleep 3600")
	for _, id := range []string{"docker://" + e.id, e.id, ""} {
		out, err := e.probe(t, id, time.Second, "true")
		if err == nil || out.Result != runtime.Unknown {
			t.Fatalf("%q: %+v, %v: want an errored run", id, out, err)
		}
		if id == "docker://"+e.id && !strings.Contains(err.Error(), `is of runtime "docker", but this node's runtime is "containerd"`) {
			t.Fatalf("error %v", err)
		}
	}
	if n := e.calls(cri.MethodExecSync, "OK"); n != 0 {
		t.Fatalf("%v ExecSync calls for refused IDs", n)
	}
}

// An ExecSync error that is not the command's own — the container exited,
// or unknown to the runtime — is an errored run, never a Failure.
func TestRunnerRuntimeErrorsAreErrored(t *testing.T) {
	e := newEnv(t, "exec sleep 3600")
	if err := e.rs.StopContainer(critest.Context(t), e.id, 0); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{e.status, "containerd://0123456789abcdef"} {
		out, err := e.probe(t, id, time.Second, "true")
		if err == nil || out.Result != runtime.Unknown {
			t.Fatalf("%s: %+v, %v: want an errored run", id, out, err)
		}
	}
	// The exited container is its pod's (ExecSync fails); the unknown one
	// is refused by its ContainerStatus, before any ExecSync.
	if e.calls(cri.MethodExecSync, "Unknown")+e.calls(cri.MethodExecSync, "NotFound") != 1 || e.calls(cri.MethodContainerStatus, "NotFound") != 1 {
		t.Fatal("failed calls not counted by code")
	}
}

// The agent stopping (ctx cancelled) ends the call: errored, not a timeout.
func TestRunnerCancelIsErrored(t *testing.T) {
	e := newEnv(t, "exec sleep 3600")
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	start := time.Now()
	_, err := e.client.Runner().RunInContainer(e.app(ctx), e.status, []string{"sleep", "3333"}, 10*time.Second)
	var te *probeexec.TimeoutError
	if err == nil || errors.As(err, &te) || !errors.Is(err, context.Canceled) || time.Since(start) > 5*time.Second {
		t.Fatalf("after %v: %v", time.Since(start), err)
	}
	waitGone(t, e, "sleep 3333")
}

// The runtime stopped under the client: runs are errored, never a
// Failure; once it is back the same client runs commands again (cri-client
// reconnects, backoff at most 3 s). The container survives the restart.
func TestRunnerRuntimeRestart(t *testing.T) {
	dir := critest.PrivateRuntime(t)
	e := newEnv(t, "exec sleep 3600")
	if out, err := e.probe(t, e.status, time.Second, "true"); err != nil || out.Result != runtime.Success {
		t.Fatalf("before the restart: %+v, %v", out, err)
	}
	critest.StopDaemon(t, dir)
	out, err := e.probe(t, e.status, time.Second, "true")
	if err == nil || out.Result != runtime.Unknown {
		t.Fatalf("runtime down: %+v, %v: want an errored run", out, err)
	}
	if e.calls(cri.MethodExecSync, "Unavailable") == 0 {
		t.Fatal("the refused call is not counted as Unavailable")
	}
	critest.StartDaemon(t, dir)
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, err = e.probe(t, e.status, time.Second, "true")
		if err == nil && out.Result == runtime.Success {
			break
		}
		if out.Result == runtime.Failure {
			t.Fatalf("a Failure while the runtime comes back: %+v", out)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no Success 20 s after the runtime restarted: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if state, _ := critest.State(t, e.rs, e.id); state != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("container %v after the restart", state)
	}
}

// A runtime that stops answering (SIGSTOP: a hung containerd) is not a
// command that timed out: the call is bounded by RequestTimeout + the
// probe's timeout, and then the run is errored, never a Failure. (Cutting
// the call at the probe's own deadline would have made it a timeout
// Failure.)
func TestRunnerHungRuntimeIsErrored(t *testing.T) {
	dir := critest.PrivateRuntime(t)
	e := newShortEnv(t)
	id := e.id
	// Resolved first (the container is known from then on): this is about
	// ExecSync's answer.
	if out, err := e.probe(t, "containerd://"+id, time.Second, "true"); err != nil || out.Result != runtime.Success {
		t.Fatalf("before the stop: %+v, %v", out, err)
	}
	pid := critest.DaemonPID(t, dir)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	start := time.Now()
	out, err := e.probe(t, "containerd://"+id, time.Second, "true")
	took := time.Since(start)
	if err == nil || out.Result != runtime.Unknown || !strings.Contains(err.Error(), "did not answer ExecSync") {
		t.Fatalf("hung runtime: %+v, %v: want an errored run", out, err)
	}
	if took < 3*time.Second || took > 8*time.Second {
		t.Fatalf("errored after %v, want RequestTimeout (2 s) + timeout (1 s)", took)
	}
}

// A command whose leftover child keeps its output open past its timeout:
// containerd 1.6 kills the command's process and then waits for the
// output to close, so the call is only cut at its own bound
// (RequestTimeout + the timeout). The runtime answers Version meanwhile,
// so this is the command's timeout — the kubelet's verdict and text —
// not a hung runtime (TestRunnerHungRuntimeIsErrored).
func TestRunnerHeldOutputIsATimeout(t *testing.T) {
	e := newShortEnv(t)
	start := time.Now()
	out, err := e.probe(t, "containerd://"+e.id, time.Second, "sh", "-c", "setsid sleep 3333 & echo parent")
	took := time.Since(start)
	want := `command timed out: "sh -c setsid sleep 3333 & echo parent" timed out after 1s`
	if err != nil || out.Result != runtime.Failure || out.Output != want {
		t.Fatalf("%+v, %v: want the kubelet's timeout", out, err)
	}
	if took < 3*time.Second || took > 8*time.Second {
		t.Fatalf("answered after %v, want RequestTimeout (2 s) + timeout (1 s)", took)
	}
}

// newShortEnv is a container (sleep) and a Client whose RequestTimeout is
// 2 s: a call not answered is cut 2 s after its own time.
func newShortEnv(t *testing.T) *env {
	t.Helper()
	e := &env{rs: critest.Runtime(t)}
	sb := critest.RunPodSandbox(t, e.rs)
	e.id = sb.Start(t, critest.Container{Name: "app", Command: []string{"sleep", "3600"}})
	e.pod = podOf(sb)
	var err error
	e.client, err = cri.Connect(context.Background(), cri.Options{Endpoint: critest.Endpoint(t), RequestTimeout: 2 * time.Second,
		Registerer: prometheus.NewRegistry(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.client.Close() })
	return e
}
