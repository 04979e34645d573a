// Package node measures what probes cost a real node: the same N
// hostNetwork pods of the probe target (internal/probetarget) on the node of
// test/node/env.sh, their probes once as spec probes run by the kubelet and
// once as annotation probes run by probed (the spec probes removed), and
// once without any probe; the node's whole CPU (the kubelet, containerd, its
// shims with the runc processes they reaped, the pods' processes, probed)
// and each part's over one window, per probe run; the probes' lateness at
// the targets; for exec probes, the runc execs in flight.
//
//	eval "$(test/node/env.sh start /tmp/probed-node)"
//	make bench-node   # the benchmark, then probebench node-report into docs/benchmarks.md
//
// Settings (environment): PROBED_BENCH_NODE_PODS, the pod counts of the
// HTTP/TCP runs (default "10,25,50,100,200"); PROBED_BENCH_NODE_EXEC_PODS,
// those of the exec runs (default "10,25,50"; "," for none); PROBED_BENCH_NODE_SIDES, the
// sides of the HTTP/TCP runs (default "probed-nowindow,probed,probed-keepalive,bare,kubelet,offloaded":
// probed with --scheduler-coalesce=0, probed as it is by default, probed with --http-keep-alive, the bare
// prober of cmd/bareprober, the kubelet, and the kubelet's manifests
// moved to probed by the offload webhook; the pods without probes always
// run); PROBED_BENCH_NODE_EXEC_SIDES, the sides of the exec runs (default
// "probed,probed-resident,kubelet": probed through ExecSync, probed with
// --exec-mode resident, the kubelet); PROBED_BENCH_NODE_PROBED_ARGS, more flags for probed (e.g.
// "--scheduler-coalesce=0"); PROBED_BENCH_NODE_WINDOW (default 60s);
// PROBED_BENCH_NODE_OUT, the JSON lines (default out/node.jsonl, emptied
// first). It skips without PROBED_TEST_NODE.
// docs/benchmarks.md "The real node" has the figures.
package node

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/probed/probed/bench/internal/bare"
	"github.com/probed/probed/bench/internal/lateness"
	"github.com/probed/probed/bench/internal/nodebench"
	"github.com/probed/probed/bench/internal/sysstat"
	"github.com/probed/probed/internal/kubetest"
	"github.com/probed/probed/internal/nodetest"
	"github.com/probed/probed/internal/probetarget"
)

const (
	period      = time.Second
	settle      = 10 * time.Second
	gateType    = "probed.io/ready"
	execLane    = 64                    // probed's default --exec-pool-size
	createConc  = 8                     // pods created or patched at once
	sampleEvery = 50 * time.Millisecond // runc execs counted (the most seen is a lower bound)
)

func BenchmarkNodeDensity(b *testing.B) {
	n := nodetest.Load(b)
	window := envDuration(b, "PROBED_BENCH_NODE_WINDOW", 60*time.Second)
	httpPods := envInts(b, "PROBED_BENCH_NODE_PODS", []int{10, 25, 50, 100, 200})
	execPods := envInts(b, "PROBED_BENCH_NODE_EXEC_PODS", []int{10, 25, 50})
	out := os.Getenv("PROBED_BENCH_NODE_OUT")
	if out == "" {
		out = filepath.Join("..", "out", "node.jsonl")
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(out, nil, 0o644); err != nil { // one run of the suite per file
		b.Fatal(err)
	}
	sides := envStrings(b, "PROBED_BENCH_NODE_SIDES", nodebench.Sides)
	for _, side := range sides {
		if !slices.Contains(nodebench.Sides, side) {
			b.Fatalf("PROBED_BENCH_NODE_SIDES: %q is not one of %v", side, nodebench.Sides)
		}
	}
	execSides := envStrings(b, "PROBED_BENCH_NODE_EXEC_SIDES", nodebench.ExecSides)
	for _, side := range execSides {
		if !slices.Contains(nodebench.ExecSides, side) {
			b.Fatalf("PROBED_BENCH_NODE_EXEC_SIDES: %q is not one of %v", side, nodebench.ExecSides)
		}
	}
	e := &env{n: n, bin: nodebench.ProbedBinary(b, filepath.Join("..", "..")), window: window, out: out, admin: kubetest.Client(b), sides: sides, execSides: execSides,
		probedArgs: strings.Fields(os.Getenv("PROBED_BENCH_NODE_PROBED_ARGS"))}
	if slices.Contains(sides, nodebench.SideBare) {
		e.bare = bareBinary(b)
	}

	counts := slices.Clone(httpPods)
	for _, c := range execPods {
		if !slices.Contains(counts, c) {
			counts = append(counts, c)
		}
	}
	slices.Sort(counts)
	for _, pods := range counts {
		withHTTP, withExec := slices.Contains(httpPods, pods), slices.Contains(execPods, pods)
		b.Run(fmt.Sprintf("pods=%d", pods), func(b *testing.B) {
			for range b.N {
				e.runCount(b, pods, withHTTP, withExec)
			}
		})
	}
}

// env is what every run shares.
type env struct {
	n          *nodetest.Node
	bin        string // probed
	bare       string // cmd/bareprober, when SideBare runs
	window     time.Duration
	out        string
	admin      kubernetes.Interface
	sides      []string   // of the HTTP/TCP runs (nodebench.Sides)
	execSides  []string   // of the exec runs (nodebench.ExecSides)
	probedArgs []string   // more flags for every probed run
	webhook    *agentProc // `probed webhook`, once the offloaded side runs
}

func (e *env) runs(side string) bool { return slices.Contains(e.sides, side) }

// runCount runs every side of one pod count: the pods without probes, then
// probed's annotation probes on the same pods (HTTP/TCP, then exec), then
// the kubelet's spec probes on new pods.
func (e *env) runCount(b *testing.B, pods int, withHTTP, withExec bool) {
	ns := e.namespace(b)
	ports := nodetest.FreePorts(b, 2*pods)
	targets := make([]nodetest.Target, pods)
	for i := range targets {
		targets[i] = nodetest.Target{HTTP: ports[2*i], TCP: ports[2*i+1]}
	}

	// The pods without probes, gated: the node's cost of the pods alone,
	// then probed's runs on the same pods.
	e.createPods(b, ns, targets, func(pod *v1.Pod, _ nodetest.Target) {
		pod.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: gateType}}
	})
	e.waitPods(b, ns, pods, false)
	base := e.measure(b, ns, nodebench.KindHTTP, nodebench.SideNone, targets, nil, nil)
	if withHTTP {
		e.annotate(b, ns, targets, func(tg nodetest.Target) string { return annotation(nodebench.KindHTTP, tg) })
		for _, side := range []string{nodebench.SideProbedNoWindow, nodebench.SideProbed, nodebench.SideProbedKeepAlive} {
			if !e.runs(side) {
				continue
			}
			a := e.startProbed(b, probedSideArgs[side]...)
			e.waitPods(b, ns, pods, true)
			e.measure(b, ns, nodebench.KindHTTP, side, targets, a.prober(), &base)
			a.stop(b)
		}
		if e.runs(nodebench.SideBare) {
			// The same pods, not Ready (nobody writes their gate): the
			// bare prober only probes.
			p := e.startBare(b, targets)
			e.measure(b, ns, nodebench.KindHTTP, nodebench.SideBare, targets, p.prober(), &base)
			p.stop(b)
		}
	}
	if withExec && (slices.Contains(e.execSides, nodebench.SideProbed) || slices.Contains(e.execSides, nodebench.SideProbedResident)) {
		e.annotate(b, ns, targets, func(tg nodetest.Target) string { return annotation(nodebench.KindExec, tg) })
		for _, side := range []string{nodebench.SideProbed, nodebench.SideProbedResident} {
			if !slices.Contains(e.execSides, side) {
				continue
			}
			a := e.startProbed(b, "--container-runtime-endpoint", e.n.CRIEndpoint, "--exec-mode", probedExecModes[side])
			e.waitPods(b, ns, pods, true)
			e.measure(b, ns, nodebench.KindExec, side, targets, a.prober(), &base)
			a.stop(b)
		}
	}
	e.deletePods(b, ns)

	// The kubelet's spec probes on new pods of the same shape.
	for _, kind := range []string{nodebench.KindHTTP, nodebench.KindExec} {
		if (kind == nodebench.KindHTTP && (!withHTTP || !e.runs(nodebench.SideKubelet))) ||
			(kind == nodebench.KindExec && (!withExec || !slices.Contains(e.execSides, nodebench.SideKubelet))) {
			continue
		}
		ns := e.namespace(b)
		e.createPods(b, ns, targets, func(pod *v1.Pod, tg nodetest.Target) { specProbes(pod, kind, tg) })
		e.waitPods(b, ns, pods, true)
		e.measure(b, ns, kind, nodebench.SideKubelet, targets, nil, &base)
		e.deletePods(b, ns)
	}

	// The same manifests, spec probes and all, in a namespace that opts in
	// to the offload webhook: probed runs what it moved.
	if withHTTP && e.runs(nodebench.SideOffloaded) {
		e.startWebhook(b)
		ns := e.namespace(b)
		kubetest.LabelNamespace(b, ns, map[string]string{offloadLabel: "enabled", "probed.io/liveness-actions": "enabled"})
		e.createPods(b, ns, targets, func(pod *v1.Pod, tg nodetest.Target) { specProbes(pod, nodebench.KindHTTP, tg) })
		e.checkMoved(b, ns, pods)
		a := e.startProbedAs(b, kubetest.AgentConfigWithRestart(b), "--liveness-action=restart", "--container-runtime-endpoint", e.n.CRIEndpoint)
		e.waitPods(b, ns, pods, true)
		e.measure(b, ns, nodebench.KindHTTP, nodebench.SideOffloaded, targets, a.prober(), &base)
		a.stop(b)
		e.deletePods(b, ns)
	}
}

// probedSideArgs are the flags of each HTTP/TCP side of probed's
// (nodebench.SideProbed…): the agent as it runs by default, without its
// window, with kept connections.
var probedSideArgs = map[string][]string{
	nodebench.SideProbed:          nil,
	nodebench.SideProbedNoWindow:  {"--scheduler-coalesce=0"},
	nodebench.SideProbedKeepAlive: {"--http-keep-alive"},
}

// probedExecModes are the --exec-mode of each exec side of probed's.
var probedExecModes = map[string]string{
	nodebench.SideProbed:         "execsync",
	nodebench.SideProbedResident: "resident",
}

// offloadLabel is the namespace label the offload webhook selects
// (agent/kube/offload.NamespaceLabel).
const offloadLabel = "probed.io/offload"

// startWebhook runs `probed webhook` for the node (out of cluster, as the
// admin, its own certificate for 127.0.0.1), told what the offloaded
// side's probed does (the runtime, liveness restarts in namespaces
// labelled probed.io/liveness-actions=enabled), with a configuration that
// sends it the pod creations of namespaces labelled
// probed.io/offload=enabled; both go when b ends.
func (e *env) startWebhook(b *testing.B) {
	b.Helper()
	if e.webhook != nil {
		return
	}
	b.Cleanup(func() { e.webhook = nil })
	own := kubetest.Namespace(b)
	port := nodetest.FreePorts(b, 1)[0]
	name := "probed-offload-" + own
	kubeconfig := kubetest.WriteKubeconfig(b, kubetest.Config(b))
	insecure := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	e.webhook = startProcAt(b, "webhook", e.bin, []string{"webhook", "--kubeconfig", kubeconfig, "--namespace", own,
		"--listen", "127.0.0.1:" + strconv.Itoa(port), "--tls-ip", "127.0.0.1", "--webhook-configuration", name,
		"--liveness-action", "restart", "--agent-container-runtime", "--log-format", "json"},
		"https://127.0.0.1:"+strconv.Itoa(port), insecure, "/readyz", 60*time.Second, func([]byte) bool { return true })
	url := "https://127.0.0.1:" + strconv.Itoa(port) + "/mutate-pods"
	ignore, none := admissionregistrationv1.Ignore, admissionregistrationv1.SideEffectClassNone
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:         "offload.probed.io",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url},
			Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{offloadLabel: "enabled"}},
			FailurePolicy:           &ignore,
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	configs := e.admin.AdmissionregistrationV1().MutatingWebhookConfigurations()
	if _, err := configs.Create(context.Background(), cfg, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = configs.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := configs.Get(ctx, name, metav1.GetOptions{})
		return err == nil && len(got.Webhooks[0].ClientConfig.CABundle) > 0, nil
	})
	if err != nil {
		b.Fatal("the webhook did not publish its CA within a minute")
	}
}

// checkMoved fails unless each of the want pods of ns came through the
// webhook moved: no spec probe, the gate (a pod created as sent would be
// the kubelet's, and the run would measure the wrong side).
func (e *env) checkMoved(b *testing.B, ns string, want int) {
	b.Helper()
	list, err := e.admin.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	moved := 0
	for _, p := range list.Items {
		c := p.Spec.Containers[0]
		if c.ReadinessProbe == nil && c.LivenessProbe == nil && len(p.Spec.ReadinessGates) == 1 {
			moved++
		}
	}
	if moved != want {
		b.Fatalf("%d of %d pods of %s came through the offload webhook moved", moved, want, ns)
	}
}

// namespace is a new namespace whose pods are deleted when b ends (also
// when it fails half-way: the next pod count needs the node to itself).
func (e *env) namespace(b *testing.B) string {
	ns := kubetest.Namespace(b)
	b.Cleanup(func() { e.deletePods(b, ns) })
	return ns
}

// annotation is the probed.io/probes annotation of kind for target tg.
func annotation(kind string, tg nodetest.Target) string {
	if kind == nodebench.KindExec {
		return `[{"container":"app","type":"readiness","periodSeconds":1,"exec":{"command":["true"]}}]`
	}
	return fmt.Sprintf(`[{"container":"app","type":"readiness","periodSeconds":1,"httpGet":{"path":"/probe/ready","port":%d}},`+
		`{"container":"app","type":"liveness","periodSeconds":1,"tcpSocket":{"port":%d}}]`, tg.HTTP, tg.TCP)
}

// specProbes gives the pod's container the spec probes of kind, as the
// annotation has them (the API's defaults otherwise: timeout 1 s,
// thresholds 3 and 1).
func specProbes(pod *v1.Pod, kind string, tg nodetest.Target) {
	c := &pod.Spec.Containers[0]
	if kind == nodebench.KindExec {
		c.ReadinessProbe = &v1.Probe{PeriodSeconds: 1, ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}}}
		return
	}
	c.ReadinessProbe = &v1.Probe{PeriodSeconds: 1, ProbeHandler: v1.ProbeHandler{
		HTTPGet: &v1.HTTPGetAction{Path: "/probe/ready", Port: intstr.FromInt32(int32(tg.HTTP))}}}
	c.LivenessProbe = &v1.Probe{PeriodSeconds: 1, ProbeHandler: v1.ProbeHandler{
		TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(int32(tg.TCP))}}}
}

func podName(i int) string { return fmt.Sprintf("t-%03d", i) }

// createPods creates one target pod per target in ns, mutate shaping each.
func (e *env) createPods(b *testing.B, ns string, targets []nodetest.Target, mutate func(*v1.Pod, nodetest.Target)) {
	b.Helper()
	e.parallel(b, len(targets), func(i int) error {
		pod := e.n.TargetPod(ns, podName(i), targets[i])
		mutate(pod, targets[i])
		_, err := e.admin.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{})
		return err
	})
}

// annotate sets each pod's probed.io/probes annotation.
func (e *env) annotate(b *testing.B, ns string, targets []nodetest.Target, value func(nodetest.Target) string) {
	b.Helper()
	e.parallel(b, len(targets), func(i int) error {
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{"probed.io/probes": value(targets[i])}}})
		if err != nil {
			return err
		}
		_, err = e.admin.CoreV1().Pods(ns).Patch(context.Background(), podName(i), types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
}

// parallel runs f(0..n-1), createConc at once, failing on the first error.
func (e *env) parallel(b *testing.B, n int, f func(i int) error) {
	b.Helper()
	var wg sync.WaitGroup
	errs := make([]error, n)
	sem := make(chan struct{}, createConc)
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[i] = f(i)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
}

// waitPods waits until want pods of ns are Ready (ready) or have every
// container running (not ready): 3 minutes plus a second a pod, then it
// goes on with what there is (the run's Ready says how many).
func (e *env) waitPods(b *testing.B, ns string, want int, ready bool) int {
	b.Helper()
	timeout := 3*time.Minute + time.Duration(want)*time.Second
	got := 0
	_ = wait.PollUntilContextTimeout(context.Background(), 2*time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		got = e.countPods(b, ns, ready)
		return got >= want, nil
	})
	if got < want {
		b.Logf("%s: %d of %d pods %s after %v", ns, got, want, map[bool]string{true: "Ready", false: "running"}[ready], timeout)
	}
	return got
}

// countPods counts the pods of ns that are Ready (ready) or running.
func (e *env) countPods(b *testing.B, ns string, ready bool) int {
	list, err := e.admin.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		b.Logf("list pods of %s: %v", ns, err)
		return 0
	}
	n := 0
	for _, p := range list.Items {
		ok := p.Status.Phase == v1.PodRunning
		if ready {
			ok = false
			for _, c := range p.Status.Conditions {
				ok = ok || (c.Type == v1.PodReady && c.Status == v1.ConditionTrue)
			}
		}
		if ok {
			n++
		}
	}
	return n
}

// deletePods deletes every pod of ns and waits until the kubelet removed
// them (their ports are then free).
func (e *env) deletePods(b *testing.B, ns string) {
	b.Helper()
	ctx := context.Background()
	if err := e.admin.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		b.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := e.admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) == 0, nil
	})
	if err != nil {
		b.Fatalf("pods of %s not gone after 10 minutes", ns)
	}
}

// agentProc is the probed binary running for the node.
type agentProc struct {
	cmd  *exec.Cmd
	base string
	done chan struct{}
}

// startProbed runs probed for the node under the agent's RBAC (not bound to
// a pod: no agent pod for the kubelet to run), its log in a file, and
// waits until /healthz answers.
func (e *env) startProbed(b *testing.B, args ...string) *agentProc {
	b.Helper()
	return e.startProbedAs(b, kubetest.AgentConfig(b), args...)
}

// startProbedAs is startProbed with the identity cfg (e.g. the agent's
// with the restart role).
func (e *env) startProbedAs(b *testing.B, cfg *rest.Config, args ...string) *agentProc {
	b.Helper()
	kubeconfig := kubetest.WriteKubeconfig(b, cfg)
	port := nodetest.FreePorts(b, 1)[0]
	// The benchmark's pods are one namespace's: without
	// --namespace-probe-rate-share=1 the default share (a quarter of
	// --max-probe-rate, 250 runs/s) admits 125 pods of two probes at 1 s
	// and refuses the rest (measured at 200 pods: 125 Ready, 251 runs/s).
	args = append(append([]string{"run", "--kubeconfig", kubeconfig, "--node-name", e.n.Name,
		"--listen", "127.0.0.1:" + strconv.Itoa(port), "--log-format", "json", "--namespace-probe-rate-share=1"}, e.probedArgs...), args...)
	return startProc(b, "probed", e.bin, args, port, "/healthz", 60*time.Second, func(body []byte) bool { return string(body) == "ok" })
}

// startProc runs bin with args, its output in a log file, and waits up to
// within until GET path on 127.0.0.1:port answers a body ready accepts; it
// is stopped when b ends.
func startProc(b *testing.B, name, bin string, args []string, port int, path string, within time.Duration, ready func([]byte) bool) *agentProc {
	b.Helper()
	return startProcAt(b, name, bin, args, "http://127.0.0.1:"+strconv.Itoa(port), http.DefaultClient, path, within, ready)
}

// startProcAt is startProc for a process that answers at base through
// client (the webhook: HTTPS).
func startProcAt(b *testing.B, name, bin string, args []string, base string, client *http.Client, path string, within time.Duration, ready func([]byte) bool) *agentProc {
	b.Helper()
	a := &agentProc{base: base, done: make(chan struct{})}
	logf, err := os.Create(filepath.Join(b.TempDir(), name+".log"))
	if err != nil {
		b.Fatal(err)
	}
	a.cmd = exec.Command(bin, args...)
	a.cmd.Stdout, a.cmd.Stderr = logf, logf
	if err := a.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	go func() { _ = a.cmd.Wait(); logf.Close(); close(a.done) }()
	b.Cleanup(func() { a.stop(b) })
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, within, true, func(context.Context) (bool, error) {
		body, err := get(client, a.base+path, "")
		return err == nil && ready(body), nil
	})
	if err != nil {
		b.Fatalf("%s: GET %s did not answer within %v (log: %s)", name, path, within, logf.Name())
	}
	return a
}

// stop ends probed (SIGTERM, then SIGKILL after 30 s); idempotent.
func (a *agentProc) stop(b *testing.B) {
	select {
	case <-a.done:
		return
	default:
	}
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.done:
	case <-time.After(30 * time.Second):
		_ = a.cmd.Process.Kill()
		<-a.done
	}
}

// proberProc is the process of a side's prober whose CPU and counts a run
// measures: probed's (its metrics) or the bare prober's (GET /counts).
type proberProc struct {
	pid  int
	base string // http://127.0.0.1:PORT of its API
	bare bool
}

func (a *agentProc) prober() *proberProc {
	return &proberProc{pid: a.cmd.Process.Pid, base: a.base}
}

// bareProc is cmd/bareprober running for the node.
type bareProc struct {
	*agentProc
}

func (p *bareProc) prober() *proberProc {
	return &proberProc{pid: p.cmd.Process.Pid, base: p.base, bare: true}
}

// startBare runs the bare prober against the targets' probes as the
// annotation has them (an HTTP readiness probe on the HTTP port, a TCP
// liveness probe on the TCP port, period 1 s, timeout 1 s) and waits until
// it answers.
func (e *env) startBare(b *testing.B, targets []nodetest.Target) *bareProc {
	b.Helper()
	var probes []bare.Probe
	host := e.n.IP // the pods are hostNetwork
	for _, tg := range targets {
		probes = append(probes,
			bare.Probe{URL: "http://" + net.JoinHostPort(host, strconv.Itoa(tg.HTTP)) + "/probe/ready", Period: period, Timeout: time.Second},
			bare.Probe{Addr: net.JoinHostPort(host, strconv.Itoa(tg.TCP)), Period: period, Timeout: time.Second})
	}
	dir := b.TempDir()
	list, err := json.Marshal(probes)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "probes.json"), list, 0o644); err != nil {
		b.Fatal(err)
	}
	port := nodetest.FreePorts(b, 1)[0]
	a := startProc(b, "bareprober", e.bare, []string{"-probes", filepath.Join(dir, "probes.json"), "-listen", "127.0.0.1:" + strconv.Itoa(port)},
		port, "/counts", 30*time.Second, func([]byte) bool { return true })
	return &bareProc{a}
}

// measure lets the node settle, then measures one window: the node's CPU
// by part, the probe runs, their lateness at the targets (HTTP/TCP), the
// runc execs in flight; it appends the Result to the output and reports it.
func (e *env) measure(b *testing.B, ns, kind, side string, targets []nodetest.Target, a *proberProc, base *nodebench.Result) nodebench.Result {
	b.Helper()
	r := nodebench.Result{Kind: kind, Side: side, Pods: len(targets), PeriodSeconds: int(period / time.Second),
		ProbesPerPod: map[string]int{nodebench.KindHTTP: 2, nodebench.KindExec: 1}[kind]}
	if side == nodebench.SideNone {
		r.ProbesPerPod = 0
	}
	r.Expected = float64(r.Pods*r.ProbesPerPod) / period.Seconds()
	r.Ready = e.countPods(b, ns, side != nodebench.SideNone && side != nodebench.SideBare)
	node := nodebench.Node{Kubelet: e.n.KubeletPID, Containerd: e.n.ContainerdPID,
		Socket: strings.TrimPrefix(e.n.CRIEndpoint, "unix://"), APIServer: e.n.APIServerPID, Etcd: e.n.EtcdPID}
	if a != nil {
		node.Probed = a.pid
		if !a.bare {
			r.ExecLane = execLane
		}
	}
	time.Sleep(settle)

	counter := e.proberCounter(b, ns, side, a)
	rec := lateness.New(2*len(targets), time.Second)
	for _, tg := range targets { // empty the targets' streams: the window starts now
		if _, err := probetarget.GetStats(tg.Base(e.n), true); err != nil {
			b.Fatal(err)
		}
	}
	counts0 := counter()
	cpu0, t0 := node.Sample(), time.Now()
	hu0, hs0 := sysstat.CPU()
	rec.StartWindow(int(e.window/period) * 3)
	// The runc execs in flight, on exec rows only: sampling is itself a
	// load (cpu.harness), which the HTTP/TCP rows must not carry.
	stopSampler := func() int { return 0 }
	if kind == nodebench.KindExec {
		stopSampler = sampleExecs(node.ExecCounter(e.n.Dir + "/cri/runc"))
	}
	time.Sleep(e.window)
	cpu1, t1 := node.Sample(), time.Now()
	hu1, hs1 := sysstat.CPU()
	counts := counter().sub(counts0)
	r.ExecsInFlightMax = stopSampler()
	r.WindowSeconds = t1.Sub(t0).Seconds()
	r.CPU = nodebench.Seconds(cpu1.Sub(cpu0))
	r.CPU.Harness = (hu1 - hu0 + hs1 - hs0).Seconds()

	// Arrivals at the targets: the HTTP/TCP runs and their lateness.
	var arrivals int64
	for i, tg := range targets {
		st, err := probetarget.GetStats(tg.Base(e.n), false)
		if err != nil {
			b.Fatal(err)
		}
		for j, name := range []string{probetarget.StreamHTTP("ready"), probetarget.StreamTCP} {
			s := st.Streams[name]
			if s == nil {
				continue
			}
			for _, us := range s.Times {
				if at := time.UnixMicro(us); !at.After(t1) {
					rec.StartAt(2*i+j, at)
					arrivals++
				}
			}
		}
	}
	r.Runs, r.Failed = arrivals, counts.failed
	if kind == nodebench.KindExec {
		r.Runs, r.ExecCalls = counts.runs, counts.calls
	}
	if kind == nodebench.KindHTTP && side != nodebench.SideNone {
		st := rec.Stats(period, nil)
		r.Lateness = &st
	}
	r.Load = sysstat.LoadAverage()
	r.Time = time.Now().UTC()
	if r.Ready < r.Pods {
		r.Note = fmt.Sprintf("%d of %d pods ready", r.Ready, r.Pods)
	}
	if side != nodebench.SideNone {
		r.Finish(base)
	} else {
		r.Finish(nil)
	}
	if err := nodebench.Append(e.out, r); err != nil {
		b.Fatal(err)
	}
	b.Logf("%s %s pods=%d: %.1f runs/s (expected %.0f), node CPU %.3f cores (kubelet %.3f, containerd %.3f, shims %.3f, pods %.3f, probed %.3f; control plane %.3f; this benchmark %.3f), %.2f ms/run, probing %.2f ms/run, execs in flight ≤ %d",
		kind, side, r.Pods, r.RunsPerSec, r.Expected, r.CPU.Node/r.WindowSeconds, r.CPU.Kubelet/r.WindowSeconds,
		r.CPU.Containerd/r.WindowSeconds, r.CPU.Shims/r.WindowSeconds, r.CPU.Pods/r.WindowSeconds, r.CPU.Probed/r.WindowSeconds,
		r.CPU.Control/r.WindowSeconds, r.CPU.Harness/r.WindowSeconds, r.NodeMsPerRun, r.ProbingMsPerRun, r.ExecsInFlightMax)
	b.ReportMetric(r.RunsPerSec, "runs/s")
	b.ReportMetric(r.CPU.Node/r.WindowSeconds, "node-cores")
	if r.Runs > 0 {
		b.ReportMetric(r.NodeMsPerRun, "node-ms/run")
	}
	return r
}

// proberCounts is what the prober of a run reports about ns's pods: its
// probe runs and those that were not a success (prober_probe_total, summed
// over types; every target is healthy, so each of those is a false
// verdict), and the ExecSync calls it made (the kubelet's
// kubelet_runtime_operations_total{operation_type="exec_sync"}, probed's
// probed_cri_calls_total{method="ExecSync"}).
type proberCounts struct{ runs, failed, calls int64 }

func (c proberCounts) sub(o proberCounts) proberCounts {
	return proberCounts{c.runs - o.runs, c.failed - o.failed, c.calls - o.calls}
}

// proberCounter returns a function that reads proberCounts from the
// kubelet's or probed's metrics, or the bare prober's counts; zero without
// probes.
func (e *env) proberCounter(b *testing.B, ns, side string, a *proberProc) func() proberCounts {
	if side == nodebench.SideNone {
		return func() proberCounts { return proberCounts{} }
	}
	if a != nil && a.bare {
		return func() proberCounts {
			body, err := get(http.DefaultClient, a.base+"/counts", "")
			if err != nil {
				b.Fatal(err)
			}
			var c struct{ OK, Failed int64 }
			if err := json.Unmarshal(body, &c); err != nil {
				b.Fatal(err)
			}
			return proberCounts{runs: c.OK + c.Failed, failed: c.Failed}
		}
	}
	base, token, client := "", "", http.DefaultClient
	calls := map[string]string{"method": "ExecSync"}
	callsFamily := "probed_cri_calls_total"
	if side == nodebench.SideKubelet {
		cfg := kubetest.Config(b)
		base, token = fmt.Sprintf("https://127.0.0.1:%d", e.n.KubeletPort), cfg.BearerToken
		// The kubelet's serving certificate is self-signed (no CA to check it by).
		client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
		callsFamily, calls = "kubelet_runtime_operations_total", map[string]string{"operation_type": "exec_sync"}
	} else {
		base = a.base
	}
	read := func(path string, sums ...func(body []byte) (int64, error)) []int64 {
		body, err := get(client, base+path, token)
		if err != nil {
			b.Fatal(err)
		}
		out := make([]int64, len(sums))
		for i, sum := range sums {
			if out[i], err = sum(body); err != nil {
				b.Fatal(err)
			}
		}
		return out
	}
	inNS := func(l map[string]string) bool { return l["namespace"] == ns }
	return func() proberCounts {
		probes := read("/metrics/probes",
			func(body []byte) (int64, error) { return counterSum(body, "prober_probe_total", inNS) },
			func(body []byte) (int64, error) {
				return counterSum(body, "prober_probe_total", func(l map[string]string) bool { return inNS(l) && l["result"] != "successful" })
			})
		c := read("/metrics", func(body []byte) (int64, error) {
			return counterSum(body, callsFamily, func(l map[string]string) bool {
				for k, v := range calls {
					if l[k] != v {
						return false
					}
				}
				return true
			})
		})
		return proberCounts{runs: probes[0], failed: probes[1], calls: c[0]}
	}
}

// counterSum sums the counter family's series whose labels match.
func counterSum(body []byte, family string, match func(labels map[string]string) bool) (int64, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		return 0, err
	}
	var n float64
	if f := fams[family]; f != nil {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if match(labels) {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return int64(n), nil
}

// sampleExecs calls count every sampleEvery until the returned stop
// function is called, which returns the most it counted at once.
func sampleExecs(count func() int) func() int {
	stop := make(chan struct{})
	done := make(chan int)
	go func() {
		most := 0
		t := time.NewTicker(sampleEvery)
		defer t.Stop()
		for {
			select {
			case <-stop:
				done <- most
				return
			case <-t.C:
				most = max(most, count())
			}
		}
	}()
	return func() int { close(stop); return <-done }
}

func get(c *http.Client, url, token string) ([]byte, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return body, err
}

// bareBinary is cmd/bareprober of this module, built now.
func bareBinary(b *testing.B) string {
	out := filepath.Join(b.TempDir(), "bareprober")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/bareprober")
	cmd.Dir = ".." // bench, from bench/node
	if msg, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("go build ./cmd/bareprober: %v\n%s", err, msg)
	}
	return out
}

func envDuration(b *testing.B, name string, def time.Duration) time.Duration {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		b.Fatalf("%s: %v", name, err)
	}
	return d
}

func envStrings(b *testing.B, name string, def []string) []string {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	out := []string{} // set: "," is an empty list (e.g. no exec runs)
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func envInts(b *testing.B, name string, def []int) []int {
	fields := envStrings(b, name, nil)
	if fields == nil {
		return def
	}
	out := make([]int, len(fields))
	for i, f := range fields {
		n, err := strconv.Atoi(f)
		if err != nil {
			b.Fatalf("%s: %v", name, err)
		}
		out[i] = n
	}
	return out
}
