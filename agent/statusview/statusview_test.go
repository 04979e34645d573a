package statusview_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"go.uber.org/goleak"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/probed/probed/agent/history"
	"github.com/probed/probed/agent/output"
	"github.com/probed/probed/agent/statusview"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreCurrent()) }

var now = time.Date(2026, 11, 29, 12, 5, 0, 0, time.UTC)

func ptr[T any](v T) *T { return &v }

// agentStub serves /pods and /pods/{ns}/{name}/probes like the agent.
type agentStub struct {
	srv   *httptest.Server
	mu    sync.Mutex
	gets  []string
	pods  []v1.Pod
	hists map[string][]history.Probe // ns/name → probes; absent: 404
	// manifests is the body of GET /manifests; "": 404, as an agent
	// without the endpoint answers.
	manifests string
	// guards is the body of GET /guards; "": 404 (manifest mode).
	guards string
}

func newAgentStub(t *testing.T, pods []v1.Pod, hists map[string][]history.Probe) *agentStub {
	t.Helper()
	a := &agentStub{pods: pods, hists: hists}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /pods", func(w http.ResponseWriter, r *http.Request) {
		a.log(r)
		_ = json.NewEncoder(w).Encode(v1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}, Items: a.pods})
	})
	mux.HandleFunc("GET /pods/{namespace}/{name}/probes", func(w http.ResponseWriter, r *http.Request) {
		a.log(r)
		key := r.PathValue("namespace") + "/" + r.PathValue("name")
		probes, ok := a.hists[key]
		if !ok {
			http.Error(w, "pod not found", http.StatusNotFound)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"namespace": r.PathValue("namespace"), "name": r.PathValue("name"), "probes": probes})
	})
	mux.HandleFunc("GET /manifests", func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		body := a.manifests
		a.mu.Unlock()
		if body == "" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(body))
	})
	mux.HandleFunc("GET /guards", func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		body := a.guards
		a.mu.Unlock()
		if body == "" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(body))
	})
	a.srv = httptest.NewServer(mux)
	t.Cleanup(a.srv.Close)
	return a
}

func (a *agentStub) setManifests(body string) {
	a.mu.Lock()
	a.manifests = body
	a.mu.Unlock()
}

func (a *agentStub) log(r *http.Request) {
	a.mu.Lock()
	a.gets = append(a.gets, r.URL.Path)
	a.mu.Unlock()
}

// print runs Print against the stub and parses the table into rows of
// cells by the header's column offsets.
func print(t *testing.T, server string) (header []string, rows []map[string]string, out string) {
	t.Helper()
	var buf bytes.Buffer
	if err := statusview.Print(context.Background(), statusview.Options{Server: server, Now: func() time.Time { return now }}, &buf); err != nil {
		t.Fatalf("Print: %v", err)
	}
	out = buf.String()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	header = strings.Fields(strings.Replace(lines[0], "LAST FAILURE", "LAST_FAILURE", 1))
	var offs []int
	from := 0
	for _, col := range header {
		i := strings.Index(lines[0][from:], strings.Replace(col, "_", " ", 1))
		if i < 0 {
			t.Fatalf("header %q: no column %s", lines[0], col)
		}
		offs = append(offs, from+i)
		from += i + len(col)
	}
	for _, l := range lines[1:] {
		row := map[string]string{}
		for i, col := range header {
			if offs[i] >= len(l) {
				row[col] = ""
				continue
			}
			end := len(l)
			if i+1 < len(offs) && offs[i+1] < end {
				end = offs[i+1]
			}
			if i == len(header)-1 {
				end = len(l)
			}
			row[col] = strings.TrimSpace(l[offs[i]:end])
		}
		rows = append(rows, row)
	}
	return header, rows, out
}

func status(name string, ready, started bool, restarts int32) v1.ContainerStatus {
	cs := v1.ContainerStatus{Name: name, Ready: ready, RestartCount: restarts}
	if started {
		cs.Started = ptr(true)
	} else {
		cs.Started = ptr(false)
	}
	return cs
}

func readyCondition(s v1.ConditionStatus) []v1.PodCondition {
	return []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionTrue}, {Type: v1.PodReady, Status: s}}
}

// TestPrintTable: one row per pod, in the API's order: READY and STARTED
// count containers and sidecars (restartable init containers, not plain
// init containers), RESTARTS sums them, STATUS is the phase — Running for
// a running pod that is not Ready, as kubectl shows it (READY says 2/3) —,
// AGE comes from the start time, and
// LAST FAILURE is the newest failed or errored run over the pod's probes.
func TestPrintTable(t *testing.T) {
	start := metav1.NewTime(now.Add(-90 * time.Second))
	pods := []v1.Pod{
		{
			ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "crashy"},
			Status: v1.PodStatus{Phase: v1.PodRunning, StartTime: &start, Conditions: readyCondition(v1.ConditionTrue),
				ContainerStatuses: []v1.ContainerStatus{status("app", true, true, 2)}},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "web"},
			Spec: v1.PodSpec{InitContainers: []v1.Container{
				{Name: "setup"},
				{Name: "proxy", RestartPolicy: ptr(v1.ContainerRestartPolicyAlways)},
			}},
			Status: v1.PodStatus{Phase: v1.PodRunning, StartTime: &start, Conditions: readyCondition(v1.ConditionFalse),
				InitContainerStatuses: []v1.ContainerStatus{status("setup", false, false, 7), status("proxy", true, true, 1)},
				ContainerStatuses:     []v1.ContainerStatus{status("app", false, true, 3), status("cache", true, false, 0)}},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "pending"},
			Status:     v1.PodStatus{Phase: v1.PodPending, ContainerStatuses: []v1.ContainerStatus{{Name: "c"}}},
		},
	}
	older := history.Record{Time: time.Date(2026, 11, 29, 12, 2, 0, 0, time.UTC), Result: "failure", Message: "HTTP probe failed with statuscode: 503"}
	newer := history.Record{Time: time.Date(2026, 11, 29, 12, 3, 44, 0, time.UTC), Result: "failure", Message: "HTTP probe failed with statuscode: 404"}
	errored := history.Record{Time: now.Add(-10 * time.Second), Result: "errored"}
	hists := map[string][]history.Probe{
		"demo/crashy": {
			{Container: "app", Type: "readiness", Handler: "http", LastFailure: &older},
			{Container: "app", Type: "liveness", Handler: "http", LastFailure: &newer},
			{Container: "app", Type: "startup", Handler: "http"},
		},
		"demo/web": {{Container: "cache", Type: "liveness", Handler: "redis", LastFailure: &errored}},
		// other/pending: 404, no history.
	}
	stub := newAgentStub(t, pods, hists)
	header, rows, out := print(t, stub.srv.URL+"/") // a trailing slash is fine
	if want := []string{"NAMESPACE", "NAME", "READY", "STARTED", "RESTARTS", "STATUS", "AGE", "LAST_FAILURE"}; !reflect.DeepEqual(header, want) {
		t.Fatalf("header %v, want %v", header, want)
	}
	want := []map[string]string{
		{"NAMESPACE": "demo", "NAME": "crashy", "READY": "1/1", "STARTED": "1/1", "RESTARTS": "2", "STATUS": "Running", "AGE": "1m30s",
			"LAST_FAILURE": "app liveness: HTTP probe failed with statuscode: 404 (2026-11-29T12:03:44Z)"},
		{"NAMESPACE": "demo", "NAME": "web", "READY": "2/3", "STARTED": "2/3", "RESTARTS": "4", "STATUS": "Running", "AGE": "1m30s",
			"LAST_FAILURE": "cache liveness: errored (2026-11-29T12:04:50Z)"},
		{"NAMESPACE": "other", "NAME": "pending", "READY": "0/1", "STARTED": "0/1", "RESTARTS": "0", "STATUS": "Pending", "AGE": "-", "LAST_FAILURE": ""},
	}
	if !reflect.DeepEqual(rows, want) {
		t.Errorf("table:\n%s\nrows %v\nwant %v", out, rows, want)
	}
	stub.mu.Lock()
	defer stub.mu.Unlock()
	if wantGets := []string{"/pods", "/pods/demo/crashy/probes", "/pods/demo/web/probes", "/pods/other/pending/probes"}; !reflect.DeepEqual(stub.gets, wantGets) {
		t.Errorf("requests %v, want %v", stub.gets, wantGets)
	}
}

// TestPrintLastFailureMessage: a long message is cut at 80 characters
// (whole characters) with an ellipsis; line breaks become spaces.
func TestPrintLastFailureMessage(t *testing.T) {
	// 80 characters, then more; the 80th byte is inside an "é".
	long := "a" + strings.Repeat("é", 79) + "xyz and more"
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	pods := []v1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "n", Name: "a"}, Status: v1.PodStatus{Phase: v1.PodRunning}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "n", Name: "b"}, Status: v1.PodStatus{Phase: v1.PodRunning}},
	}
	hists := map[string][]history.Probe{
		"n/a": {{Container: "c", Type: "readiness", LastFailure: &history.Record{Time: at, Result: "failure", Message: long}}},
		"n/b": {{Container: "c", Type: "exec", LastFailure: &history.Record{Time: at, Result: "failure", Message: "line one\nline two"}}},
	}
	_, rows, out := print(t, newAgentStub(t, pods, hists).srv.URL)
	if want := "c readiness: a" + strings.Repeat("é", 79) + "… (2026-11-29T12:00:00Z)"; rows[0]["LAST_FAILURE"] != want {
		t.Errorf("long message: %q, want %q", rows[0]["LAST_FAILURE"], want)
	}
	if want := "c exec: line one line two (2026-11-29T12:00:00Z)"; rows[1]["LAST_FAILURE"] != want {
		t.Errorf("multi-line message: %q, want %q", rows[1]["LAST_FAILURE"], want)
	}
	if !utf8.ValidString(out) {
		t.Errorf("output is not valid UTF-8:\n%q", out)
	}
}

// TestPrintNoPods prints the header alone.
func TestPrintNoPods(t *testing.T) {
	_, rows, out := print(t, newAgentStub(t, nil, nil).srv.URL)
	if len(rows) != 0 || !strings.HasPrefix(out, "NAMESPACE") {
		t.Errorf("no pods: %q", out)
	}
}

// TestPrintErrors: an agent that cannot be reached or answers /pods with
// an error is an error that says so.
func TestPrintErrors(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	base := srv.URL
	var buf bytes.Buffer
	err := statusview.Print(context.Background(), statusview.Options{Server: base}, &buf)
	if err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("/pods 404: err %v, want the status", err)
	}
	srv.Close()
	err = statusview.Print(context.Background(), statusview.Options{Server: base}, &buf)
	if err == nil || !strings.Contains(err.Error(), "cannot reach the agent") {
		t.Errorf("closed server: err %v, want \"cannot reach the agent\"", err)
	}
	if buf.Len() != 0 {
		t.Errorf("printed %q on errors", buf.String())
	}
}

// Probe output (and any name the agent returns) can carry
// terminal control characters; `probed status` prints none raw. Each is
// escaped as strconv.Quote would, without the quotes: ESC sequences (a
// screen clear, an OSC window title ended by BEL), CR (which would let a
// message overwrite the row), TAB, DEL, C1 controls (U+009B is CSI) and a
// bidi override; invalid UTF-8 shows as U+FFFD.
func TestPrintEscapesControlCharacters(t *testing.T) {
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	msg := "ok\x1b[2J\x1b]0;pwned\a\rfake\tcol\x7f\u009b31m\u202eevil\xff"
	pods := []v1.Pod{{ObjectMeta: metav1.ObjectMeta{Namespace: "n", Name: "a\x1b[31m"}, Status: v1.PodStatus{Phase: v1.PodRunning}}}
	hists := map[string][]history.Probe{
		"n/a\x1b[31m": {{Container: "c\a", Type: "liveness", LastFailure: &history.Record{Time: at, Result: "failure", Message: msg}}},
	}
	_, rows, out := print(t, newAgentStub(t, pods, hists).srv.URL)
	for i, r := range out {
		if r != '\n' && !strconv.IsPrint(r) {
			t.Errorf("raw control character %U at %d in:\n%q", r, i, out)
		}
	}
	if !utf8.ValidString(out) {
		t.Errorf("output is not valid UTF-8: %q", out)
	}
	if len(rows) != 1 {
		t.Fatalf("rows %v", rows)
	}
	if want := `a\x1b[31m`; rows[0]["NAME"] != want {
		t.Errorf("NAME %q, want %q", rows[0]["NAME"], want)
	}
	want := `c\a liveness: ok\x1b[2J\x1b]0;pwned\a\rfake\tcol\x7f\u009b31m\u202eevil` + "\uFFFD" + ` (2026-11-29T12:00:00Z)`
	if rows[0]["LAST_FAILURE"] != want {
		t.Errorf("LAST FAILURE\n %q\nwant %q", rows[0]["LAST_FAILURE"], want)
	}
}

// TestPrintStatusCrashLoopBackOff: STATUS shows the reason of a waiting or
// terminated container as kubectl's STATUS column does: CrashLoopBackOff
// while a restart backs off (the first such container of the pod wins),
// the terminated reason (Error) of a container left terminated, ExitCode:N
// without a reason.
func TestPrintStatusCrashLoopBackOff(t *testing.T) {
	waiting := status("app", false, false, 3)
	waiting.State.Waiting = &v1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 20s restarting failed container=app pod=crashy_demo(u1)"}
	running := status("side", true, true, 0)
	running.State.Running = &v1.ContainerStateRunning{}
	killed := status("app", false, false, 0)
	killed.State.Terminated = &v1.ContainerStateTerminated{ExitCode: 137, Reason: "Error"}
	exited := status("app", false, false, 0)
	exited.State.Terminated = &v1.ContainerStateTerminated{ExitCode: 3}
	pods := []v1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "crashy"}, Status: v1.PodStatus{Phase: v1.PodRunning,
			Conditions: readyCondition(v1.ConditionFalse), ContainerStatuses: []v1.ContainerStatus{running, waiting}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "never"}, Status: v1.PodStatus{Phase: v1.PodRunning,
			Conditions: readyCondition(v1.ConditionFalse), ContainerStatuses: []v1.ContainerStatus{killed}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "exited"}, Status: v1.PodStatus{Phase: v1.PodFailed,
			ContainerStatuses: []v1.ContainerStatus{exited}}},
	}
	_, rows, out := print(t, newAgentStub(t, pods, nil).srv.URL)
	var got []string
	for _, r := range rows {
		got = append(got, r["STATUS"])
	}
	if want := []string{"CrashLoopBackOff", "Error", "ExitCode:3"}; !reflect.DeepEqual(got, want) {
		t.Errorf("STATUS %v, want %v\n%s", got, want, out)
	}
}

// TestCountContainersAsKubectl: READY's total is what the spec declares,
// sidecars (restartable init containers) included and plain init containers
// not, whether or not the containers have statuses yet (kubectl's printPod).
func TestCountContainersAsKubectl(t *testing.T) {
	always := v1.ContainerRestartPolicyAlways
	yes := true
	pod := &v1.Pod{Spec: v1.PodSpec{
		InitContainers: []v1.Container{{Name: "setup"}, {Name: "proxy", RestartPolicy: &always}},
		Containers:     []v1.Container{{Name: "app"}, {Name: "worker"}},
	}}
	if got := statusview.CountContainers(pod); got != (statusview.ContainerCounts{Containers: 3}) {
		t.Errorf("pending pod without statuses: %+v, want 0 of 3", got)
	}
	pod.Status.InitContainerStatuses = []v1.ContainerStatus{{Name: "setup", RestartCount: 7}, {Name: "proxy", Ready: true, Started: &yes, RestartCount: 1}}
	pod.Status.ContainerStatuses = []v1.ContainerStatus{{Name: "app", Ready: true, Started: &yes, RestartCount: 2}}
	want := statusview.ContainerCounts{Containers: 3, Ready: 2, Started: 2, Restarts: 3}
	if got := statusview.CountContainers(pod); got != want {
		t.Errorf("running pod: %+v, want %+v (the plain init container's restarts do not count)", got, want)
	}
}

// TestStatusOfAsKubectl: STATUS follows kubectl's printPod beyond the
// waiting and terminated reasons: a running pod that is not ready is
// Running (not NotReady); a pod whose completed container sits beside a
// running ready one is Running, or NotReady when the pod is not Ready; a
// pod being deleted is Terminating unless its phase is terminal; the pod's
// own reason (Evicted) replaces the phase.
func TestStatusOfAsKubectl(t *testing.T) {
	running := status("app", false, true, 0)
	running.State.Running = &v1.ContainerStateRunning{}
	readyRunning := status("side", true, true, 0)
	readyRunning.State.Running = &v1.ContainerStateRunning{}
	completed := status("job", false, false, 0)
	completed.State.Terminated = &v1.ContainerStateTerminated{Reason: "Completed"}
	deleting := metav1.NewTime(now)
	for _, c := range []struct {
		name string
		pod  v1.Pod
		want string
	}{
		{"running, not ready", v1.Pod{Status: v1.PodStatus{Phase: v1.PodRunning, Conditions: readyCondition(v1.ConditionFalse),
			ContainerStatuses: []v1.ContainerStatus{running}}}, "Running"},
		{"completed beside a ready running container, pod ready", v1.Pod{Status: v1.PodStatus{Phase: v1.PodRunning,
			Conditions: readyCondition(v1.ConditionTrue), ContainerStatuses: []v1.ContainerStatus{completed, readyRunning}}}, "Running"},
		{"completed beside a ready running container, pod not ready", v1.Pod{Status: v1.PodStatus{Phase: v1.PodRunning,
			Conditions: readyCondition(v1.ConditionFalse), ContainerStatuses: []v1.ContainerStatus{completed, readyRunning}}}, "NotReady"},
		{"completed alone", v1.Pod{Status: v1.PodStatus{Phase: v1.PodSucceeded, ContainerStatuses: []v1.ContainerStatus{completed}}}, "Completed"},
		{"deleted while running", v1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &deleting},
			Status: v1.PodStatus{Phase: v1.PodRunning, ContainerStatuses: []v1.ContainerStatus{running}}}, "Terminating"},
		{"deleted after it succeeded", v1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &deleting},
			Status: v1.PodStatus{Phase: v1.PodSucceeded, ContainerStatuses: []v1.ContainerStatus{completed}}}, "Completed"},
		{"evicted", v1.Pod{Status: v1.PodStatus{Phase: v1.PodFailed, Reason: "Evicted"}}, "Evicted"},
	} {
		if got := statusview.StatusOf(&c.pod); got != c.want {
			t.Errorf("%s: STATUS %q, want %q", c.name, got, c.want)
		}
	}
}

// TestContainerStates: each container's state as kubectl describe shows
// it, sidecars first: running; waiting in CrashLoopBackOff with the time
// left until the kubelet starts it again — the previous instance's exit
// plus the back-off its waiting message gives, rounded up to whole
// seconds, "restart due" once passed —; another waiting reason; terminated
// with reason and exit code, or signal; unknown without a status.
func TestContainerStates(t *testing.T) {
	sidecar := status("proxy", true, true, 0)
	sidecar.State.Running = &v1.ContainerStateRunning{}
	crashing := status("app", false, false, 3)
	crashing.State.Waiting = &v1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 20s restarting failed container=app pod=crashy_demo(u1)"}
	crashing.LastTerminationState.Terminated = &v1.ContainerStateTerminated{ExitCode: 137, Reason: "Error", FinishedAt: metav1.NewTime(now.Add(-7500 * time.Millisecond))}
	creating := status("init-db", false, false, 0)
	creating.State.Waiting = &v1.ContainerStateWaiting{Reason: "ContainerCreating"}
	killed := status("job", false, false, 0)
	killed.State.Terminated = &v1.ContainerStateTerminated{ExitCode: 137, Reason: "Error"}
	signalled := status("sig", false, false, 0)
	signalled.State.Terminated = &v1.ContainerStateTerminated{Signal: 9}
	pod := &v1.Pod{
		Spec: v1.PodSpec{
			InitContainers: []v1.Container{{Name: "setup"}, {Name: "proxy", RestartPolicy: ptr(v1.ContainerRestartPolicyAlways)}},
			Containers:     []v1.Container{{Name: "app"}, {Name: "init-db"}, {Name: "job"}, {Name: "sig"}, {Name: "later"}},
		},
		Status: v1.PodStatus{InitContainerStatuses: []v1.ContainerStatus{sidecar},
			ContainerStatuses: []v1.ContainerStatus{crashing, creating, killed, signalled}},
	}
	states := statusview.ContainerStates(pod)
	var got []string
	for _, s := range states {
		got = append(got, s.Name+"="+s.Summary(now))
	}
	want := []string{
		"proxy=running",
		"app=waiting: CrashLoopBackOff, restart in 13s (back-off 20s)",
		"init-db=waiting: ContainerCreating",
		"job=terminated: Error, exit code 137",
		"sig=terminated: signal 9",
		"later=unknown",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("states\n %q\nwant %q", got, want)
	}
	if !states[0].Sidecar || states[1].Sidecar || states[1].Restarts != 3 || states[1].BackOff != 20*time.Second {
		t.Errorf("states %+v", states)
	}
	if got := states[1].Summary(now.Add(13 * time.Second)); got != "waiting: CrashLoopBackOff, restart due (back-off 20s)" {
		t.Errorf("after the back-off: %q", got)
	}
	// A waiting message in another form: the reason alone.
	crashing.State.Waiting.Message = "something else"
	pod.Status.ContainerStatuses[0] = crashing
	if got := statusview.ContainerStates(pod)[1].Summary(now); got != "waiting: CrashLoopBackOff" {
		t.Errorf("unparsed back-off: %q", got)
	}
}

// Cluster mode's GET /guards: the held pods follow the pods' table in a
// section of their own, the -n filter keeps those of the namespace, and an
// agent without the endpoint prints no section.
func TestPrintHeldByTheGuards(t *testing.T) {
	a := newAgentStub(t, nil, nil)
	_, _, out := print(t, a.srv.URL)
	if strings.Contains(out, "HELD BY THE GUARDS") {
		t.Fatalf("section without GET /guards:\n%s", out)
	}
	a.mu.Lock()
	a.guards = `{"held":[{"guard":"panic-threshold","namespace":"shop","pod":"web-5","why":"Service shop/web has 4 of 10 endpoints ready without it, probed.io/panic-threshold=50% keeps 5"},
		{"guard":"restart-budget","namespace":"team","pod":"api-1","container":"app","why":"held back by the restart budget: 1 of ReplicaSet team/api's 4 pods on this node acted on in the last 5m0s, probed.io/restart-budget=1 allows 1"}]}`
	a.mu.Unlock()
	_, _, out = print(t, a.srv.URL)
	for _, want := range []string{"HELD BY THE GUARDS (2)", "NAMESPACE  NAME   CONTAINER  GUARD            WHY",
		"shop       web-5  -          panic-threshold  Service shop/web has 4 of 10", "team       api-1  app        restart-budget   held back by the restart budget"} {
		if !strings.Contains(out, want) {
			t.Errorf("output misses %q:\n%s", want, out)
		}
	}
	var doc strings.Builder
	if err := statusview.Print(context.Background(), statusview.Options{Server: a.srv.URL, Namespace: "team", Output: output.JSON}, &doc); err != nil {
		t.Fatal(err)
	}
	var st statusview.Status
	if err := json.Unmarshal([]byte(doc.String()), &st); err != nil {
		t.Fatal(err)
	}
	if st.Guards == nil || len(st.Guards.Held) != 1 || st.Guards.Held[0].Pod != "api-1" || st.Guards.Held[0].Container != "app" {
		t.Errorf("-n team: guards %+v", st.Guards)
	}
}
