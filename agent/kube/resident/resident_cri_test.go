package resident_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/probed/probed/agent/kube/cri"
	"github.com/probed/probed/agent/kube/resident"
	"github.com/probed/probed/internal/critest"
	"github.com/probed/probed/internal/testevents"
	probeexec "github.com/probed/probed/plugins/exec"
	"github.com/probed/probed/runtime"
)

// The resident helper in real containers of a real containerd (1.6, runc;
// test/cri/env.sh), each case run both ways — ExecSync (agent/kube/cri's
// Runner, the kubelet's way) and the helper — through the exec handler,
// comparing verdict, exit code, output and the kubelet's texts.

// criEnv is a connected client, a runner of helpers, and a sandbox to
// start containers in.
type criEnv struct {
	client *cri.Client
	rs     internalapi.RuntimeService // the test's own connection (the kubelet's side)
	runner *resident.Runner
	events *testevents.Log
	sb     *critest.Sandbox
}

// newCRIEnv connects with requestTimeout as the client's bound of a call
// beyond its own time (the kubelet's is 2 minutes: a shorter one lets
// ExecSync's cases that containerd 1.6 holds until then end in seconds).
func newCRIEnv(t *testing.T, requestTimeout time.Duration, opts resident.Options) *criEnv {
	t.Helper()
	e := &criEnv{rs: critest.Runtime(t), events: &testevents.Log{}}
	var err error
	e.client, err = cri.Connect(context.Background(), cri.Options{Endpoint: critest.Endpoint(t), RequestTimeout: requestTimeout,
		Registerer: prometheus.NewRegistry(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.client.Close() })
	opts.Runtime, opts.ExecSync, opts.Recorder, opts.Registerer = e.client, e.client.Runner(), e.events, prometheus.NewRegistry()
	opts.Pod = func(statusID string) (*v1.Pod, string, bool) { return &v1.Pod{}, "app", true }
	e.runner = newRunner(t, opts)
	e.sb = critest.RunPodSandbox(t, e.rs)
	return e
}

// start starts a container and returns its CRI ID and its status ID.
func (e *criEnv) start(t *testing.T, c critest.Container) (string, string) {
	t.Helper()
	if c.Name == "" {
		c.Name = "app"
	}
	if c.Command == nil {
		c.Command = []string{"sleep", "3600"}
	}
	id := e.sb.Start(t, c)
	status := e.client.RuntimeName() + "://" + id
	md := e.sb.Config.Metadata
	owners.Store(status, probeexec.PodContainer{Namespace: md.Namespace, Pod: md.Name, PodUID: types.UID(md.Uid), Container: c.Name})
	return id, status
}

// owners are the pod and container of each test container by its status
// ID (what its labels name), for the runs' context: the runner checks the
// container against them.
var owners sync.Map

// probe runs an exec probe of cmd through the exec handler and runner, one
// attempt with the probe's deadline (P3), as the agent does.
func probe(t *testing.T, r probeexec.Runner, statusID string, timeout time.Duration, cmd ...string) (runtime.Outcome, error) {
	t.Helper()
	spec := &runtime.Spec{
		Kind: runtime.KindExec, ProbeType: runtime.Readiness, Container: &v1.Container{Name: "app"},
		Pod:          &v1.Pod{},
		Probe:        &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: cmd}}, TimeoutSeconds: int32(timeout / time.Second)},
		Milliseconds: &runtime.Milliseconds{Timeout: int32(timeout % time.Second / time.Millisecond)},
	}
	if o, ok := owners.Load(statusID); ok {
		o := o.(probeexec.PodContainer)
		spec.Pod = &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: o.Pod, UID: o.PodUID}}
		spec.Container = &v1.Container{Name: o.Container}
	}
	p, err := probeexec.New(r).Prepare(spec)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := runtime.WithTimeout(context.Background(), nil, spec.Timeout())
	defer cancel()
	return p.Probe(ctx, runtime.Target{ContainerID: statusID, Attempt: 1})
}

// warm runs true until the container's runs go through its helper.
func (e *criEnv) warm(t *testing.T, statusID string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for e.runner.Mode(statusID) != resident.ModeResident {
		if out, err := probe(t, e.runner, statusID, 5*time.Second, "true"); err != nil || out.Result != runtime.Success {
			t.Fatalf("warm-up: %+v, %v", out, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no helper ready after 60 s: %s", e.runner.Mode(statusID))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// helperPIDs are the PIDs (in the container) of processes whose command
// line names the helper.
func (e *criEnv) helperPIDs(t *testing.T, id string) []string {
	t.Helper()
	var pids []string
	for _, l := range strings.Split(critest.Exec(t, e.rs, id, "ps", "-o", "pid,args"), "\n") {
		if f := strings.Fields(l); len(f) > 1 && strings.Contains(l, resident.Name) && !strings.Contains(l, resident.Name+"-kill") {
			pids = append(pids, f[0])
		}
	}
	return pids
}

// ps is the container's processes (pid and arguments) but the ps itself.
func (e *criEnv) ps(t *testing.T, id string) string {
	t.Helper()
	var keep []string
	for _, l := range strings.Split(critest.Exec(t, e.rs, id, "ps", "-o", "pid,args"), "\n") {
		if !strings.Contains(l, "ps -o pid,args") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// verdict is what the kubelet's exec prober makes of a run (E3): errored
// runs are compared by the part of their error both runners share.
type verdict struct {
	result runtime.Result
	code   int
	output string
	errs   string
}

func verdictOf(out runtime.Outcome, err error, errPart string) verdict {
	v := verdict{result: out.Result, code: out.ExitCode, output: out.Output}
	if err != nil {
		v.errs = "errored"
		if errPart != "" && strings.Contains(err.Error(), errPart) {
			v.errs = "errored: " + errPart
		}
	}
	return v
}

// Same verdicts as ExecSync: exit 0, 1 and 7 with output (stdout then
// stderr), a command not found or not executable (errored, runc's words),
// 1 MiB of output (the first 10 KiB), stdin at EOF, a command killed by a
// signal (128+signal), the container's environment, working directory,
// user, capabilities, seccomp mode, cgroup and namespaces (runc applied
// the container's security context to the helper as to an ExecSync), and
// a cd or a variable that the next run does not see.
func TestCRISameVerdictsAsExecSync(t *testing.T) {
	e := newCRIEnv(t, cri.DefaultRequestTimeout, resident.Options{})
	uid := int64(1000)
	_, status := e.start(t, critest.Container{RunAsUser: &uid, Env: []*runtimeapi.KeyValue{{Key: "GREETING", Value: []byte("it's\nme")}},
		Seccomp: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}})
	e.warm(t, status)
	execSync := e.client.Runner()
	for _, tc := range []struct {
		cmd     []string
		errPart string
	}{
		{cmd: []string{"true"}},
		{cmd: []string{"false"}},
		{cmd: []string{"sh", "-c", "echo out; echo err >&2; exit 7"}},
		{cmd: []string{"no-such-command"}, errPart: `exec: "no-such-command": executable file not found in $PATH`},
		{cmd: []string{"/tmp"}, errPart: `exec: "/tmp": permission denied`},
		{cmd: []string{"/bin/no-such-file"}, errPart: `exec: "/bin/no-such-file": stat /bin/no-such-file: no such file or directory`},
		{cmd: []string{"sh", "-c", "head -c 1048576 /dev/zero | tr '\\0' a; echo err >&2"}},
		{cmd: []string{"sh", "-c", "read x; echo read=$?; cat; echo cat=$?"}},
		{cmd: []string{"sh", "-c", "kill -9 $$"}},
		{cmd: []string{"sh", "-c", "cd /tmp; X=1; export Y=2; umask 077; pwd"}},
		{cmd: []string{"sh", "-c", "pwd; echo X=$X Y=$Y; umask"}},
		{cmd: []string{"sh", "-c", "env | sort"}},
		{cmd: []string{"sh", "-c", "printf '%s' \"$GREETING\""}},
		{cmd: []string{"id"}},
		{cmd: []string{"sh", "-c", "grep -E '^(Cap|Seccomp|NoNewPrivs|SigIgn|SigBlk)' /proc/self/status"}},
		{cmd: []string{"sh", "-c", "cat /proc/self/cgroup; readlink /proc/self/ns/mnt /proc/self/ns/pid /proc/self/ns/net /proc/self/ns/ipc /proc/self/ns/uts"}},
		{cmd: []string{"sh", "-c", "ls /proc/self/fd"}},
		{cmd: []string{"echo", "it's", "two\nlines", "$HOME", "*"}},
	} {
		want := verdictRun(t, execSync, status, tc.cmd)(tc.errPart)
		got := verdictRun(t, e.runner, status, tc.cmd)(tc.errPart)
		if got != want {
			t.Errorf("%q:\nresident %+v\nexecsync %+v", tc.cmd, got, want)
		}
	}
	if n := testutil.ToFloat64(e.runner.Runs().WithLabelValues(resident.ModeResident, "")); n < 18 {
		t.Fatalf("%v runs through the helper, want the 18", n)
	}
}

// verdictRun runs cmd with a 10 s timeout through r.
func verdictRun(t *testing.T, r probeexec.Runner, status string, cmd []string) func(string) verdict {
	out, err := probe(t, r, status, 10*time.Second, cmd...)
	return func(errPart string) verdict { return verdictOf(out, err, errPart) }
}

// The hard ones: a command that ignores SIGTERM past its timeout, and one
// whose setsid child keeps its output after it exited. ExecSync on
// containerd 1.6 kills the command's process only and then waits for its
// output to close, so it answers at the call's bound (here 3 s +
// the timeout; the kubelet's is 2 minutes + the timeout), and the child
// lives on; the verdict is the kubelet's timeout. The helper gives the
// same verdict at the timeout, and nothing the command started is left.
// A SIGTERM-ignoring command alone (exec'd) is killed at its timeout by
// both.
func TestCRITimeoutsAsExecSync(t *testing.T) {
	e := newCRIEnv(t, 3*time.Second, resident.Options{})
	id, status := e.start(t, critest.Container{})
	e.warm(t, status)
	execSync := e.client.Runner()
	for _, tc := range []struct {
		cmd    []string
		marker string // the process that must be gone after the helper's run
	}{
		{[]string{"sh", "-c", "trap '' TERM; exec sleep 101"}, "sleep 101"},
		{[]string{"sh", "-c", "trap '' TERM; sleep 102; echo done"}, "sleep 102"},
		{[]string{"sh", "-c", "setsid sleep 103 & echo parent"}, "sleep 103"},
	} {
		text := fmt.Sprintf(`command timed out: %q timed out after 1s`, strings.Join(tc.cmd, " "))
		want := verdict{result: runtime.Failure, code: -1, output: text}
		start := time.Now()
		out, err := probe(t, e.runner, status, time.Second, tc.cmd...)
		took := time.Since(start)
		if got := verdictOf(out, err, ""); got != want {
			t.Errorf("%q: resident %+v, want the kubelet's timeout", tc.cmd, got)
		}
		if took < time.Second || took > 3*time.Second {
			t.Errorf("%q: resident ended after %v, want the timeout (1 s)", tc.cmd, took)
		}
		if ps := e.ps(t, id); strings.Contains(ps, tc.marker) {
			t.Errorf("%q: still in the container after the helper's run:\n%s", tc.cmd, ps)
		}
		start = time.Now()
		out, err = probe(t, execSync, status, time.Second, tc.cmd...)
		t.Logf("%q: ExecSync answered after %v", tc.cmd, time.Since(start).Round(time.Millisecond))
		if got := verdictOf(out, err, ""); got != want {
			t.Errorf("%q: execsync %+v, want the kubelet's timeout", tc.cmd, got)
		}
		// ExecSync kills the command's process only: what it left is
		// killed here.
		critest.Exec(t, e.rs, id, "sh", "-c", "pkill -9 -f '"+tc.marker+"' || true")
	}
	if e.runner.Mode(status) != resident.ModeResident {
		t.Fatal("the helper did not survive the kills")
	}
}

// The helper in the container: one shell process and its two subshells
// while idle, none of them the container's PID 1, nothing written
// (it runs in a read-only root filesystem); its memory is logged for
// docs/cluster.md.
func TestCRIFootprint(t *testing.T) {
	e := newCRIEnv(t, cri.DefaultRequestTimeout, resident.Options{})
	id, status := e.start(t, critest.Container{ReadonlyRootfs: true})
	e.warm(t, status)
	pids := e.helperPIDs(t, id)
	if len(pids) != 3 || slices.Contains(pids, "1") {
		t.Fatalf("helper processes %v, want 3, none PID 1:\n%s", pids, e.ps(t, id))
	}
	var total int
	for _, pid := range pids {
		st := critest.Exec(t, e.rs, id, "cat", "/proc/"+pid+"/status")
		for _, l := range strings.Split(st, "\n") {
			if f := strings.Fields(l); len(f) == 3 && (f[0] == "VmRSS:" || f[0] == "RssAnon:") {
				t.Logf("helper process %s: %s %s kB", pid, f[0], f[1])
				if f[0] == "RssAnon:" {
					n, _ := strconv.Atoi(f[1])
					total += n
				}
			}
		}
	}
	t.Logf("helper anonymous memory, 3 processes: %d kB", total)
	if out, err := probe(t, e.runner, status, time.Second, "sh", "-c", "echo ok"); err != nil || out.Output != "ok\n" {
		t.Fatalf("in a read-only root filesystem: %+v, %v", out, err)
	}
}

// A container without sh (its PATH has none) cannot host a helper: its
// exec probes run through ExecSync, and that is said once (one Event, the
// mode, the metric's reason). (Without cat: TestHostWithoutCat; busybox's
// sh has its own cat.)
func TestCRIFallbackWithoutShell(t *testing.T) {
	e := newCRIEnv(t, cri.DefaultRequestTimeout, resident.Options{})
	_, status := e.start(t, critest.Container{Command: []string{"/bin/sleep", "3600"}, Env: []*runtimeapi.KeyValue{{Key: "PATH", Value: []byte("/nowhere")}}})
	want := resident.ModeExecSync + " (no sh in the container's PATH)"
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; e.runner.Mode(status) != want; i++ {
		out, err := probe(t, e.runner, status, 5*time.Second, "/bin/echo", "ok")
		if err != nil || out.Output != "ok\n" {
			t.Fatalf("run %d: %+v, %v", i, out, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("mode %q after 30 s, want %q", e.runner.Mode(status), want)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for range 3 {
		if out, err := probe(t, e.runner, status, 5*time.Second, "/bin/echo", "ok"); err != nil || out.Output != "ok\n" {
			t.Fatalf("through ExecSync: %+v, %v", out, err)
		}
	}
	if n := testutil.ToFloat64(e.runner.Runs().WithLabelValues(resident.ModeExecSync, resident.ReasonUnsupported)); n != 3 {
		t.Fatalf("runs{execsync,unsupported} = %v, want 3", n)
	}
	if n := testutil.ToFloat64(e.runner.Starts().WithLabelValues(resident.ReasonUnsupported)); n != 1 {
		t.Fatalf("starts{unsupported} = %v, want 1", n)
	}
	evs := e.events.Lines()
	if len(evs) != 1 || evs[0] != "Normal "+resident.ReasonHelperUnavailable+" Exec probes of container app run through the container runtime's ExecSync, not a resident helper: no sh in the container's PATH" {
		t.Fatalf("events %q, want one", evs)
	}
}

// The helper dies with its container; the restarted container (a new
// container ID, as the kubelet makes it) gets a new helper on its first
// exec run. A run on the stopped one is errored, as ExecSync's.
func TestCRIContainerRestartedUnderTheHelper(t *testing.T) {
	e := newCRIEnv(t, cri.DefaultRequestTimeout, resident.Options{BackoffBase: 100 * time.Millisecond})
	id, status := e.start(t, critest.Container{})
	e.warm(t, status)
	if err := e.rs.StopContainer(critest.Context(t), id, 0); err != nil {
		t.Fatal(err)
	}
	waitLost(t, e.runner, resident.LostEnded)
	if out, err := probe(t, e.runner, status, time.Second, "true"); err == nil || out.Result != runtime.Unknown {
		t.Fatalf("on the stopped container: %+v, %v: want an errored run", out, err)
	}
	_, status2 := e.start(t, critest.Container{Name: "app-restarted"})
	e.warm(t, status2)
	if out, err := probe(t, e.runner, status2, time.Second, "echo", "ok"); err != nil || out.Output != "ok\n" {
		t.Fatalf("%+v, %v", out, err)
	}
}

// A helper killed from outside (every process of it, SIGKILL) is replaced:
// the container's runs go on (through ExecSync while the next starts),
// none errored, and one helper is left.
func TestCRIHelperKilledFromOutside(t *testing.T) {
	e := newCRIEnv(t, cri.DefaultRequestTimeout, resident.Options{BackoffBase: 100 * time.Millisecond})
	id, status := e.start(t, critest.Container{})
	e.warm(t, status)
	pids := e.helperPIDs(t, id)
	critest.Exec(t, e.rs, id, append([]string{"kill", "-9"}, pids...)...)
	waitLost(t, e.runner, resident.LostEnded)
	for range 3 {
		if out, err := probe(t, e.runner, status, time.Second, "echo", "ok"); err != nil || out.Output != "ok\n" {
			t.Fatalf("after the kill: %+v, %v", out, err)
		}
	}
	e.warm(t, status)
	if pids := e.helperPIDs(t, id); len(pids) != 3 {
		t.Fatalf("helper processes %v, want one helper (3)", pids)
	}
}

// A helper that stops answering (SIGSTOPped) is killed through ExecSync
// and replaced; the run that found out is errored, never a Failure; no
// process of it is left in the container.
func TestCRIUnresponsiveHelper(t *testing.T) {
	e := newCRIEnv(t, cri.DefaultRequestTimeout, resident.Options{KillGrace: time.Second, BackoffBase: 100 * time.Millisecond})
	id, status := e.start(t, critest.Container{})
	e.warm(t, status)
	pids := e.helperPIDs(t, id)
	critest.Exec(t, e.rs, id, append([]string{"kill", "-STOP"}, pids...)...)
	out, err := probe(t, e.runner, status, time.Second, "sleep", "104")
	if err == nil || out.Result != runtime.Unknown || !strings.Contains(err.Error(), "stopped answering") {
		t.Fatalf("%+v, %v: want an errored run", out, err)
	}
	if n := testutil.ToFloat64(e.runner.Lost().WithLabelValues(resident.LostUnresponsive)); n != 1 {
		t.Fatalf("lost{unresponsive} = %v", n)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(e.helperPIDs(t, id)) > 0 || strings.Contains(e.ps(t, id), "sleep 104") {
		if time.Now().After(deadline) {
			t.Fatalf("the stopped helper (%v) or its command is still there:\n%s", pids, e.ps(t, id))
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.warm(t, status)
}
