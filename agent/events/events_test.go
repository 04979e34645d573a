package events_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/probed/probed/agent/events"
	"github.com/probed/probed/runtime/bound"
)

// IgnoreCurrent: ants starts its package-level default pool at init.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreCurrent()) }

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func ref(container string) *v1.ObjectReference {
	return &v1.ObjectReference{Kind: "Pod", Namespace: "ns1", Name: "web", UID: "uid-1", FieldPath: "spec.containers{" + container + "}"}
}

// TestK4_RecorderKeepsEventsAndFoldsRepeats: events keep the kubelet's
// type, reason and message and the object; consecutive identical events
// (same object, reason, message) fold into one with a count and the last
// time; a different container or message is a new event.
func TestK4_RecorderKeepsEventsAndFoldsRepeats(t *testing.T) {
	clk := testingclock.NewFakePassiveClock(t0)
	var logs bytes.Buffer
	r := events.New(10, slog.New(slog.NewJSONHandler(&logs, nil)), clk)
	r.Eventf(ref("app"), v1.EventTypeWarning, "Unhealthy", "Liveness probe failed: %s", "dial tcp 127.0.0.1:1: connect: connection refused")
	clk.SetTime(t0.Add(time.Second))
	r.Eventf(ref("app"), v1.EventTypeWarning, "Unhealthy", "Liveness probe failed: %s", "dial tcp 127.0.0.1:1: connect: connection refused")
	r.Eventf(ref("other"), v1.EventTypeWarning, "Unhealthy", "Liveness probe failed: %s", "dial tcp 127.0.0.1:1: connect: connection refused")
	r.Eventf(ref("app"), v1.EventTypeNormal, "Killing", "Container app failed liveness probe, will be restarted")
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns1", UID: "uid-1"}}
	r.Eventf(pod, v1.EventTypeWarning, "ProbeWarning", "Readiness probe warning: %s", "Probe terminated redirects")

	got := r.List()
	if len(got) != 4 {
		t.Fatalf("events = %+v, want 4", got)
	}
	if e := got[0]; e.Count != 2 || !e.Time.Equal(t0.Add(time.Second)) || e.Type != "Warning" || e.Reason != "Unhealthy" ||
		e.Message != "Liveness probe failed: dial tcp 127.0.0.1:1: connect: connection refused" || e.FieldPath != "spec.containers{app}" ||
		e.Pod != "web" || e.Namespace != "ns1" || e.PodUID != "uid-1" {
		t.Errorf("folded event = %+v", e)
	}
	if got[1].FieldPath != "spec.containers{other}" || got[1].Count != 1 {
		t.Errorf("event 1 = %+v", got[1])
	}
	if got[2].Reason != "Killing" || got[2].Type != "Normal" {
		t.Errorf("event 2 = %+v", got[2])
	}
	if got[3].Pod != "web" || got[3].PodUID != "uid-1" || got[3].FieldPath != "" {
		t.Errorf("event about a *v1.Pod = %+v", got[3])
	}
	// One log line per Eventf, Warning at WARN, Normal at INFO.
	levels := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		levels[fmt.Sprint(rec["level"], "/", rec["reason"])]++
	}
	if levels["WARN/Unhealthy"] != 3 || levels["INFO/Killing"] != 1 || levels["WARN/ProbeWarning"] != 1 {
		t.Errorf("log lines by level/reason = %v", levels)
	}
}

// TestRecorderIsBounded: the ring keeps the last Size events, oldest first.
func TestRecorderIsBounded(t *testing.T) {
	r := events.New(3, slog.New(slog.DiscardHandler), nil)
	if got := r.List(); len(got) != 0 {
		t.Fatalf("new recorder lists %v", got)
	}
	for i := range 7 {
		r.Eventf(ref("app"), v1.EventTypeWarning, "Unhealthy", "Readiness probe failed: %d", i)
	}
	got := r.List()
	if len(got) != 3 {
		t.Fatalf("%d events, want 3", len(got))
	}
	for i, e := range got {
		if want := fmt.Sprintf("Readiness probe failed: %d", i+4); e.Message != want {
			t.Errorf("event %d = %q, want %q", i, e.Message, want)
		}
	}
	// Folding works across the ring's wrap.
	r.Eventf(ref("app"), v1.EventTypeWarning, "Unhealthy", "Readiness probe failed: %d", 6)
	if got := r.List(); len(got) != 3 || got[2].Count != 2 {
		t.Errorf("after a repeat: %+v", got)
	}
}

// Whoever sends an event, its message is redacted by the one
// rule (runtime/redact) before it is kept, served or logged.
func TestEventMessagesRedacted(t *testing.T) {
	var logs bytes.Buffer
	rec := events.New(10, slog.New(slog.NewJSONHandler(&logs, nil)), testingclock.NewFakePassiveClock(t0))
	rec.Eventf(ref("app"), v1.EventTypeWarning, "Unhealthy", "Readiness probe failed: %s",
		`Get "http://10.0.0.1:8080/x?access_token=EV-TOKEN-1": dial tcp 10.0.0.1:8080: connect: connection refused`)
	rec.Eventf(ref("app"), v1.EventTypeWarning, "ProbeWarning", "Liveness probe warning: sent Authorization: Bearer %s", "EV-BEARER-2")
	rec.Eventf(ref("app"), v1.EventTypeNormal, "Killing", "restarting with DB_PASSWORD=EV-PASSWORD-3")
	list := rec.List()
	if len(list) != 3 {
		t.Fatalf("%d events, want 3", len(list))
	}
	served, _ := json.Marshal(list)
	for _, secret := range []string{"EV-TOKEN-1", "EV-BEARER-2", "EV-PASSWORD-3"} {
		if strings.Contains(string(served), secret) || strings.Contains(logs.String(), secret) {
			t.Errorf("%s shown:\n%s\n%s", secret, served, logs.String())
		}
	}
	if want := `Readiness probe failed: Get "http://10.0.0.1:8080/x?access_token=REDACTED": dial tcp 10.0.0.1:8080: connect: connection refused`; list[0].Message != want {
		t.Errorf("message %q, want %q", list[0].Message, want)
	}
}

// TestTeeSendsEveryEventToEachRecorder: one Eventf through the tee reaches
// the local ring and a second recorder (client-go's FakeRecorder standing
// for the API server's) with the same object, type, reason and message; nil
// recorders are skipped.
func TestTeeSendsEveryEventToEachRecorder(t *testing.T) {
	local := events.New(10, slog.New(slog.DiscardHandler), nil)
	remote := record.NewFakeRecorder(10)
	rec := events.Tee(local, nil, remote)
	rec.Eventf(ref("app"), v1.EventTypeWarning, "Unhealthy", "%s probe failed: %s", "Readiness", "HTTP probe failed with statuscode: 503")
	if got := local.List(); len(got) != 1 || got[0].Message != "Readiness probe failed: HTTP probe failed with statuscode: 503" || got[0].FieldPath != "spec.containers{app}" {
		t.Fatalf("local events = %+v", got)
	}
	select {
	case e := <-remote.Events:
		if e != "Warning Unhealthy Readiness probe failed: HTTP probe failed with statuscode: 503" {
			t.Fatalf("remote event = %q", e)
		}
	default:
		t.Fatal("the second recorder got no event")
	}
	if one := events.Tee(local); one != local {
		t.Errorf("Tee of one recorder = %T, want the recorder itself", one)
	}
}

// TestRecorderFoldsRepeatsAcrossOtherEvents: the kubelet's recorder
// (client-go EventCorrelator) folds an event identical to one it recorded
// before, even with other events between: a crash loop's Unhealthy, Killing
// and BackOff events fold into one each with a count (the time is the last
// one, firstTime the first); an event with another message is kept apart;
// an event the ring has dropped starts again at count 1.
func TestRecorderFoldsRepeatsAcrossOtherEvents(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clk := testingclock.NewFakePassiveClock(t0)
	r := events.New(4, slog.New(slog.DiscardHandler), clk)
	for range 3 {
		r.Eventf(ref("app"), v1.EventTypeWarning, "Unhealthy", "Liveness probe failed: HTTP probe failed with statuscode: 404")
		r.Eventf(ref("app"), v1.EventTypeNormal, "Killing", "Container app failed liveness probe, will be restarted")
		r.Eventf(ref("app"), v1.EventTypeWarning, "BackOff", "Back-off restarting failed container app in pod web_ns(uid-1)")
		clk.SetTime(clk.Now().Add(10 * time.Second))
	}
	got := r.List()
	if len(got) != 3 {
		t.Fatalf("%d events, want 3 folded: %+v", len(got), got)
	}
	for _, e := range got {
		if e.Count != 3 || !e.FirstTime.Equal(t0) || !e.Time.Equal(t0.Add(20*time.Second)) {
			t.Errorf("event %s: count %d, first %v, last %v; want 3, %v, %v", e.Reason, e.Count, e.FirstTime, e.Time, t0, t0.Add(20*time.Second))
		}
	}
	r.Eventf(ref("app"), v1.EventTypeWarning, "Unhealthy", "Liveness probe failed: other")
	r.Eventf(ref("other"), v1.EventTypeWarning, "BackOff", "Back-off restarting failed container app in pod web_ns(uid-1)")
	// The ring (4) dropped the first Unhealthy: its repeat is new.
	r.Eventf(ref("app"), v1.EventTypeWarning, "Unhealthy", "Liveness probe failed: HTTP probe failed with statuscode: 404")
	got = r.List()
	if len(got) != 4 || got[3].Reason != "Unhealthy" || got[3].Count != 1 || got[0].Reason != "BackOff" || got[0].Count != 3 {
		t.Errorf("after other messages and a drop: %+v", got)
	}
}

// An event's message is cut to bound.MessageBytes (keeping
// both ends) before it is kept or logged, whoever sent it; events recorded
// through Unlogged land in the same ring, folded alike, with no log line.
func TestMessagesCutAndUnloggedEvents(t *testing.T) {
	var logs bytes.Buffer
	r := events.New(10, slog.New(slog.NewJSONHandler(&logs, nil)), testingclock.NewFakePassiveClock(t0))
	long := "Readiness probe failed: Get \"http://10.0.0.1/" + strings.Repeat("a", 250_000) + "\": connection refused"
	r.Eventf(ref("app"), v1.EventTypeWarning, "Unhealthy", "%s", long)
	quiet := r.Unlogged()
	for range 5 {
		quiet.Eventf(ref("side"), v1.EventTypeWarning, "Unhealthy", "%s", "Readiness probe failed: refused")
	}
	list := r.List()
	if len(list) != 2 || len(list[0].Message) > bound.MessageBytes || !strings.HasSuffix(list[0].Message, "connection refused") ||
		list[1].Count != 5 || list[1].FieldPath != "spec.containers{side}" {
		t.Fatalf("events %+v", list)
	}
	if n := strings.Count(logs.String(), "\n"); n != 1 || logs.Len() > 2*bound.MessageBytes {
		t.Errorf("%d log lines (%d bytes), want the one of Eventf, cut:\n%.500s", n, logs.Len(), logs.String())
	}
}
