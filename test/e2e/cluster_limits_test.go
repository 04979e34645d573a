package e2e

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/probed/probed/internal/kubetest"
)

// tcpListener accepts and closes connections on 127.0.0.1 for the test's
// duration and returns its port.
func tcpListener(t *testing.T) int {
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
	return ln.Addr().(*net.TCPAddr).Port
}

// limitsPod is a gated pod of n containers c0..c(n-1), each with an
// annotation readiness tcpSocket probe of the given timing fields (JSON).
func limitsPod(ns, name, node string, n, port int, timing string) *v1.Pod {
	var containers, items []string
	for i := 0; i < n; i++ {
		containers = append(containers, fmt.Sprintf("c%d", i))
		items = append(items, fmt.Sprintf(`{"container":"c%d","type":"readiness",%s,"tcpSocket":{"port":%d}}`, i, timing, port))
	}
	pod := kubetest.NewPod(ns, name, node, containers...)
	pod.Annotations = map[string]string{"probed.io/probes": "[" + strings.Join(items, ",") + "]"}
	pod.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: "probed.io/ready"}}
	return pod
}

// The per-pod limits and the node budget, through the real binary and a real API server, with the
// CLI's default limits: a pod whose annotation declares more probes than
// --max-probes-per-pod (32) runs none of them, and one whose readiness
// probe is faster than --min-probe-period (1 s) is refused: each gets a
// Warning Event naming the field and the flag, and its readiness-gate
// condition False with the same reason, never a silent drop. A pod within
// the limits on the same node is probed and turns True.
func TestClusterLimitsArePerPodAndSaySo(t *testing.T) {
	admin := kubetest.Client(t)
	ns, node := kubetest.Namespace(t), kubetest.NodeName(t)
	port := tcpListener(t)
	for _, p := range []*v1.Pod{
		limitsPod(ns, "many", node, 40, port, `"periodSeconds":1`),
		limitsPod(ns, "fast", node, 1, port, `"periodSeconds":1,"periodMilliseconds":-900`),
		limitsPod(ns, "fine", node, 2, port, `"periodSeconds":1`),
	} {
		kubetest.CreatePod(t, admin, p)
		kubetest.SetPodRunning(t, admin, ns, p.Name, true)
	}
	a := startClusterAgent(t, node, nil)

	waitCondition(t, a, admin, ns, "fine", "probed.io/ready", v1.ConditionTrue, "ProbeSucceeded", 30*time.Second)
	c := waitCondition(t, a, admin, ns, "many", "probed.io/ready", v1.ConditionFalse, "InvalidProbeAnnotation", 30*time.Second)
	for _, want := range []string{"Too many: 40", "at most 32", "--max-probes-per-pod"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("condition of many: %q lacks %q", c.Message, want)
		}
	}
	waitEvent(t, a, admin, ns, "many", "InvalidProbeAnnotation", "Too many: 40", "--max-probes-per-pod")
	c = waitCondition(t, a, admin, ns, "fast", "probed.io/ready", v1.ConditionFalse, "InvalidProbeAnnotation", 30*time.Second)
	for _, want := range []string{"periodMilliseconds", "shortest is 1s", "--min-probe-period"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("condition of fast: %q lacks %q", c.Message, want)
		}
	}
	waitEvent(t, a, admin, ns, "fast", "InvalidProbeAnnotation", "periodMilliseconds", "--min-probe-period")

	// None of the refused pods' probes ran: their history is empty.
	for _, name := range []string{"many", "fast"} {
		body, err := apiGet(a.Base, "/pods/"+ns+"/"+name+"/probes")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(body), `"results":[{`) {
			t.Errorf("a probe of %s ran: %s", name, body)
		}
	}
}

// The node's budget of annotation probe runs per second
// (--max-probe-rate). A pod that would take the node past it runs none of
// its probes: a ProbeBudgetExceeded Event and condition say so; once the
// pod before it is deleted, it is admitted at the next pod sync and turns
// True, with a ProbesAdmitted Event.
func TestClusterProbeBudgetRefusesThenAdmits(t *testing.T) {
	admin := kubetest.Client(t)
	ns, node := kubetest.Namespace(t), kubetest.NodeName(t)
	port := tcpListener(t)
	first := limitsPod(ns, "first", node, 4, port, `"periodSeconds":1`)
	kubetest.CreatePod(t, admin, first)
	kubetest.SetPodRunning(t, admin, ns, "first", true)
	// One namespace alone: the whole budget is its fair share.
	a := startClusterAgent(t, node, nil, "--max-probe-rate", "5", "--namespace-probe-rate-share", "1", "--sync-frequency", "2s")
	waitCondition(t, a, admin, ns, "first", "probed.io/ready", v1.ConditionTrue, "ProbeSucceeded", 30*time.Second)

	second := limitsPod(ns, "second", node, 2, port, `"periodSeconds":1`)
	kubetest.CreatePod(t, admin, second)
	kubetest.SetPodRunning(t, admin, ns, "second", true)
	c := waitCondition(t, a, admin, ns, "second", "probed.io/ready", v1.ConditionFalse, "ProbeBudgetExceeded", 30*time.Second)
	for _, want := range []string{"ask for 2 runs/s", "--max-probe-rate 5/s", "has 1/s left"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("condition of second: %q lacks %q", c.Message, want)
		}
	}
	waitEvent(t, a, admin, ns, "second", "ProbeBudgetExceeded", "ask for 2 runs/s")

	if err := admin.CoreV1().Pods(ns).Delete(kubetest.Context(t), "first", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	waitCondition(t, a, admin, ns, "second", "probed.io/ready", v1.ConditionTrue, "ProbeSucceeded", 30*time.Second)
	waitEvent(t, a, admin, ns, "second", "ProbesAdmitted")
}

// The node's budget by fair share, the review's case scaled: with
// --max-probe-rate=100 one tenant's pods took 99 runs/s and a later pod of
// another namespace was refused for good. Now a namespace holds at most its
// share (--namespace-probe-rate-share, 0.25 by default): the hungry
// namespace's first pod (25 probes at 1 s; the first the informer hands
// over) is admitted, its next ones are
// refused with an Event and a condition saying the namespace is over its
// share, and the pods of another namespace that come later are admitted
// and turn True. The hungry pod already admitted stays True: nothing
// running is taken back.
func TestClusterProbeBudgetShareRefusesOnlyTheNamespaceOverIt(t *testing.T) {
	admin := kubetest.Client(t)
	hungry, victims, node := kubetest.Namespace(t), kubetest.Namespace(t), kubetest.NodeName(t)
	port := tcpListener(t)
	for i := range 4 {
		p := limitsPod(hungry, fmt.Sprintf("hungry-%d", i), node, 25, port, `"periodSeconds":1`)
		kubetest.CreatePod(t, admin, p)
		kubetest.SetPodRunning(t, admin, hungry, p.Name, true)
	}
	a := startClusterAgent(t, node, nil, "--max-probe-rate", "100", "--sync-frequency", "2s")
	// The informer hands the pods over in no set order: whichever comes
	// first is admitted, the three others refused.
	var admitted string
	var refused []string
	eventually(t, a.proc, 60*time.Second, "one hungry pod True, three False with ProbeBudgetExceeded", func() (bool, string) {
		admitted, refused = "", nil
		var states []string
		for i := range 4 {
			name := fmt.Sprintf("hungry-%d", i)
			pod, err := admin.CoreV1().Pods(hungry).Get(kubetest.Context(t), name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			c := gateCondition(pod, "probed.io/ready")
			switch {
			case c == nil:
				states = append(states, name+": no condition")
			case c.Status == v1.ConditionTrue && c.Reason == "ProbeSucceeded":
				admitted = name
			case c.Status == v1.ConditionFalse && c.Reason == "ProbeBudgetExceeded":
				refused = append(refused, name)
				for _, want := range []string{"ask for 25 runs/s", "namespace " + hungry + " holds 25 runs/s", "over its fair share", "--namespace-probe-rate-share 0.25"} {
					if !strings.Contains(c.Message, want) {
						t.Errorf("condition of %s: %q lacks %q", name, c.Message, want)
					}
				}
			default:
				states = append(states, fmt.Sprintf("%s: %s %s", name, c.Status, c.Reason))
			}
		}
		return admitted != "" && len(refused) == 3, fmt.Sprintf("admitted %q, refused %q, %q", admitted, refused, states)
	})
	waitEvent(t, a, admin, hungry, refused[0], "ProbeBudgetExceeded", "over its fair share", "--namespace-probe-rate-share 0.25")

	for i := range 3 {
		p := limitsPod(victims, fmt.Sprintf("victim-%d", i), node, 2, port, `"periodSeconds":1`)
		kubetest.CreatePod(t, admin, p)
		kubetest.SetPodRunning(t, admin, victims, p.Name, true)
	}
	for i := range 3 {
		waitCondition(t, a, admin, victims, fmt.Sprintf("victim-%d", i), "probed.io/ready", v1.ConditionTrue, "ProbeSucceeded", 30*time.Second)
	}
	for _, e := range podEvents(t, admin, victims, "victim-0") {
		if e.Reason == "ProbeBudgetExceeded" {
			t.Errorf("a victim was refused: %s", e.Note)
		}
	}
	// Nothing was taken back, and the hungry namespace is still refused.
	waitCondition(t, a, admin, hungry, admitted, "probed.io/ready", v1.ConditionTrue, "ProbeSucceeded", time.Second)
	for _, name := range refused {
		waitCondition(t, a, admin, hungry, name, "probed.io/ready", v1.ConditionFalse, "ProbeBudgetExceeded", time.Second)
	}
}

// The two hostile pods of the review (1,000 containers each,
// probes every 100 ms: 20,000 runs a second asked) are refused with the
// CLI's defaults, and the agent (the binary without the race detector, as
// shipped) stays far below the DaemonSet's 256Mi limit; it sets the Go
// runtime's soft memory limit from PROBED_MEMORY_LIMIT, the container's
// limit from the downward API.
func TestClusterHostilePodsStayUnderTheMemoryLimit(t *testing.T) {
	admin := kubetest.Client(t)
	ns, node := kubetest.Namespace(t), kubetest.NodeName(t)
	port := tcpListener(t)
	for _, name := range []string{"hostile-a", "hostile-b"} {
		p := limitsPod(ns, name, node, 1000, port, `"periodSeconds":1,"periodMilliseconds":-900`)
		kubetest.CreatePod(t, admin, p)
		kubetest.SetPodRunning(t, admin, ns, name, true)
	}
	const limit = 256 << 20
	a := startClusterAgentWith(t, checkBin, []string{"PROBED_MEMORY_LIMIT=" + strconv.Itoa(limit)}, node, nil)
	for _, name := range []string{"hostile-a", "hostile-b"} {
		waitCondition(t, a, admin, ns, name, "probed.io/ready", v1.ConditionFalse, "InvalidProbeAnnotation", 60*time.Second)
	}
	metrics, err := apiGet(a.Base, "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var memLimit float64
	for _, l := range strings.Split(string(metrics), "\n") {
		if v, ok := strings.CutPrefix(l, "go_gc_gomemlimit_bytes "); ok {
			memLimit, _ = strconv.ParseFloat(v, 64)
		}
	}
	if want := 0.9 * limit; memLimit < want-1 || memLimit > want+1 {
		t.Errorf("go_gc_gomemlimit_bytes = %v, want 90%% of PROBED_MEMORY_LIMIT, %v", memLimit, want)
	}
	cpu0 := processCPU(t, a.cmd.Process.Pid)
	time.Sleep(5 * time.Second) // a few sync rounds with both pods refused
	cpu := processCPU(t, a.cmd.Process.Pid) - cpu0
	rss := processRSS(t, a.cmd.Process.Pid)
	t.Logf("agent with both hostile pods: RSS %d MiB, CPU %.1f%% of a core over 5 s", rss>>20, 100*cpu.Seconds()/5)
	if rss > limit/2 {
		t.Errorf("agent RSS %d MiB, want well under the 256Mi limit", rss>>20)
	}
}

// processRSS reads VmRSS of pid (bytes).
func processRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

// processCPU reads the user and system CPU time pid has used
// (/proc/PID/stat, in clock ticks of 1/100 s).
func processCPU(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// The fields after the command's closing parenthesis: utime and stime
	// are the 12th and 13th.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}
