package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/probed/probed/internal/kubetest"
	"github.com/probed/probed/internal/nodetest"
	"github.com/probed/probed/internal/probetarget"
)

// The real node of test/node/env.sh. The kubelet v1.37.2 starts
// the pods' containers (the probe target) through containerd, runs their
// spec probes and writes their status itself; probed runs out of cluster
// for the node (--kubeconfig, --node-name, and --container-runtime-endpoint
// where it needs the runtime). Nothing here writes a pod status: every
// status is the kubelet's. They skip without PROBED_TEST_NODE.

// podHistory is every version of the pods a watch opened before them
// selected (a RetryWatcher: a closed watch is resumed from its last
// resourceVersion, so no version is missed).
type podHistory struct {
	mu   sync.Mutex
	pods []*v1.Pod
}

// watchPod starts recording pod ns/name; the watch stops when the test ends.
func watchPod(t *testing.T, c kubernetes.Interface, ns, name string) *podHistory {
	t.Helper()
	return watchPods(t, c, ns, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
}

// watchPods starts recording the pods of ns that sel's field and label
// selectors select; the watch stops when the test ends.
func watchPods(t *testing.T, c kubernetes.Interface, ns string, sel metav1.ListOptions) *podHistory {
	t.Helper()
	list, err := c.CoreV1().Pods(ns).List(kubetest.Context(t), sel)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector, o.LabelSelector = sel.FieldSelector, sel.LabelSelector
			return c.CoreV1().Pods(ns).Watch(ctx, o)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	h := &podHistory{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if pod, ok := ev.Object.(*v1.Pod); ok {
				h.mu.Lock()
				h.pods = append(h.pods, pod)
				h.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		w.Stop()
		<-done
	})
	return h
}

// since returns the versions recorded at or after index from.
func (h *podHistory) since(from int) []*v1.Pod {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*v1.Pod(nil), h.pods[from:]...)
}

// of returns the versions of pod uid recorded at or after index from.
func (h *podHistory) of(uid types.UID, from int) []*v1.Pod {
	var out []*v1.Pod
	for _, p := range h.since(from) {
		if p.UID == uid {
			out = append(out, p)
		}
	}
	return out
}

// len is the number of versions recorded so far.
func (h *podHistory) len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.pods)
}

// waitPod polls pod ns/name until cond holds (failing after timeout, or as
// soon as a exits when a is not nil); it returns the pod.
func waitPod(t *testing.T, a *clusterAgent, c kubernetes.Interface, ns, name string, timeout time.Duration,
	what string, cond func(*v1.Pod) (bool, string)) *v1.Pod {
	t.Helper()
	var p *proc
	if a != nil {
		p = a.proc
	}
	var got *v1.Pod
	eventually(t, p, timeout, fmt.Sprintf("pod %s/%s: %s", ns, name, what), func() (bool, string) {
		pod, err := c.CoreV1().Pods(ns).Get(kubetest.Context(t), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		got = pod
		return cond(pod)
	})
	return got
}

// podReady is the kubelet's Ready condition of pod (with the gate's for
// the description).
func podReady(pod *v1.Pod) (bool, string) {
	ready := gateCondition(pod, v1.PodReady)
	g := gateCondition(pod, gate)
	desc := fmt.Sprintf("phase %s, Ready %v, gate %v", pod.Status.Phase, condString(ready), condString(g))
	return ready != nil && ready.Status == v1.ConditionTrue, desc
}

func condString(c *v1.PodCondition) string {
	if c == nil {
		return "none"
	}
	return string(c.Status) + " " + c.Reason
}

// readyIs waits until the kubelet's Ready condition of the pod is want.
func readyIs(want bool) func(*v1.Pod) (bool, string) {
	return func(pod *v1.Pod) (bool, string) {
		ready, desc := podReady(pod)
		return ready == want, desc
	}
}

// nodeAgent starts probed out of cluster for node n, under the agent's
// identity as the DaemonSet has it (startClusterAgent), with args.
func nodeAgent(t *testing.T, n *nodetest.Node, args ...string) *clusterAgent {
	t.Helper()
	return startClusterAgent(t, n.Name, nil, args...)
}

// httpProbe is an annotation probe element of type typ, httpGet of
// /probe/name on port, every second.
func httpProbe(container, typ, name string, port, failureThreshold int) string {
	return fmt.Sprintf(`{"container":%q,"type":%q,"periodSeconds":1,"failureThreshold":%d,"httpGet":{"path":"/probe/%s","port":%d}}`,
		container, typ, failureThreshold, name, port)
}

// TestNodeKubeletReadyFollowsProbedGate: a gated pod turns Ready in the
// kubelet's own status only once probed's condition is True, and back to
// not ready when probed's readiness probe fails (and Ready again when it
// passes): the kubelet computes Ready from the gate. Every version of the
// pod the API server held is checked: none turned Ready while the gate
// was not True. The pod's managedFields show who wrote what: the kubelet owns
// Ready, probed (field manager "probed") only its gate condition.
func TestNodeKubeletReadyFollowsProbedGate(t *testing.T) {
	n := nodetest.Load(t)
	admin := kubetest.Client(t)
	ns := kubetest.Namespace(t)
	a := nodeAgent(t, n)
	port := nodetest.FreePorts(t, 1)[0]
	tg := nodetest.Target{HTTP: port}
	pod := n.TargetPod(ns, "web", tg)
	pod.Annotations = map[string]string{"probed.io/probes": "[" + httpProbe("app", "readiness", "ready", port, 1) + "]"}
	pod.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: gate}}
	h := watchPod(t, admin, ns, "web")
	kubetest.CreatePod(t, admin, pod)

	waitPod(t, a, admin, ns, "web", 60*time.Second, "Ready", readyIs(true))
	if err := probetarget.SetStatus(tg.Base(n), "ready", 503); err != nil {
		t.Fatal(err)
	}
	waitPod(t, a, admin, ns, "web", 30*time.Second, "not Ready after probed's probe failed", readyIs(false))
	waitCondition(t, a, admin, ns, "web", gate, v1.ConditionFalse, "ProbeFailed", 10*time.Second)
	if err := probetarget.SetStatus(tg.Base(n), "ready", 200); err != nil {
		t.Fatal(err)
	}
	last := waitPod(t, a, admin, ns, "web", 30*time.Second, "Ready again", readyIs(true))

	// Every version: Ready turns True only in a version whose gate is True
	// (it turns False a moment after the gate does: probed writes the gate,
	// then the kubelet, watching the pod, writes Ready).
	versions, flips := h.since(0), 0
	wasReady := false
	for _, p := range versions {
		ready, desc := podReady(p)
		if ready == wasReady {
			continue
		}
		flips++
		wasReady = ready
		if g := gateCondition(p, gate); ready && (g == nil || g.Status != v1.ConditionTrue) {
			t.Errorf("resourceVersion %s turned Ready while the gate is not True: %s", p.ResourceVersion, desc)
		}
	}
	if flips != 3 {
		t.Errorf("Ready flipped %d times over %d versions, want 3 (up, down, up)", flips, len(versions))
	}
	checkManagedFields(t, last)
	if cs := last.Status.ContainerStatuses; len(cs) != 1 || cs[0].RestartCount != 0 || !strings.HasPrefix(cs[0].ContainerID, "containerd://") {
		t.Errorf("container statuses %+v, want one containerd container never restarted", cs)
	}
}

// checkManagedFields: the status fields probed's patches own (field manager
// "probed") are its gate condition and nothing else, and the kubelet's own
// the Ready condition.
func checkManagedFields(t *testing.T, pod *v1.Pod) {
	t.Helper()
	var probed, kubelet string
	for _, mf := range pod.ManagedFields {
		if mf.Subresource != "status" || mf.FieldsV1 == nil {
			continue
		}
		switch mf.Manager {
		case "probed":
			probed = string(mf.FieldsV1.Raw)
		case "kubelet":
			kubelet = string(mf.FieldsV1.Raw)
		}
	}
	if !strings.Contains(probed, `k:{\"type\":\"probed.io/ready\"}`) || strings.Count(probed, `k:{\"type\":`) != 1 {
		t.Errorf("probed's status fields %s, want its gate condition only", probed)
	}
	if !strings.Contains(kubelet, `k:{\"type\":\"Ready\"}`) {
		t.Errorf("the kubelet's status fields %s do not hold Ready", kubelet)
	}
}

// TestNodeLivenessRestartByKubelet: with --liveness-action restart, probed's
// liveness failure stops the container through the runtime and the real
// kubelet restarts it: restartCount 1, lastState.terminated with the first
// container's ID, a new container ID. A probe that fails in every instance
// (the target's shared state says 500) puts the container in the kubelet's
// own CrashLoopBackOff. Each instance probed stopped had served exactly
// failureThreshold failing probes (the target records them at SIGTERM):
// the thresholds start afresh on each new container ID (W6a) and the
// worker holds after its kill (W13), so no instance is stopped early on
// the previous one's count, and none is probed after its kill.
func TestNodeLivenessRestartByKubelet(t *testing.T) {
	n := nodetest.Load(t)
	admin := kubetest.Client(t)
	ns := kubetest.Namespace(t)
	kubetest.LabelNamespace(t, ns, map[string]string{"probed.io/liveness-actions": "enabled"})
	a := startClusterAgent(t, n.Name, kubetest.AgentConfigWithRestart(t),
		"--container-runtime-endpoint", n.CRIEndpoint, "--liveness-action", "restart")
	const threshold = 3
	port := nodetest.FreePorts(t, 1)[0]
	tg := nodetest.Target{HTTP: port, State: n.StateDir(t)}
	pod := n.TargetPod(ns, "web", tg)
	// The initial delay (W5.8, counted from each instance's StartedAt) keeps
	// the first run of an instance after its target listens: a run the
	// kubelet reports Running but whose process has not bound the port yet
	// fails (connection refused) as the kubelet's would, and counts toward
	// the threshold without reaching the target, whose count of failures it
	// served is what this test reads (CI, under load: an instance served 2).
	live := strings.Replace(httpProbe("app", "liveness", "live", port, threshold), `"periodSeconds":1,`, `"periodSeconds":1,"initialDelaySeconds":2,`, 1)
	pod.Annotations = map[string]string{"probed.io/probes": "[" + live + "]"}
	h := watchPod(t, admin, ns, "web")
	kubetest.CreatePod(t, admin, pod)

	first := waitPod(t, a, admin, ns, "web", 60*time.Second, "container running", func(p *v1.Pod) (bool, string) {
		cs := appStatus(p)
		return cs != nil && cs.State.Running != nil && cs.ContainerID != "", fmt.Sprintf("%+v", cs)
	})
	firstID := appStatus(first).ContainerID
	time.Sleep(3 * time.Second) // a few passing runs first
	if err := probetarget.SetStatus(tg.Base(n), "live", 500); err != nil {
		t.Fatal(err)
	}
	restarted := waitPod(t, a, admin, ns, "web", 60*time.Second, "restarted by the kubelet", func(p *v1.Pod) (bool, string) {
		cs := appStatus(p)
		return cs != nil && cs.RestartCount >= 1 && cs.State.Running != nil, fmt.Sprintf("%+v", cs)
	})
	cs := appStatus(restarted)
	term := cs.LastTerminationState.Terminated
	if cs.RestartCount != 1 || term == nil || term.ContainerID != firstID || cs.ContainerID == firstID {
		t.Fatalf("after the first restart: restartCount %d, lastState %+v, container %s (first %s)",
			cs.RestartCount, cs.LastTerminationState, cs.ContainerID, firstID)
	}
	waitEvent(t, a, admin, ns, "web", "Killing", "Container app failed liveness probe, will be restarted")

	// Every instance from now on fails: the kubelet's back-off.
	if err := os.WriteFile(filepath.Join(tg.State, "live.status"), []byte("500\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, a.proc, 120*time.Second, "CrashLoopBackOff", func() (bool, string) {
		for _, p := range h.since(0) {
			if cs := appStatus(p); cs != nil && cs.State.Waiting != nil && cs.State.Waiting.Reason == "CrashLoopBackOff" {
				return true, ""
			}
		}
		pod, _ := admin.CoreV1().Pods(ns).Get(kubetest.Context(t), "web", metav1.GetOptions{})
		return false, fmt.Sprintf("%+v", appStatus(pod))
	})
	// Wait for the kubelet to have restarted it past the back-off and
	// probed to have stopped that instance too.
	waitPod(t, a, admin, ns, "web", 120*time.Second, "restartCount 3", func(p *v1.Pod) (bool, string) {
		cs := appStatus(p)
		return cs != nil && cs.RestartCount >= 3, fmt.Sprintf("%+v", cs)
	})
	instances, err := probetarget.Instances(tg.State)
	if err != nil {
		t.Fatal(err)
	}
	if len(instances) < 3 {
		t.Fatalf("%d instances recorded their end, want at least 3: %+v", len(instances), instances)
	}
	for i, in := range instances {
		if got := in.Failures["live"]; got != threshold {
			t.Errorf("instance %d (%s–%s) served %d failing liveness probes before it was stopped, want %d (failureThreshold, counted afresh)",
				i, in.Started.Format(time.StampMilli), in.Stopped.Format(time.StampMilli), got, threshold)
		}
	}
}

// appStatus is the status of container app, or nil.
func appStatus(pod *v1.Pod) *v1.ContainerStatus {
	if pod == nil {
		return nil
	}
	return containerStatus(pod, "app")
}

// TestNodeExecProbeInKubeletsContainer: an annotation exec probe runs in the
// container the kubelet started (through CRI ExecSync on the container ID
// the kubelet wrote): it reads a file the target writes in its own
// filesystem, and the gate and the kubelet's Ready follow as the target
// removes and writes it again.
func TestNodeExecProbeInKubeletsContainer(t *testing.T) {
	n := nodetest.Load(t)
	admin := kubetest.Client(t)
	ns := kubetest.Namespace(t)
	a := nodeAgent(t, n, "--container-runtime-endpoint", n.CRIEndpoint)
	const file = "/tmp/probed-node-ready"
	if _, err := os.Stat(file); err == nil {
		t.Fatalf("%s exists on the host", file)
	}
	port := nodetest.FreePorts(t, 1)[0]
	tg := nodetest.Target{HTTP: port, ReadyFile: file}
	pod := n.TargetPod(ns, "web", tg)
	pod.Annotations = map[string]string{"probed.io/probes": `[{"container":"app","type":"readiness","periodSeconds":1,"exec":{"command":["cat","` + file + `"]}}]`}
	pod.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: gate}}
	kubetest.CreatePod(t, admin, pod)

	waitPod(t, a, admin, ns, "web", 60*time.Second, "Ready", readyIs(true))
	if err := probetarget.SetReadyFile(tg.Base(n), false); err != nil {
		t.Fatal(err)
	}
	waitPod(t, a, admin, ns, "web", 30*time.Second, "not Ready once the file is gone", readyIs(false))
	waitEvent(t, a, admin, ns, "web", "Unhealthy", "Readiness probe failed (3/3): container marked not ready: cat: can't open '"+file+"': No such file or directory")
	if err := probetarget.SetReadyFile(tg.Base(n), true); err != nil {
		t.Fatal(err)
	}
	waitPod(t, a, admin, ns, "web", 30*time.Second, "Ready again", readyIs(true))
	metrics, err := apiGet(a.Base, "/metrics")
	if err != nil || !strings.Contains(string(metrics), `probed_cri_calls_total{code="OK",method="ExecSync"}`) {
		t.Fatalf("/metrics has no ExecSync count: %v", err)
	}
}

// TestNodeProbedRestartNeverFlipsReady: probed stopped with SIGTERM and
// started again, then killed with SIGKILL and started again, under a Ready
// gated pod: no version of the pod the API server held after it turned
// Ready is not Ready, and the gate's condition never changed (the new
// agent keeps the existing condition until its own first verdict, which
// agrees).
func TestNodeProbedRestartNeverFlipsReady(t *testing.T) {
	n := nodetest.Load(t)
	admin := kubetest.Client(t)
	ns := kubetest.Namespace(t)
	cfg := kubetest.AgentConfigForNode(t, n.Name)
	a := startClusterAgent(t, n.Name, cfg)
	port := nodetest.FreePorts(t, 1)[0]
	pod := n.TargetPod(ns, "web", nodetest.Target{HTTP: port})
	pod.Annotations = map[string]string{"probed.io/probes": "[" + httpProbe("app", "readiness", "ready", port, 1) + "]"}
	pod.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: gate}}
	h := watchPod(t, admin, ns, "web")
	kubetest.CreatePod(t, admin, pod)
	ready := waitPod(t, a, admin, ns, "web", 60*time.Second, "Ready", readyIs(true))
	from := h.len()
	since := gateCondition(ready, gate).LastTransitionTime

	if code := a.stop(syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Fatalf("probed exited %d after SIGTERM; stderr:\n%s", code, tail(a.stderr.String(), 20))
	}
	time.Sleep(3 * time.Second) // the kubelet syncs the pod without probed
	a = startClusterAgent(t, n.Name, cfg)
	waitProbedUntil(t, a, ns, "web", time.Now().Add(2*time.Second))
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-a.done
	time.Sleep(3 * time.Second)
	a = startClusterAgent(t, n.Name, cfg)
	waitProbedUntil(t, a, ns, "web", time.Now().Add(2*time.Second))

	pod2, err := admin.CoreV1().Pods(ns).Get(kubetest.Context(t), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range append(h.since(from), pod2) {
		if ready, desc := podReady(p); !ready {
			t.Errorf("resourceVersion %s: %s", p.ResourceVersion, desc)
		}
		if g := gateCondition(p, gate); g == nil || !g.LastTransitionTime.Equal(&since) {
			t.Errorf("resourceVersion %s: gate %+v, want True since %s", p.ResourceVersion, g, since)
		}
	}
}

// TestNodeSpecAndAnnotationProbesTogether: one pod whose container app has
// the kubelet's spec probes (HTTP readiness, TCP liveness) and whose
// container side has probed's annotation probes (HTTP readiness, the gate,
// and HTTP liveness). Each side runs its own probes at their period and
// never the other's; failing the kubelet's readiness makes app not ready
// and leaves the gate True; failing probed's makes the gate False and
// leaves both containers ready; probed's liveness failure (action event)
// is an Event, and the kubelet restarts nothing.
func TestNodeSpecAndAnnotationProbesTogether(t *testing.T) {
	n := nodetest.Load(t)
	admin := kubetest.Client(t)
	ns := kubetest.Namespace(t)
	a := nodeAgent(t, n)
	ports := nodetest.FreePorts(t, 3)
	app := nodetest.Target{HTTP: ports[0], TCP: ports[1]}
	side := nodetest.Target{HTTP: ports[2]}
	pod := n.TargetPod(ns, "web", app)
	pod.Spec.Containers[0].ReadinessProbe = &v1.Probe{PeriodSeconds: 1, FailureThreshold: 1, ProbeHandler: v1.ProbeHandler{
		HTTPGet: &v1.HTTPGetAction{Path: "/probe/kubelet-ready", Port: intstr.FromInt32(int32(app.HTTP))}}}
	pod.Spec.Containers[0].LivenessProbe = &v1.Probe{PeriodSeconds: 1, FailureThreshold: 3, ProbeHandler: v1.ProbeHandler{
		TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(int32(app.TCP))}}}
	sideContainer := n.TargetPod(ns, "web", side).Spec.Containers[0]
	sideContainer.Name = "side"
	pod.Spec.Containers = append(pod.Spec.Containers, sideContainer)
	pod.Annotations = map[string]string{"probed.io/probes": "[" + httpProbe("side", "readiness", "probed-ready", side.HTTP, 1) + "," +
		httpProbe("side", "liveness", "probed-live", side.HTTP, 1) + "]"}
	pod.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: gate}}
	kubetest.CreatePod(t, admin, pod)
	waitPod(t, a, admin, ns, "web", 60*time.Second, "Ready", readyIs(true))

	// Who probes what, over 10 s: each stream at its period, from its
	// own prober only.
	for _, tg := range []nodetest.Target{app, side} {
		if _, err := probetarget.GetStats(tg.Base(n), true); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(10 * time.Second)
	appStats, err := probetarget.GetStats(app.Base(n), false)
	if err != nil {
		t.Fatal(err)
	}
	sideStats, err := probetarget.GetStats(side.Base(n), false)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		stats  probetarget.Stats
		stream string
	}{
		{appStats, probetarget.StreamHTTP("kubelet-ready")}, {appStats, probetarget.StreamTCP},
		{sideStats, probetarget.StreamHTTP("probed-ready")}, {sideStats, probetarget.StreamHTTP("probed-live")},
	} {
		s := c.stats.Streams[c.stream]
		if s == nil || s.Hits < 7 || s.Hits > 13 {
			t.Errorf("%s: %+v in 10 s, want one a second", c.stream, s)
		}
	}
	if len(appStats.Streams) != 2 || len(sideStats.Streams) != 2 {
		t.Errorf("streams of app %v and side %v, want each prober's own two only", keys(appStats), keys(sideStats))
	}

	// The kubelet's readiness fails: app not ready, the gate stays True.
	if err := probetarget.SetStatus(app.Base(n), "kubelet-ready", 503); err != nil {
		t.Fatal(err)
	}
	p := waitPod(t, a, admin, ns, "web", 30*time.Second, "app not ready", func(p *v1.Pod) (bool, string) {
		cs := appStatus(p)
		return cs != nil && !cs.Ready, fmt.Sprintf("%+v", cs)
	})
	if g := gateCondition(p, gate); g == nil || g.Status != v1.ConditionTrue {
		t.Errorf("gate %+v after the kubelet's probe failed, want True", g)
	}
	if ready, desc := podReady(p); ready {
		t.Errorf("pod Ready with app not ready: %s", desc)
	}
	if err := probetarget.SetStatus(app.Base(n), "kubelet-ready", 200); err != nil {
		t.Fatal(err)
	}
	waitPod(t, a, admin, ns, "web", 30*time.Second, "Ready again", readyIs(true))

	// probed's readiness fails: the gate False, both containers ready.
	if err := probetarget.SetStatus(side.Base(n), "probed-ready", 503); err != nil {
		t.Fatal(err)
	}
	waitCondition(t, a, admin, ns, "web", gate, v1.ConditionFalse, "ProbeFailed", 30*time.Second)
	p = waitPod(t, a, admin, ns, "web", 30*time.Second, "not Ready", readyIs(false))
	for _, cs := range p.Status.ContainerStatuses {
		if !cs.Ready {
			t.Errorf("container %s not ready after probed's probe failed: %+v", cs.Name, cs)
		}
	}

	// probed's liveness fails (action event): an Event, no restart.
	if err := probetarget.SetStatus(side.Base(n), "probed-live", 500); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, a, admin, ns, "web", "LivenessProbeFailed", "Container side failed liveness probe")
	time.Sleep(3 * time.Second)
	p, err = admin.CoreV1().Pods(ns).Get(kubetest.Context(t), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.RestartCount != 0 {
			t.Errorf("container %s restarted %d times", cs.Name, cs.RestartCount)
		}
	}
}

func keys(s probetarget.Stats) []string {
	var out []string
	for k := range s.Streams {
		out = append(out, k)
	}
	return out
}
