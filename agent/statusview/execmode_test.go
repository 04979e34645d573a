package statusview_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/probed/probed/agent/history"
	"github.com/probed/probed/agent/output"
	"github.com/probed/probed/agent/statusview"
)

// -o wide says how each exec probe runs: its mode in
// parentheses after container/type; other kinds have none. -o json
// carries it as execMode.
func TestPrintWideExecMode(t *testing.T) {
	pods := []v1.Pod{{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "web"}, Status: v1.PodStatus{Phase: v1.PodRunning}}}
	hists := map[string][]history.Probe{"demo/web": {
		{Container: "app", Type: "liveness", Handler: "exec", ExecMode: "resident", Results: []history.Record{{Result: "success"}}},
		{Container: "app", Type: "readiness", Handler: "exec", ExecMode: "execsync (no sh in the container's PATH)", Results: []history.Record{{Result: "failure"}}},
		{Container: "app", Type: "startup", Handler: "http", Results: []history.Record{{Result: "success"}}},
	}}
	stub := newAgentStub(t, pods, hists)
	var buf bytes.Buffer
	if err := statusview.Print(context.Background(), statusview.Options{Server: stub.srv.URL, Output: output.Wide, Now: func() time.Time { return now }}, &buf); err != nil {
		t.Fatal(err)
	}
	want := "app/liveness(resident)=success,app/readiness(execsync (no sh in the container's PATH))=failure,app/startup=success"
	if !strings.Contains(buf.String(), want) {
		t.Fatalf("-o wide:\n%s\nwant %s", buf.String(), want)
	}
	buf.Reset()
	if err := statusview.Print(context.Background(), statusview.Options{Server: stub.srv.URL, Output: output.JSON, Now: func() time.Time { return now }}, &buf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `"execMode": "resident"`) || strings.Count(buf.String(), `"execMode"`) != 2 {
		t.Fatalf("-o json:\n%s", buf.String())
	}
}
