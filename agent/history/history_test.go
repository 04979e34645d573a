package history_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"k8s.io/apimachinery/pkg/types"

	"github.com/probed/probed/agent/history"
	"github.com/probed/probed/manager"
	"github.com/probed/probed/manager/results"
	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/bound"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreCurrent()) }

var _ manager.Observer = (*history.History)(nil)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// run is the n-th run (second n) of pod uid's app liveness probe.
func run(uid types.UID, n int, result runtime.Result, msg string) manager.RunRecord {
	return manager.RunRecord{
		PodUID: uid, Namespace: "ns", PodName: "p", ContainerName: "app", ContainerID: "containerd://c1",
		ProbeType: runtime.Liveness, Kind: "http",
		Start: t0.Add(time.Duration(n) * time.Second), Duration: 1500 * time.Microsecond,
		Result: result, Attempts: 1, Message: msg, Cached: results.Success,
	}
}

func times(recs []history.Record) []int {
	var out []int
	for _, r := range recs {
		out = append(out, int(r.Time.Sub(t0)/time.Second))
	}
	return out
}

// TestRingOrderAndBound: a probe keeps its last Size records, oldest
// first, however many ran.
func TestRingOrderAndBound(t *testing.T) {
	for _, n := range []int{0, 1, 2, 3, 4, 7, 30} {
		h := history.New(3)
		for i := 1; i <= n; i++ {
			h.ProbeRan(run("u", i, runtime.Success, ""))
		}
		got := h.Pod("u")
		if n == 0 {
			if got == nil || len(got) != 0 {
				t.Errorf("no runs: Pod = %#v, want an empty, non-nil list (JSON [])", got)
			}
			continue
		}
		var want []int
		for i := max(1, n-2); i <= n; i++ {
			want = append(want, i)
		}
		if len(got) != 1 || !reflect.DeepEqual(times(got[0].Results), want) {
			t.Errorf("%d runs into a ring of 3: %v, want runs %v oldest first", n, got, want)
		}
	}
}

// TestDefaultSize: a size of 0 or less keeps 10.
func TestDefaultSize(t *testing.T) {
	for _, size := range []int{0, -1} {
		h := history.New(size)
		for i := 1; i <= 25; i++ {
			h.ProbeRan(run("u", i, runtime.Success, ""))
		}
		if got := times(h.Pod("u")[0].Results); len(got) != 10 || got[0] != 16 || got[9] != 25 {
			t.Errorf("New(%d) after 25 runs keeps %v, want runs 16..25", size, got)
		}
	}
}

// TestRecordFields: a record carries the run's time, duration in ms,
// verdict, message, attempts, container ID and cached result; an errored
// run is "errored" with the error's message.
func TestRecordFields(t *testing.T) {
	h := history.New(10)
	h.ProbeRan(run("u", 1, runtime.Success, ""))
	h.ProbeRan(run("u", 2, runtime.Warning, "Probe terminated redirects"))
	f := run("u", 3, runtime.Failure, "HTTP probe failed with statuscode: 500")
	f.Cached, f.Attempts = results.Failure, 1
	h.ProbeRan(f)
	h.ProbeRan(run("u", 4, runtime.Unknown, "unknown on purpose"))
	e := run("u", 5, runtime.Unknown, "Get \"http://10.0.0.1:8080/\": context deadline exceeded")
	e.Err, e.Attempts, e.Cached = errors.New("context deadline exceeded"), 3, results.Unknown
	h.ProbeRan(e)
	got := h.Pod("u")[0].Results
	want := []history.Record{
		{Time: t0.Add(1 * time.Second), DurationMS: 1.5, Result: "success", Attempts: 1, ContainerID: "containerd://c1", Cached: "Success"},
		{Time: t0.Add(2 * time.Second), DurationMS: 1.5, Result: "warning", Message: "Probe terminated redirects", Attempts: 1, ContainerID: "containerd://c1", Cached: "Success"},
		{Time: t0.Add(3 * time.Second), DurationMS: 1.5, Result: "failure", Message: "HTTP probe failed with statuscode: 500", Attempts: 1, ContainerID: "containerd://c1", Cached: "Failure"},
		{Time: t0.Add(4 * time.Second), DurationMS: 1.5, Result: "unknown", Message: "unknown on purpose", Attempts: 1, ContainerID: "containerd://c1", Cached: "Success"},
		{Time: t0.Add(5 * time.Second), DurationMS: 1.5, Result: "errored", Message: "Get \"http://10.0.0.1:8080/\": context deadline exceeded", Attempts: 3, ContainerID: "containerd://c1", Cached: "UNKNOWN"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("records:\n got %+v\nwant %+v", got, want)
	}
}

// TestLastFailure: the newest failure, unknown or errored run is kept
// even after it has left the ring; successes and warnings do not replace
// it.
func TestLastFailure(t *testing.T) {
	h := history.New(2)
	h.ProbeRan(run("u", 1, runtime.Success, ""))
	if lf := h.Pod("u")[0].LastFailure; lf != nil {
		t.Fatalf("LastFailure %+v after a success, want none", lf)
	}
	h.ProbeRan(run("u", 2, runtime.Failure, "HTTP probe failed with statuscode: 503"))
	for i := 3; i <= 6; i++ {
		h.ProbeRan(run("u", i, runtime.Success, ""))
	}
	h.ProbeRan(run("u", 7, runtime.Warning, "Probe terminated redirects"))
	p := h.Pod("u")[0]
	if got := times(p.Results); !reflect.DeepEqual(got, []int{6, 7}) {
		t.Fatalf("ring %v, want [6 7]", got)
	}
	if p.LastFailure == nil || p.LastFailure.Message != "HTTP probe failed with statuscode: 503" || !p.LastFailure.Time.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("LastFailure %+v, want run 2's failure although it left the ring", p.LastFailure)
	}
	for i, c := range []struct {
		result runtime.Result
		err    error
		want   string
	}{
		{runtime.Unknown, nil, "unknown"},
		{runtime.Success, errors.New("connection refused"), "errored"},
		{runtime.Failure, nil, "failure"},
	} {
		r := run("u", 10+i, c.result, "m")
		r.Err = c.err
		h.ProbeRan(r)
		if lf := h.Pod("u")[0].LastFailure; lf == nil || lf.Result != c.want || !lf.Time.Equal(r.Start) {
			t.Errorf("after a %s run LastFailure = %+v, want it", c.want, lf)
		}
	}
	// The returned history is a copy: changing it changes nothing inside.
	p = h.Pod("u")[0]
	p.Results[0].Message = "changed"
	if h.Pod("u")[0].Results[0].Message == "changed" {
		t.Error("Pod returned the ring's own records")
	}
}

// TestProbesAndPods: probes are kept per pod, container and type, with
// their handler kind, sorted by container then type; Forget drops one pod
// and nothing else.
func TestProbesAndPods(t *testing.T) {
	h := history.New(5)
	add := func(uid types.UID, container string, pt runtime.ProbeType, kind string) {
		r := run(uid, 1, runtime.Success, "")
		r.ContainerName, r.ProbeType, r.Kind = container, pt, kind
		h.ProbeRan(r)
	}
	add("a", "web", runtime.Readiness, "http")
	add("a", "web", runtime.Liveness, "tcp")
	add("a", "cache", runtime.Liveness, "redis")
	add("a", "web", runtime.Startup, "exec")
	add("b", "web", runtime.Readiness, "grpc")
	var got []string
	for _, p := range h.Pod("a") {
		got = append(got, fmt.Sprintf("%s/%s/%s/%d", p.Container, p.Type, p.Handler, len(p.Results)))
	}
	want := []string{"cache/liveness/redis/1", "web/liveness/tcp/1", "web/readiness/http/1", "web/startup/exec/1"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("pod a: %v, want %v", got, want)
	}
	h.Forget("a")
	if p := h.Pod("a"); len(p) != 0 {
		t.Errorf("after Forget(a): %v, want nothing", p)
	}
	if p := h.Pod("b"); len(p) != 1 || p[0].Handler != "grpc" {
		t.Errorf("pod b after Forget(a): %v, want its readiness probe", p)
	}
	h.Forget("never-seen")
}

// TestJSONHasNoBody: the JSON of a probe's history has exactly the
// documented fields: a record holds a message, never an output or body.
func TestJSONHasNoBody(t *testing.T) {
	h := history.New(3)
	h.ProbeRan(run("u", 1, runtime.Failure, "HTTP probe failed with statuscode: 500"))
	b, err := json.Marshal(h.Pod("u"))
	if err != nil {
		t.Fatal(err)
	}
	var probes []map[string]json.RawMessage
	if err := json.Unmarshal(b, &probes); err != nil {
		t.Fatal(err)
	}
	keys := func(m map[string]json.RawMessage) []string {
		var out []string
		for k := range m {
			out = append(out, k)
		}
		sort.Strings(out)
		return out
	}
	if got := keys(probes[0]); !reflect.DeepEqual(got, []string{"container", "handler", "lastFailure", "periodMs", "results", "timeoutMs", "type"}) {
		t.Errorf("probe fields %v", got)
	}
	var recs []map[string]json.RawMessage
	if err := json.Unmarshal(probes[0]["results"], &recs); err != nil {
		t.Fatal(err)
	}
	if got := keys(recs[0]); !reflect.DeepEqual(got, []string{"attempts", "cachedResult", "containerID", "durationMs", "message", "result", "time"}) {
		t.Errorf("record fields %v, want time, durationMs, result, message, attempts, containerID, cachedResult", got)
	}
}

// TestConcurrent: runs of many probes recorded concurrently with reads and
// Forget (for -race).
func TestConcurrent(t *testing.T) {
	h := history.New(4)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			uid := types.UID(fmt.Sprint("pod-", g%3))
			for i := range 200 {
				h.ProbeRan(run(uid, i, runtime.Result(i%4), "m"))
				if i%50 == 0 {
					_ = h.Pod(uid)
				}
				if i%97 == 0 {
					h.Forget(uid)
				}
			}
		})
	}
	wg.Wait()
	for _, uid := range []types.UID{"pod-0", "pod-1", "pod-2"} {
		for _, p := range h.Pod(uid) {
			if len(p.Results) > 4 {
				t.Errorf("%s: %d records in a ring of 4", uid, len(p.Results))
			}
		}
	}
}

// A record's message is redacted by the one rule
// (runtime/redact), whatever manager sent it.
func TestRecordMessageRedacted(t *testing.T) {
	h := history.New(4)
	h.ProbeRan(run("uid-1", 1, runtime.Failure, `Get "http://h:80/x?token=HIST-TOKEN-1&a=HIST-2": EOF; Authorization: Bearer HIST-3`))
	p := h.Pod("uid-1")
	if len(p) != 1 || len(p[0].Results) != 1 || p[0].LastFailure == nil {
		t.Fatalf("history %+v", p)
	}
	want := `Get "http://h:80/x?token=REDACTED&a=REDACTED": EOF; Authorization: REDACTED`
	if got := p[0].Results[0].Message; got != want {
		t.Errorf("message %q, want %q", got, want)
	}
	if got := p[0].LastFailure.Message; got != want {
		t.Errorf("last failure %q, want %q", got, want)
	}
}

// Each probe's history states its period and timeout in
// milliseconds (sub-second for an annotation probe), as of its newest run.
func TestPeriodAndTimeoutInMilliseconds(t *testing.T) {
	h := history.New(3)
	r := run("u", 1, runtime.Success, "")
	r.Period, r.Timeout = 200*time.Millisecond, 300*time.Millisecond
	h.ProbeRan(r)
	got := h.Pod("u")
	if len(got) != 1 || got[0].PeriodMS != 200 || got[0].TimeoutMS != 300 {
		t.Fatalf("history %+v, want periodMs 200 timeoutMs 300", got)
	}
}

// A record's message is cut to bound.MessageBytes (both ends
// kept), so a probe's history holds at most --history such messages plus
// its newest failure, whatever its target answers.
func TestMessagesCut(t *testing.T) {
	h := history.New(10)
	long := strings.Repeat("x", 1<<20) + " the end"
	for i := range 20 {
		h.ProbeRan(run("u", i, runtime.Failure, long))
	}
	p := h.Pod("u")[0]
	for _, r := range append(p.Results, *p.LastFailure) {
		if len(r.Message) > bound.MessageBytes || !strings.HasSuffix(r.Message, " the end") {
			t.Fatalf("message of %d bytes", len(r.Message))
		}
	}
}
