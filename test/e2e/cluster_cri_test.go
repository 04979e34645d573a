package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/probed/probed/internal/critest"
	"github.com/probed/probed/internal/kubetest"
	"github.com/probed/probed/internal/testlog"
)

// The agent with --container-runtime-endpoint against a real
// containerd (test/cri/env.sh) and the real API server. Each container is
// created through the CRI, and its ID written into the pod's status as the
// kubelet would ("containerd://<id>").

const gate = v1.PodConditionType("probed.io/ready")

// criPod is a gated pod of the test API server whose container "app" runs
// in the test containerd.
type criPod struct {
	ns, name string
	id       string // the container's CRI ID
	rs       internalapi.RuntimeService
}

// startCRIPod creates pod ns/name on node with the probed.io/probes
// annotation and the gate (mutate may change the pod before it is
// created), starts its container app (command run by sh -c, host dirs
// mounted as given) in a new sandbox labelled with the pod's UID, and
// writes its running status with the container's ID.
func startCRIPod(t *testing.T, admin kubernetes.Interface, ns, name, node, annotation, command string,
	mounts []*runtimeapi.Mount, mutate func(*v1.Pod)) *criPod {
	t.Helper()
	p := &criPod{ns: ns, name: name, rs: critest.Runtime(t)}
	pod := kubetest.NewPod(ns, name, node, "app")
	pod.Annotations = map[string]string{"probed.io/probes": annotation}
	pod.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: gate}}
	if mutate != nil {
		mutate(pod)
	}
	created := kubetest.CreatePod(t, admin, pod)
	// The sandbox and container as the kubelet makes them for this pod:
	// their labels name its UID (probed checks them before it acts).
	p.id = critest.RunPodSandboxFor(t, p.rs, ns, name, string(created.UID)).Start(t,
		critest.Container{Name: "app", Command: []string{"sh", "-c", command}, Mounts: mounts})
	// One status write with the real ID: a run against a made-up ID would
	// be errored, and its Unhealthy Event would open the series later
	// Unhealthy Events of the container are counted into (tools/events keys
	// a series without the note).
	kubetest.SetPodRunningWithIDs(t, admin, ns, name, true, map[string]string{"app": "containerd://" + p.id})
	return p
}

// setContainerID writes id as container app's ID in the pod's status.
func (p *criPod) setContainerID(t *testing.T, admin kubernetes.Interface, id string) {
	t.Helper()
	kubetest.PatchPodStatus(t, admin, p.ns, p.name, func(s *v1.PodStatus) {
		for i := range s.ContainerStatuses {
			if s.ContainerStatuses[i].Name == "app" {
				s.ContainerStatuses[i].ContainerID = id
			}
		}
	})
}

// exec runs a shell command in the container (the test's own ExecSync).
func (p *criPod) exec(t *testing.T, script string) string {
	t.Helper()
	return critest.Exec(t, p.rs, p.id, "sh", "-c", script)
}

// criAgent starts the agent for node with the test runtime's endpoint.
func criAgent(t *testing.T, node string, args ...string) *clusterAgent {
	t.Helper()
	ep := critest.Endpoint(t)
	kubetest.Config(t) // skips without the API server
	return startClusterAgent(t, node, nil, append([]string{"--container-runtime-endpoint", ep}, args...)...)
}

// An annotation exec probe runs in the container: it reads a file that
// exists only in the container's filesystem, and the gate follows it as
// the test removes and writes the file again. The runtime's Version named
// it at start.
func TestClusterCRIExecRunsInTheContainer(t *testing.T) {
	admin := kubetest.Client(t)
	ns, node := kubetest.Namespace(t), kubetest.NodeName(t)
	a := criAgent(t, node)
	const file = "/probed-only-in-the-container"
	if _, err := os.Stat(file); err == nil {
		t.Fatalf("%s exists on the host", file)
	}
	p := startCRIPod(t, admin, ns, "web", node,
		`[{"container":"app","type":"readiness","periodSeconds":1,"exec":{"command":["cat","`+file+`"]}}]`,
		"echo ok > "+file+"; exec sleep 3600", nil, nil)
	waitCondition(t, a, admin, ns, "web", gate, v1.ConditionTrue, "ProbeSucceeded", 30*time.Second)
	p.exec(t, "rm "+file)
	waitCondition(t, a, admin, ns, "web", gate, v1.ConditionFalse, "ProbeFailed", 30*time.Second)
	waitEvent(t, a, admin, ns, "web", "Unhealthy", "Readiness probe failed (3/3): container marked not ready: cat: can't open '"+file+"': No such file or directory")
	p.exec(t, "echo ok > "+file)
	waitCondition(t, a, admin, ns, "web", gate, v1.ConditionTrue, "ProbeSucceeded", 30*time.Second)

	found := false
	for _, l := range a.logs() {
		found = found || (l.str("msg") == "container runtime" && l.str("runtime") == "containerd")
	}
	if !found {
		t.Fatalf("no log line naming the runtime; stderr:\n%s", tail(a.stderr.String(), 20))
	}
	metrics, err := apiGet(a.Base, "/metrics")
	if err != nil || !strings.Contains(string(metrics), `probed_cri_calls_total{code="OK",method="ExecSync"}`) {
		t.Fatalf("/metrics has no ExecSync count: %v", err)
	}
	if code := a.stop(syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Fatalf("probed exited %d after SIGTERM; stderr:\n%s", code, tail(a.stderr.String(), 20))
	}
}

// An exec probe that hangs is cut at its timeout: a Failure with the
// kubelet's timeout text, and its process is gone from the container.
func TestClusterCRIExecTimeout(t *testing.T) {
	admin := kubetest.Client(t)
	ns, node := kubetest.Namespace(t), kubetest.NodeName(t)
	a := criAgent(t, node)
	p := startCRIPod(t, admin, ns, "web", node,
		`[{"container":"app","type":"readiness","periodSeconds":10,"timeoutSeconds":1,"failureThreshold":1,"exec":{"command":["sleep","4711"]}}]`,
		"exec sleep 3600", nil, nil)
	// failureThreshold 1: the first run's Failure is the verdict (the gate
	// follows it at once, not two periods of 10 s later).
	waitEvent(t, a, admin, ns, "web", "Unhealthy", `Readiness probe failed (1/1): container marked not ready: command timed out: "sleep 4711" timed out after 1s`)
	eventually(t, a.proc, 3*time.Second, "the timed-out command gone from the container", func() (bool, string) {
		ps := p.exec(t, "ps -o args")
		return !strings.Contains(ps, "sleep 4711"), ps
	})
	waitCondition(t, a, admin, ns, "web", gate, v1.ConditionFalse, "ProbeFailed", 10*time.Second)
}

// --liveness-action=restart: a liveness failure runs the container's
// preStop hook (its mark is seen on the host), then stops the container
// through the runtime within the grace period (the probe's
// terminationGracePeriodSeconds); the CRI's ContainerStatus shows it
// exited. The kubelet's Killing Event, once per instance: one
// StopContainer. In a namespace without the label nothing is stopped and
// an Event says why.
func TestClusterCRILivenessRestart(t *testing.T) {
	admin := kubetest.Client(t)
	node := kubetest.NodeName(t)
	ep := critest.Endpoint(t)
	a := startClusterAgent(t, node, kubetest.AgentConfigWithRestart(t), "--container-runtime-endpoint", ep, "--liveness-action", "restart")
	liveness := `[{"container":"app","type":"liveness","periodSeconds":1,"failureThreshold":1,"terminationGracePeriodSeconds":4,` +
		`"exec":{"command":["cat","/tmp/alive"]}}]`
	withPreStop := func(pod *v1.Pod) {
		pod.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{
			Exec: &v1.ExecAction{Command: []string{"sh", "-c", "echo prestop >> /mark/log"}}}}
	}
	command := `echo yes > /tmp/alive; trap "echo term >> /mark/log; exit 0" TERM; while :; do sleep 1; done`

	ns := kubetest.Namespace(t)
	patch := []byte(`{"metadata":{"labels":{"probed.io/liveness-actions":"enabled"}}}`)
	if _, err := admin.CoreV1().Namespaces().Patch(kubetest.Context(t), ns, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	mark := critest.HostDir(t)
	p := startCRIPod(t, admin, ns, "web", node, liveness, command, []*runtimeapi.Mount{{ContainerPath: "/mark", HostPath: mark}}, withPreStop)
	time.Sleep(2 * time.Second) // a few successful runs first
	p.exec(t, "rm /tmp/alive")
	start := time.Now()
	waitEvent(t, a, admin, ns, "web", "Killing", "Container app failed liveness probe, will be restarted")
	var took time.Duration
	eventually(t, a.proc, 15*time.Second, "the container exited", func() (bool, string) {
		state, code := critest.State(t, p.rs, p.id)
		took = time.Since(start)
		return state == runtimeapi.ContainerState_CONTAINER_EXITED && code == 0, fmt.Sprintf("%v exit %d", state, code)
	})
	if b, _ := os.ReadFile(filepath.Join(mark, "log")); string(b) != "prestop\nterm\n" {
		t.Fatalf("marks %q, want the preStop hook's, then the SIGTERM handler's", b)
	}
	if took > 4*time.Second+3*time.Second { // grace period, plus up to 2 probe periods to see the failure and the event
		t.Fatalf("container exited %v after the probe started failing", took)
	}

	// Not in a namespace without the label.
	other := kubetest.Namespace(t)
	q := startCRIPod(t, admin, other, "db", node, liveness, "exec sleep 3600", nil, nil)
	waitEvent(t, a, admin, other, "db", "LivenessProbeFailed",
		"Container app failed liveness probe; the container is not restarted: namespace "+other+" is not selected by --liveness-action-namespaces")
	if state, _ := critest.State(t, q.rs, q.id); state != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("container in the unlabelled namespace is %v", state)
	}

	time.Sleep(2 * time.Second) // further failed runs of the stopped instance change nothing
	killing := 0
	for _, e := range podEvents(t, admin, ns, "web") {
		if e.Reason == "Killing" {
			killing++
		}
	}
	metrics, err := apiGet(a.Base, "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if killing != 1 || !strings.Contains(string(metrics), `probed_cri_calls_total{code="OK",method="StopContainer"} 1`+"\n") {
		t.Fatalf("%d Killing events; StopContainer counts: %s", killing, grepLines(string(metrics), "StopContainer"))
	}
}

// A container ID of another runtime type is refused with an Event naming
// it and this node's runtime: probed never guesses.
func TestClusterCRIRefusesAnotherRuntimesID(t *testing.T) {
	admin := kubetest.Client(t)
	ns, node := kubetest.Namespace(t), kubetest.NodeName(t)
	a := criAgent(t, node)
	p := startCRIPod(t, admin, ns, "web", node,
		`[{"container":"app","type":"readiness","periodSeconds":1,"exec":{"command":["true"]}}]`, "exec sleep 3600", nil, nil)
	waitCondition(t, a, admin, ns, "web", gate, v1.ConditionTrue, "ProbeSucceeded", 30*time.Second)
	p.setContainerID(t, admin, "docker://"+p.id)
	waitEvent(t, a, admin, ns, "web", "Unhealthy", "Readiness probe errored",
		`container ID "docker://`+p.id+`" is of runtime "docker", but this node's runtime is "containerd"`)
}

// The runtime stopped under the agent: exec runs are errored (Events say
// so), never a Failure, and the gate keeps its verdict; once the runtime is
// back, probing resumes (the gate follows the container's file again).
func TestClusterCRIRuntimeRestart(t *testing.T) {
	dir := critest.PrivateRuntime(t)
	admin := kubetest.Client(t)
	ns, node := kubetest.Namespace(t), kubetest.NodeName(t)
	a := criAgent(t, node)
	p := startCRIPod(t, admin, ns, "web", node,
		`[{"container":"app","type":"readiness","periodSeconds":1,"exec":{"command":["cat","/tmp/ready"]}}]`,
		"echo ok > /tmp/ready; exec sleep 3600", nil, nil)
	waitCondition(t, a, admin, ns, "web", gate, v1.ConditionTrue, "ProbeSucceeded", 30*time.Second)

	critest.StopDaemon(t, dir)
	waitEvent(t, a, admin, ns, "web", "Unhealthy", "Readiness probe errored and resulted in unknown state")
	time.Sleep(3 * time.Second)
	for _, e := range podEvents(t, admin, ns, "web") {
		if strings.HasPrefix(e.Note, "Readiness probe failed") {
			t.Fatalf("a Failure while the runtime was down: %s", e.Note)
		}
	}
	pod, err := admin.CoreV1().Pods(ns).Get(kubetest.Context(t), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c := gateCondition(pod, gate); c == nil || c.Status != v1.ConditionTrue {
		t.Fatalf("gate %+v while the runtime was down, want True kept", c)
	}

	critest.StartDaemon(t, dir)
	p.exec(t, "rm /tmp/ready")
	waitCondition(t, a, admin, ns, "web", gate, v1.ConditionFalse, "ProbeFailed", 30*time.Second)
}

// grepLines returns the lines of s containing sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// unreachableKubeconfig writes dir/kubeconfig (readable by all) naming an
// API server nothing serves: enough for the agent to get as far as the
// container runtime, which it connects to before the API server.
func unreachableKubeconfig(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(p, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// The container runtime's flags are refused where they cannot work, with
// an error naming the flag: outside cluster mode, restart without the
// runtime, an endpoint nothing listens on (probed does not start without
// the runtime it was told to use, as the kubelet does not).
func TestCRIFlagsRefused(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := unreachableKubeconfig(t, dir)
	none := "unix://" + filepath.Join(dir, "none.sock")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--manifests", dir, "--container-runtime-endpoint", none}, "--container-runtime-endpoint needs cluster mode"},
		{[]string{"run", "--kubeconfig", kubeconfig, "--node-name", "n", "--liveness-action", "restart"},
			"--liveness-action=restart needs the container runtime: --container-runtime-endpoint"},
		{[]string{"run", "--kubeconfig", kubeconfig, "--node-name", "n", "--container-runtime-endpoint", none},
			"--container-runtime-endpoint " + none + ": dial unix"},
		{[]string{"run", "--kubeconfig", kubeconfig, "--node-name", "n", "--liveness-action", "kill"},
			`--liveness-action "kill": want event, evict or restart`},
	} {
		_, stderr, code := runProbed(t, nil, tc.args...)
		if code == 0 || !strings.Contains(stderr, tc.want) {
			t.Errorf("probed %s: exit %d, stderr %q; want %q", strings.Join(tc.args, " "), code, tail(stderr, 5), tc.want)
		}
	}
}

// The least privilege that opens the runtime's socket, as the DaemonSet
// runs the agent with cri.enabled (test/deploy holds the DaemonSet to it):
// user and group 65532, the socket's group (root's, 0) as a supplemental
// group, no capability. The real binary under those credentials connects
// to the real containerd and names it; without the supplemental group the
// socket refuses it and probed does not start, saying why.
func TestCRISocketOpensWithTheDaemonSetsPrivilege(t *testing.T) {
	ep := critest.Endpoint(t)
	if os.Getuid() != 0 {
		t.Skip("needs root to run the agent under the DaemonSet's user")
	}
	// A copy of the binary and a kubeconfig user 65532 can read (the
	// API server is never reached before the runtime is).
	dir, err := os.MkdirTemp("", "probed-nonroot-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "probed")
	data, err := os.ReadFile(probedBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	kubeconfig := unreachableKubeconfig(t, dir)
	run := func(groups []uint32) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, "run", "--kubeconfig", kubeconfig, "--node-name", "n", "--log-format", "json",
			"--listen", "127.0.0.1:"+strconv.Itoa(freePort(t)), "--container-runtime-endpoint", ep)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65532, Gid: 65532, Groups: groups}}
		cmd.Env = []string{"HOME=/nonexistent"}
		var out testlog.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			select {
			case err := <-done:
				return out.String(), err
			case <-time.After(50 * time.Millisecond):
			}
			if strings.Contains(out.String(), `"msg":"container runtime"`) {
				_ = cmd.Process.Signal(syscall.SIGTERM)
				<-done
				return out.String(), nil
			}
		}
		_ = cmd.Process.Kill()
		<-done
		return out.String(), errors.New("neither connected nor refused within 20 s")
	}
	out, err := run([]uint32{0})
	if err != nil || !strings.Contains(out, `"runtime":"containerd"`) {
		t.Fatalf("as 65532 with group 0: %v\n%s", err, tail(out, 10))
	}
	out, err = run(nil)
	if err == nil || !strings.Contains(out, "--container-runtime-endpoint "+ep) || !strings.Contains(out, "permission denied") {
		t.Fatalf("as 65532 without group 0: %v, want a refusal naming the endpoint\n%s", err, tail(out, 10))
	}
}
