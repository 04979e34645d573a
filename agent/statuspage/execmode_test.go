package statuspage_test

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/probed/probed/agent/history"
)

// The index and the pod's page say how an exec probe runs,
// beside its kind; other kinds say nothing more.
func TestExecModeShown(t *testing.T) {
	p := pod("default", "web", v1.Container{Name: "app", ReadinessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}}},
		LivenessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{}}}})
	f := &fixture{specProbe: true, pods: []*v1.Pod{p}, hist: map[string][]history.Probe{"default/web": {
		{Container: "app", Type: "readiness", Handler: "exec", ExecMode: "resident", Results: []history.Record{run(0, "success", 2, "")}},
		{Container: "app", Type: "liveness", Handler: "tcp", Results: []history.Record{run(0, "success", 1, "")}},
	}}}
	srv := f.serve(t)
	_, _, body := get(t, srv, "/")
	if got := cell(t, body, "default/web", "app/readiness", "kind"); got != "exec (resident)" {
		t.Errorf("index: exec probe's kind cell %q, want %q", got, "exec (resident)")
	}
	if got := cell(t, body, "default/web", "app/liveness", "kind"); got != "tcp" {
		t.Errorf("index: tcp probe's kind cell %q", got)
	}
	_, _, page := get(t, srv, "/pod/default/web")
	if !strings.Contains(page, `<span class="kind">exec <span class="exec-mode">(resident)</span></span>`) {
		t.Errorf("the pod's page does not say resident:\n%s", page)
	}
}
