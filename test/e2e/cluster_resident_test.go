package e2e

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/probed/probed/internal/critest"
	"github.com/probed/probed/internal/kubetest"
)

// --exec-mode resident with the real binary, the real containerd
// and the real API server: exec probes run through one resident helper per
// container, which never outlives probed (SIGTERM, kill -9).

// helperProcs are the container's processes of probed's exec helper.
func (p *criPod) helperProcs(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, l := range strings.Split(p.exec(t, "ps -o pid,args"), "\n") {
		if strings.Contains(l, "probed-exec-helper") && !strings.Contains(l, "ps -o pid,args") {
			out = append(out, strings.TrimSpace(l))
		}
	}
	return out
}

// waitHelpers waits until the container holds n helper processes (3 per
// helper: its shell, reader and runner).
func waitHelpers(t *testing.T, a *clusterAgent, p *criPod, n int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		procs := p.helperProcs(t)
		if len(procs) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d helper processes in the container after %v, want %d:\n%s\nprobed's stderr:\n%s", len(procs), within, n,
				strings.Join(procs, "\n"), tail(a.stderr.String(), 20))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// The gate follows an exec probe run through the container's helper, with
// the texts of the ExecSync mode; `probed status -o wide` and the metrics
// say resident; the helper ends with probed, at kill -9 as at SIGTERM, and
// a restarted probed starts one helper, never a second.
func TestClusterResidentExec(t *testing.T) {
	admin := kubetest.Client(t)
	ns, node := kubetest.Namespace(t), kubetest.NodeName(t)
	a := criAgent(t, node, "--exec-mode", "resident")
	const file = "/probed-resident-ready"
	p := startCRIPod(t, admin, ns, "web", node,
		`[{"container":"app","type":"readiness","periodSeconds":1,"exec":{"command":["cat","`+file+`"]}}]`,
		"echo ok > "+file+"; exec sleep 3600", nil, nil)
	waitCondition(t, a, admin, ns, "web", gate, v1.ConditionTrue, "ProbeSucceeded", 30*time.Second)
	waitHelpers(t, a, p, 3, 30*time.Second)
	eventually(t, a.proc, 30*time.Second, "runs through the helper", func() (bool, string) {
		m, err := apiGet(a.Base, "/metrics")
		return err == nil && strings.Contains(string(m), `probed_exec_runs_total{mode="resident",reason=""}`) &&
			strings.Contains(string(m), "probed_exec_helpers 1\n") && strings.Contains(string(m), `probed_cri_calls_total{code="OK",method="Exec"} 1`), string(m)
	})
	p.exec(t, "rm "+file)
	waitCondition(t, a, admin, ns, "web", gate, v1.ConditionFalse, "ProbeFailed", 30*time.Second)
	waitEvent(t, a, admin, ns, "web", "Unhealthy", "Readiness probe failed (3/3): container marked not ready: cat: can't open '"+file+"': No such file or directory")
	p.exec(t, "echo ok > "+file)
	waitCondition(t, a, admin, ns, "web", gate, v1.ConditionTrue, "ProbeSucceeded", 30*time.Second)

	stdout, stderr, code := runProbed(t, nil, "status", "-s", strings.TrimPrefix(a.Base, "http://"), "-o", "wide")
	if code != 0 || !strings.Contains(stdout, "app/readiness(resident)=success") {
		t.Fatalf("status -o wide: exit %d %s\n%s", code, stderr, stdout)
	}

	// kill -9: the runtime closes the helper's stdin when probed's
	// connection goes, and the helper exits.
	a.stop(syscall.SIGKILL, 10*time.Second)
	waitHelpers(t, a, p, 0, 15*time.Second)
	a2 := startClusterAgent(t, node, a.Config, "--container-runtime-endpoint", critest.Endpoint(t), "--exec-mode", "resident")
	waitCondition(t, a2, admin, ns, "web", gate, v1.ConditionTrue, "", 30*time.Second)
	waitHelpers(t, a2, p, 3, 30*time.Second)
	time.Sleep(3 * time.Second) // more runs: still one helper
	waitHelpers(t, a2, p, 3, time.Second)
	if code := a2.stop(syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Fatalf("probed exited %d after SIGTERM; stderr:\n%s", code, tail(a2.stderr.String(), 20))
	}
	waitHelpers(t, a2, p, 0, 10*time.Second)
}

// A container that cannot host a helper (no sh in its PATH) runs its exec
// probes through ExecSync: the gate follows them, one Normal
// ExecHelperUnavailable Event says why, and the status says execsync with
// the reason.
func TestClusterResidentFallback(t *testing.T) {
	admin := kubetest.Client(t)
	ns, node := kubetest.Namespace(t), kubetest.NodeName(t)
	a := criAgent(t, node, "--exec-mode", "resident")
	rs := critest.Runtime(t)
	pod := kubetest.NewPod(ns, "web", node, "app")
	pod.Annotations = map[string]string{"probed.io/probes": `[{"container":"app","type":"readiness","periodSeconds":1,"exec":{"command":["/bin/true"]}}]`}
	pod.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: gate}}
	created := kubetest.CreatePod(t, admin, pod)
	id := critest.RunPodSandboxFor(t, rs, ns, "web", string(created.UID)).Start(t, critest.Container{Name: "app", Command: []string{"/bin/sleep", "3600"},
		Env: []*runtimeapi.KeyValue{{Key: "PATH", Value: []byte("/nowhere")}}})
	kubetest.SetPodRunning(t, admin, ns, "web", true)
	(&criPod{ns: ns, name: "web", id: id, rs: rs}).setContainerID(t, admin, "containerd://"+id)
	waitCondition(t, a, admin, ns, "web", gate, v1.ConditionTrue, "ProbeSucceeded", 30*time.Second)
	waitEvent(t, a, admin, ns, "web", "ExecHelperUnavailable",
		"Exec probes of container app run through the container runtime's ExecSync, not a resident helper: no sh in the container's PATH")
	eventually(t, a.proc, 10*time.Second, "status says execsync", func() (bool, string) {
		stdout, _, _ := runProbed(t, nil, "status", "-s", strings.TrimPrefix(a.Base, "http://"), "-o", "wide")
		return strings.Contains(stdout, "app/readiness(execsync (no sh in the container's PATH))=success"), stdout
	})
	time.Sleep(2 * time.Second)
	if n := len(podEventsWithReason(t, admin, ns, "web", "ExecHelperUnavailable")); n != 1 {
		t.Fatalf("%d ExecHelperUnavailable Events, want 1", n)
	}
}

// podEventsWithReason are the notes of the pod's Events with reason.
func podEventsWithReason(t *testing.T, c kubernetes.Interface, ns, name, reason string) []string {
	t.Helper()
	var out []string
	for _, e := range podEvents(t, c, ns, name) {
		if e.Reason == reason {
			out = append(out, e.Note)
		}
	}
	return out
}

// --exec-mode is refused where it cannot work, naming the flag.
func TestExecModeFlagRefused(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := unreachableKubeconfig(t, dir)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--manifests", dir, "--exec-mode", "resident"}, "--exec-mode needs cluster mode"},
		{[]string{"run", "--kubeconfig", kubeconfig, "--node-name", "n", "--exec-mode", "resident"},
			"--exec-mode=resident needs --container-runtime-endpoint"},
		{[]string{"run", "--kubeconfig", kubeconfig, "--node-name", "n", "--exec-mode", "fast",
			"--container-runtime-endpoint", "unix://" + filepath.Join(dir, "none.sock")}, `--exec-mode "fast": want execsync or resident`},
	} {
		_, stderr, code := runProbed(t, nil, tc.args...)
		if code == 0 || !strings.Contains(stderr, tc.want) {
			t.Errorf("probed %s: exit %d, stderr %q; want %q", strings.Join(tc.args, " "), code, tail(stderr, 5), tc.want)
		}
	}
}
